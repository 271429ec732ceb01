#include "tapegrad/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

std::unique_ptr<Optimizer<float>> new_optimizer(const TrainConfig& c, std::vector<Parameter<float>*> params) {
  if (c.optimizer == OptimizerKind::sgd)
    return std::make_unique<SGD<float>>(std::move(params), SgdOptions{.lr = c.lr, .momentum = c.momentum});
  return std::make_unique<Adam<float>>(std::move(params), AdamOptions{.lr = c.lr});
}

std::unique_ptr<LrSchedule> make_schedule(const TrainConfig& c) {
  if (!c.cosine || c.steps == 0) return std::make_unique<ConstantLr>(c.lr);  // no step to schedule
  return std::make_unique<CosineWithWarmup>(c.lr, std::max<std::int64_t>(1, c.steps / 20), c.steps);
}

// "NaN", "Inf" or "-Inf" (fmt would print a NaN with its sign bit as "-nan").
std::string non_finite(double v) { return std::isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf"; }

const TrainConfig& checked(const TrainConfig& c) {
  if (c.steps < 0 || c.batch <= 0 || c.eval_every <= 0)
    fail<ValueError>("train: steps must be >= 0 and batch and eval_every positive, got {}, {} and {}", c.steps, c.batch,
                     c.eval_every);
  if (!(c.lr > 0) || !std::isfinite(c.lr)) fail<ValueError>("train: the learning rate must be positive, got {}", c.lr);
  if (!(c.clip >= 0)) fail<ValueError>("train: clip must be >= 0 (0 turns clipping off), got {}", c.clip);
  return c;
}

}  // namespace

std::string_view to_string(OptimizerKind k) { return k == OptimizerKind::sgd ? "sgd" : "adam"; }

OptimizerKind parse_optimizer_kind(std::string_view name) {
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "adam") return OptimizerKind::adam;
  fail<NameError>("optimizer: unknown optimizer '{}'; choose sgd or adam", name);
}

std::string TrainConfig::describe() const {
  return fmt::format("{} steps of batch {}, {} lr {:g}{}{}{}, seed {}", steps, batch, to_string(optimizer), lr,
                     optimizer == OptimizerKind::sgd ? fmt::format(" momentum {:g}", momentum) : "",
                     cosine ? " (cosine)" : "", clip > 0 ? fmt::format(", clip {:g}", clip) : "", seed);
}

void count_correct(const Tensor& logits, const Ids& targets, Index& correct, Index& labelled) {
  const auto z = logits.flat();
  for (Index r = 0; r < z.rows(); ++r) {
    const std::int32_t target = targets[r];
    if (target == kIgnoreLabel) continue;
    Index best = 0;
    z.row(r).maxCoeff(&best);
    correct += best == target ? 1 : 0;
    ++labelled;
  }
}

Trainer::Trainer(ToyModel<float>& model, const Dataset& train, const Dataset* eval, const TrainConfig& config)
    : model_(model),
      train_(train),
      eval_(eval),
      config_(checked(config)),
      optimizer_(new_optimizer(config_, model.parameters())),
      schedule_(make_schedule(config_)),
      sampler_(train.size(), config.batch, config.seed),
      length_(std::max(train.max_len(), eval ? eval->max_len() : 0)),
      start_seconds_(now_seconds()) {
  if (train.labelled_positions() == 0) fail<ValueError>("train: dataset '{}' has no labelled positions", train.name);
  if (length_ > model.config().max_len)
    fail<ShapeError>("train: '{}' has sequences of {} tokens but the model takes at most {}", train.name, length_,
                     model.config().max_len);
  tape_.set_anomaly_detection(config_.anomaly);
  model_.zero_grad();
}

Trainer::~Trainer() = default;

double Trainer::step() {
  make_batch(train_, sampler_.next(), length_, batch_);
  tape_.reset();
  Var<float> logits;
  Var<float> loss = model_.loss(tape_, batch_, &logits);
  const double value = loss.value()[0];
  const double lr = schedule_->lr_at(step_);
  if (!std::isfinite(value))
    fail<ValueError>("train: the loss is {} at step {} (lr {:g}); lower the learning rate, clip gradients, or turn on "
                     "anomaly detection to name the first op that produced it",
                     non_finite(value), step_ + 1, lr);
  tape_.backward(loss);
  if (config_.clip > 0) {
    const double norm = clip_grad_norm(optimizer_->params(), config_.clip);
    if (!std::isfinite(norm))
      fail<ValueError>("train: the gradient norm is {} at step {} (lr {:g}); turn on anomaly detection to name the "
                       "op whose backward produced it",
                       non_finite(norm), step_ + 1, lr);
  }
  optimizer_->set_lr(lr);
  optimizer_->step();
  optimizer_->zero_grad();
  ++step_;
  window_loss_ += value;
  ++window_steps_;
  count_correct(logits.value(), batch_.targets, window_correct_, window_labelled_);
  return value;
}

Evaluation Trainer::evaluate(const Dataset& data) {
  NoGradGuard<float> guard(eval_tape_);
  const Index chunk = 256;
  std::vector<Index> indices;
  Batch batch;
  Evaluation e;
  Index correct = 0;
  double loss_sum = 0;
  for (Index start = 0; start < data.size(); start += chunk) {
    indices.resize(static_cast<std::size_t>(std::min(chunk, data.size() - start)));
    std::iota(indices.begin(), indices.end(), start);
    make_batch(data, indices, length_, batch);
    eval_tape_.reset();
    Var<float> logits;
    Var<float> loss = model_.loss(eval_tape_, batch, &logits);
    Index labelled = 0;
    count_correct(logits.value(), batch.targets, correct, labelled);
    loss_sum += static_cast<double>(loss.value()[0]) * static_cast<double>(labelled);  // undo the per-batch mean
    e.labelled += labelled;
  }
  e.loss = e.labelled > 0 ? loss_sum / static_cast<double>(e.labelled) : 0;
  e.accuracy = e.labelled > 0 ? static_cast<double>(correct) / static_cast<double>(e.labelled) : 0;
  return e;
}

CurvePoint Trainer::record_point() {
  CurvePoint p;
  p.step = step_;
  p.train_loss = window_steps_ > 0 ? window_loss_ / static_cast<double>(window_steps_) : std::nan("");
  p.train_accuracy = window_labelled_ > 0 ? static_cast<double>(window_correct_) / static_cast<double>(window_labelled_) : std::nan("");
  if (eval_) {
    const Evaluation e = evaluate(*eval_);
    p.eval_loss = e.loss;
    p.eval_accuracy = e.accuracy;
  } else {
    p.eval_loss = p.eval_accuracy = std::numeric_limits<double>::quiet_NaN();
  }
  p.lr = optimizer_->lr();
  p.seconds = now_seconds() - start_seconds_;
  window_loss_ = 0;
  window_correct_ = window_labelled_ = window_steps_ = 0;
  curve_.push_back(p);
  return p;
}

void Trainer::run(const TrainCallbacks& callbacks) {
  if (curve_.empty() && step_ == 0) {  // where training starts from (no training loss yet)
    const CurvePoint p = record_point();
    if (callbacks.on_evaluation) callbacks.on_evaluation(p);
  }
  while (step_ < config_.steps) {
    step();
    if (step_ % config_.eval_every == 0 || step_ == config_.steps) {
      const CurvePoint p = record_point();
      if (callbacks.on_evaluation) callbacks.on_evaluation(p);
    }
    // After the evaluation: a checkpoint taken here holds that step's curve point and the fresh window.
    if (callbacks.on_step) callbacks.on_step(step_);
  }
}

TrainerState Trainer::state() const {
  return {step_, sampler_.state(), window_loss_, window_correct_, window_labelled_, window_steps_, curve_};
}

void Trainer::check_state(const TrainerState& s) const {
  if (s.step < 0 || s.window_steps < 0 || s.window_correct < 0 || s.window_labelled < s.window_correct)
    fail<ValueError>("trainer: the saved state is inconsistent (step {}, {} correct of {} labelled over {} steps)", s.step,
                     s.window_correct, s.window_labelled, s.window_steps);
  sampler_.check_state(s.data_order);
}

void Trainer::set_state(const TrainerState& s) {
  check_state(s);
  sampler_.set_state(s.data_order);
  step_ = s.step;
  window_loss_ = s.window_loss;
  window_correct_ = s.window_correct;
  window_labelled_ = s.window_labelled;
  window_steps_ = s.window_steps;
  curve_ = s.curve;
}

Index Trainer::steps_to(double target) const {
  for (const auto& p : curve_)
    if (p.step > 0 && p.eval_accuracy >= target) return p.step;
  return -1;
}

}  // namespace tapegrad
