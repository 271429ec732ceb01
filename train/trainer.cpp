#include "tapegrad/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/crc32.hpp"

namespace tapegrad {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "NaN", "Inf" or "-Inf" (fmt would print a NaN with its sign bit as "-nan").
std::string non_finite(double v) { return std::isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf"; }

const TrainOptions& checked(const TrainOptions& o) {
  check_fields(o, "train");
  return o;
}

constexpr std::uint64_t kTrainingStream = 0x747261696e;  // "train": the Rng stream of rng()
constexpr std::uint64_t kShardStream = 0x7368617264;     // "shard": + rank, a rank's stream of one step

// A CRC-32 of every parameter's values, in the model's order.
std::uint32_t parameters_crc32(const std::vector<Parameter<float>*>& params) {
  Crc32 crc;
  for (const Parameter<float>* p : params) crc.add(p->value.data(), static_cast<std::size_t>(p->value.numel()) * sizeof(float));
  return crc.value();
}

// "1, 3" for a list of ranks.
std::string rank_list(const std::vector<int>& ranks) { return fmt::format("{}", fmt::join(ranks, ", ")); }

std::string shortened(const std::string& text) { return text.size() <= 300 ? text : text.substr(0, 300) + " ..."; }

}  // namespace

std::string TrainOptions::describe() const {
  return fmt::format("{} steps of batch {}, evaluation every {}, seed {}{}", steps, batch, eval_every, seed,
                     clip > 0 ? fmt::format(", clip {:g}", clip) : "");
}

Index first_step_reaching(const std::vector<CurvePoint>& curve, std::string_view name, double target) {
  for (const auto& p : curve)
    if (p.step > 0 && value_of(p.values, name) >= target) return p.step;
  return -1;
}

namespace detail {
void check_loss(double loss, Index step, double lr) {
  if (!std::isfinite(loss))
    fail<NonFiniteError>("train: the loss is {} at step {} (lr {:g}); the step was not taken", non_finite(loss), step, lr);
}
}  // namespace detail

TrainerBase::TrainerBase(Module<float>& model, Optimizer<float>& optimizer, Index train_size, std::uint32_t fingerprint,
                         TrainOptions options)
    : model_(model),
      registered_(registered_sorted(std::as_const(model))),
      optimizer_(optimizer),
      options_(checked(options)),
      data_fingerprint_(fingerprint),
      sampler_(train_size, options_.batch, options_.seed),
      rng_(options_.seed, kTrainingStream),
      start_seconds_(now_seconds()) {
  model_.set_rng(&rng_);  // dropout draws from the stream checkpoints save
  tape_.set_anomaly_detection(options_.anomaly);
  optimizer_.zero_grad();
}

TrainerBase::~TrainerBase() {
  if (model_.rng() == &rng_ || model_.rng() == &shard_rng_) model_.set_rng(nullptr);  // the streams die with the trainer
}

Rng::State TrainerBase::initial_rng_state(std::uint64_t seed) { return Rng(seed, kTrainingStream).state(); }

void TrainerBase::set_steps(Index steps) {
  if (steps < 0 || static_cast<double>(steps) > TrainOptions::kMaxSteps)
    fail<ValueError>("train: steps must be in [0, {}], got {}", to_text(TrainOptions::kMaxSteps), steps);
  options_.steps = steps;
}

void TrainerBase::add_metric_name(std::string name) {
  if (step_ > 0 || !curve_.empty())
    fail<UsageError>("add_metric: '{}' comes after training started; add metrics before the first step", name);
  if (name.empty() || name == "loss" || std::find(metric_names_.begin(), metric_names_.end(), name) != metric_names_.end())
    fail<NameError>("add_metric: '{}' is {}", name, name.empty() ? "an empty name" : name == "loss" ? "reserved for the loss" : "already a metric");
  metric_names_.push_back(name);
  window_metrics_.push_back({std::move(name), {}});
}

double TrainerBase::finish_step(Var<float> loss) {
  const double value = loss.value()[0];
  const double lr = optimizer_.current_lr();
  detail::check_loss(value, step_ + 1, lr);
  check_registered(tape_, std::span<const Parameter<float>* const>(registered_));  // before any gradient is added
  tape_.backward(loss);
  update(value, lr);
  return value;
}

void TrainerBase::update(double loss, double lr) {
  if (options_.clip > 0) {
    const double norm = clip_grad_norm(optimizer_.params(), options_.clip);
    if (!std::isfinite(norm)) {
      optimizer_.zero_grad();  // nothing of this step stays behind
      fail<NonFiniteError>("train: the gradient norm is {} at step {} (lr {:g}); the step was not taken", non_finite(norm),
                           step_ + 1, lr);
    }
  }
  optimizer_.step();
  optimizer_.zero_grad();
  ++step_;
  window_loss_ += loss;
  ++window_steps_;
}

// ---- data-parallel ---------------------------------------------------------------------------------

Shard shard_of(Index n, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size || n < 0)
    fail<ValueError>("shard_of: rank {} of {} ranks, {} items: needs 0 <= rank < ranks and items >= 0", rank, size, n);
  const Index r = rank, s = size, base = n / s, extra = n % s;
  const Index begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

void TrainerBase::set_collective(Collective* collective, DataParallelOptions options) {
  if (options.check_every < 1) fail<ValueError>("set_collective: check_every must be >= 1, got {}", options.check_every);
  collective_ = collective;
  parallel_options_ = options;
  parallel_started_ = false;
  model_.set_rng(data_parallel() ? &shard_rng_ : &rng_);
}

std::span<const Index> TrainerBase::next_shard() {
  const std::span<const Index> batch = sampler_.next();
  // Every rank draws the step's seed from the training stream, whatever its shard, so the stream (which a
  // checkpoint saves) stays the same on every rank.
  shard_rng_ = Rng(rng_.next_u64(), kShardStream + static_cast<std::uint64_t>(collective_->rank()));
  const Shard part = shard_of(static_cast<Index>(batch.size()), collective_->rank(), collective_->size());
  return batch.subspan(static_cast<std::size_t>(part.begin), static_cast<std::size_t>(part.size()));
}

// Forward was a mean over this rank's shard (weight w_r): loss_r, g_r. The global batch's mean is
// sum_r w_r loss_r / sum_r w_r, and its gradient sum_r w_r g_r / sum_r w_r, so every rank sends w_r g_r,
// w_r loss_r, w_r and its metric tallies in one buffer, summed in one all-reduce.
double TrainerBase::finish_parallel_step(Var<float> loss, double weight) {
  const std::vector<Parameter<float>*>& params = optimizer_.params();
  if (loss.tape) {
    check_registered(tape_, std::span<const Parameter<float>* const>(registered_));
    tape_.backward(loss);
  }
  const auto w = static_cast<float>(weight);
  float* at = fused_.data();
  for (const Parameter<float>* p : params) {
    auto slot = Eigen::Map<Eigen::ArrayXf>(at, p->grad.numel());
    if (loss.tape)
      slot = p->grad.array() * w;
    else
      slot.setZero();
    at += p->grad.numel();
  }
  at[0] = loss.tape ? loss.value()[0] * w : 0.0f;
  at[1] = w;
  for (std::size_t k = 0; k < step_tallies_.size(); ++k) {
    at[2 + 2 * k] = static_cast<float>(step_tallies_[k].sum);
    at[3 + 2 * k] = static_cast<float>(step_tallies_[k].count);
  }
  collective_->all_reduce_sum(std::span<float>(fused_));

  const double total_weight = at[1];
  const double value = static_cast<double>(at[0]) / total_weight;  // NaN if no rank had anything to weigh
  const double lr = optimizer_.current_lr();
  if (!std::isfinite(value)) {
    optimizer_.zero_grad();  // every rank stops here, with the same value
    detail::check_loss(value, step_ + 1, lr);
  }
  const auto inverse = static_cast<float>(1.0 / total_weight);
  at = fused_.data();
  for (Parameter<float>* p : params) {
    p->grad.array() = Eigen::Map<const Eigen::ArrayXf>(at, p->grad.numel()) * inverse;
    at += p->grad.numel();
  }
  update(value, lr);  // clipping reads the reduced gradient: every rank clips, or stops, alike
  for (std::size_t k = 0; k < window_metrics_.size(); ++k)
    window_metrics_[k].tally += Tally{at[2 + 2 * k], at[3 + 2 * k]};
  if (step_ % parallel_options_.check_every == 0) check_replicas();
  return value;
}

Shard TrainerBase::eval_shard(Index n) const {
  return data_parallel() ? shard_of(n, collective_->rank(), collective_->size()) : Shard{0, n};
}

void TrainerBase::reduce_eval_sums(std::vector<double>& sums) { collective_->all_reduce_sum(std::span<double>(sums)); }

void TrainerBase::check_replicas() {
  const std::uint32_t mine = parameters_crc32(optimizer_.params());
  collective_->all_gather(std::span<const std::uint32_t>(&mine, 1), std::span<std::uint32_t>(replica_crcs_));
  std::vector<int> differ;
  for (std::size_t r = 1; r < replica_crcs_.size(); ++r)
    if (replica_crcs_[r] != replica_crcs_[0]) differ.push_back(static_cast<int>(r));
  if (!differ.empty())
    fail<DivergenceError>("data-parallel: after step {} the parameters of rank{} {} differ from rank 0's (crc32 {:08x} on "
                          "rank 0, {:08x} on rank {}); the replicas diverged",
                          step_, differ.size() > 1 ? "s" : "", rank_list(differ), replica_crcs_[0],
                          replica_crcs_[static_cast<std::size_t>(differ[0])], differ[0]);
}

// What must be the same on every rank for the replicas to stay the same, each as a text (shown when it
// differs) whose CRC-32 the ranks compare.
std::vector<std::pair<std::string, std::string>> TrainerBase::parallel_configuration() const {
  std::vector<std::string> options, shapes;
  for (const auto& s : to_settings(options_)) options.push_back(fmt::format("{} {}", s.name, s.value));
  for (const Parameter<float>* p : optimizer_.params()) shapes.push_back(fmt::format("{} {}", p->name, p->value.shape().str()));
  const Sampler::State order = sampler_.state();
  Crc32 order_crc, rng_crc;
  for (Index i : order.order) order_crc.add_le(static_cast<std::uint64_t>(i));
  for (std::uint64_t word : order.rng.words) order_crc.add_le(word);
  for (std::uint64_t word : rng_.state().words) rng_crc.add_le(word);
  return {
      {"training options", fmt::format("{}", fmt::join(options, ", "))},
      {"model", model_.model_record().describe()},
      {"parameters", fmt::format("{} tensors ({})", shapes.size(), fmt::join(shapes, ", "))},
      {"optimizer", fmt::format("{} after {} steps", optimizer_.describe(), optimizer_.steps_taken())},
      {"training data", fmt::format("{} examples, fingerprint {:08x}", sampler_.state().order.size(), data_fingerprint_)},
      {"evaluation data", eval_fingerprint_ ? fmt::format("fingerprint {:08x}", *eval_fingerprint_) : std::string("none")},
      {"metrics", metric_names_.empty() ? std::string("none") : fmt::format("{}", fmt::join(metric_names_, ", "))},
      {"training state", fmt::format("step {}, data order at epoch {} position {} (crc32 {:08x}), random stream crc32 {:08x}",
                                     step_, order.epoch, order.cursor, order_crc.value(), rng_crc.value())},
  };
}

void TrainerBase::start_group() {
  const int rank = collective_->rank(), size = collective_->size();
  const auto config = parallel_configuration();
  std::vector<std::uint32_t> mine, all(config.size() * static_cast<std::size_t>(size));
  for (const auto& [what, text] : config) mine.push_back(Crc32().add(text.data(), text.size()).value());
  collective_->all_gather(mine, all);
  // The first part that differs anywhere: every rank finds the same one, takes rank 0's text of it and
  // refuses to start, naming the ranks that differ.
  for (std::size_t k = 0; k < config.size(); ++k) {
    std::vector<int> differ;
    for (int r = 1; r < size; ++r)
      if (all[static_cast<std::size_t>(r) * config.size() + k] != all[k]) differ.push_back(r);
    if (differ.empty()) continue;
    std::string first = config[k].second;
    std::uint64_t length = first.size();
    collective_->broadcast(std::as_writable_bytes(std::span(&length, 1)), 0);
    first.resize(length);
    collective_->broadcast(std::as_writable_bytes(std::span(first.data(), first.size())), 0);
    const bool odd = mine[k] != all[k];
    fail<ValueError>("data-parallel: the ranks were started with different {}: rank{} {} differ{} from rank 0{}; rank 0 has: {}",
                     config[k].first, differ.size() > 1 ? "s" : "", rank_list(differ), differ.size() > 1 ? "" : "s",
                     odd ? fmt::format(" (rank {} has: {})", rank, shortened(config[k].second)) : "", shortened(first));
  }
  // The same configuration: rank 0's weights everywhere (a fresh model's initialisation may depend on
  // more than its configuration: a user's seedless init).
  for (Parameter<float>* p : optimizer_.params()) collective_->broadcast(std::as_writable_bytes(p->value.span()), 0);
  const std::size_t values = static_cast<std::size_t>(model_.parameter_count());
  fused_.assign(values + 2 + 2 * metric_names_.size(), 0.0f);
  step_tallies_.assign(metric_names_.size(), Tally{});
  replica_crcs_.assign(static_cast<std::size_t>(size), 0);
  parallel_started_ = true;
}

CurvePoint TrainerBase::record_point() {
  CurvePoint p;
  p.step = step_;
  p.values.push_back({"train_loss", Tally{window_loss_, static_cast<double>(window_steps_)}.mean()});
  for (const auto& w : window_metrics_) p.values.push_back({"train_" + w.name, w.tally.mean()});
  if (has_eval())
    for (const auto& v : evaluate_for_curve()) p.values.push_back({"eval_" + v.name, v.value});
  p.lr = step_ > 0 ? optimizer_.schedule().lr_at(optimizer_.lr(), step_ - 1) : optimizer_.current_lr();
  p.seconds = now_seconds() - start_seconds_;
  window_loss_ = 0;
  window_steps_ = 0;
  for (auto& w : window_metrics_) w.tally = {};
  curve_.push_back(p);
  return p;
}

void TrainerBase::run(const TrainCallbacks& callbacks) {
  stop_requested_ = false;
  start_parallel();
  if (curve_.empty() && step_ == 0) {  // where training starts from (no training loss yet)
    const CurvePoint p = record_point();
    if (callbacks.on_evaluation) callbacks.on_evaluation(p);
  }
  while (step_ < options_.steps && !stop_requested_) {
    step();
    if (step_ % options_.eval_every == 0 || step_ == options_.steps) {
      const CurvePoint p = record_point();
      if (callbacks.on_evaluation) callbacks.on_evaluation(p);
    }
    // After the evaluation: a checkpoint taken here holds that step's curve point and the fresh window.
    if (callbacks.on_step) callbacks.on_step(step_);
  }
  if (data_parallel()) check_replicas();
}

TrainerState TrainerBase::state() const {
  TrainerState s;
  s.options = options_;
  s.step = step_;
  s.data_fingerprint = data_fingerprint_;
  s.eval_fingerprint = eval_fingerprint_;
  s.data_order = sampler_.state();
  s.rng = rng_.state();
  s.window_loss = window_loss_;
  s.window_steps = window_steps_;
  s.window_metrics = window_metrics_;
  s.curve = curve_;
  return s;
}

void TrainerBase::check_state(const TrainerState& s) const {
  const std::uint32_t fingerprint = s.from_format1 ? format1_fingerprint() : data_fingerprint_;
  if (s.data_fingerprint != fingerprint)
    fail<ValueError>("resume: the training data differs from the data the checkpoint was trained on (fingerprint "
                     "{:08x} in the file, {:08x} now)",
                     s.data_fingerprint, fingerprint);
  const auto text = [](std::optional<std::uint32_t> f) { return f ? fmt::format("{:08x}", *f) : std::string("none"); };
  if (!s.from_format1 && s.eval_fingerprint != eval_fingerprint_)
    fail<ValueError>("resume: the evaluation data differs from the checkpoint's (fingerprint {} in the file, {} now); "
                     "one curve must not mix two evaluation sets",
                     text(s.eval_fingerprint), text(eval_fingerprint_));
  // Every option but steps (a run may be extended) and anomaly (a debugging aid) shapes the run.
  std::vector<std::string> differ;
  TrainOptions mine = options_, theirs = s.options;
  mine.steps = theirs.steps;
  mine.anomaly = theirs.anomaly;
  const Settings a = to_settings(theirs), b = to_settings(mine);
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].value != b[i].value)
      differ.push_back(fmt::format("{} is {} in the file but {} in the trainer", a[i].name, a[i].value, b[i].value));
  if (!differ.empty()) fail<ValueError>("resume: {}", fmt::join(differ, "; "));
  std::vector<std::string> names;
  for (const auto& w : s.window_metrics) names.push_back(w.name);
  if (names != metric_names_)
    fail<ValueError>("resume: the checkpoint measured the metrics [{}], the trainer measures [{}]", fmt::join(names, ", "),
                     fmt::join(metric_names_, ", "));
  const bool tallies_ok = std::all_of(s.window_metrics.begin(), s.window_metrics.end(), [](const MetricWindow& w) {
    return std::isfinite(w.tally.sum) && std::isfinite(w.tally.count) && w.tally.count >= 0;
  });
  if (s.step < 0 || s.window_steps < 0 || s.window_steps > s.step || !std::isfinite(s.window_loss) || !tallies_ok)
    fail<ValueError>("resume: the saved state is inconsistent (step {}, a window of {} steps, loss sum {})", s.step,
                     s.window_steps, s.window_loss);
  sampler_.check_state(s.data_order);
  Rng probe;
  probe.set_state(s.rng);  // the generator's own check of its state
}

void TrainerBase::set_state(const TrainerState& s) {
  check_state(s);
  sampler_.set_state(s.data_order);
  rng_.set_state(s.rng);
  step_ = s.step;
  window_loss_ = s.window_loss;
  window_steps_ = s.window_steps;
  window_metrics_ = s.window_metrics;
  curve_ = s.curve;
  parallel_started_ = false;  // the ranks compare the new state before they go on
}

template class Trainer<SequenceBatch>;
template class Trainer<TensorBatch>;

}  // namespace tapegrad
