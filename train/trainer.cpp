#include "tapegrad/train/trainer.hpp"

#include "tapegrad/train/data_parallel.hpp"

namespace tapegrad {
namespace {

// "NaN", "Inf" or "-Inf" (fmt would print a NaN with its sign bit as "-nan").
std::string non_finite(double v) { return std::isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf"; }

// A step that met a non-finite `what` (the loss, the gradient norm) stops, and nothing of it stays behind,
// on any process (finish_step clears its gradients however it ends).
[[noreturn]] void stop_step(std::string_view what, double value, Index step, double lr) {
  fail<NonFiniteError>("train: the {} is {} at step {} (lr {:g}); the step was not taken", what, non_finite(value),
                       step, lr);
}

const TrainOptions& checked(const TrainOptions& o) {
  check_fields(o, "train");
  return o;
}

constexpr std::uint64_t kTrainingStream = 0x747261696e;  // "train": the Rng stream of rng()

}  // namespace

std::optional<Index> first_step_reaching(const std::vector<CurvePoint>& curve, std::string_view name, double target) {
  for (const auto& p : curve)
    if (p.step > 0 && value_of(p.values, name) >= target) return p.step;
  return std::nullopt;
}

TrainerBase::TrainerBase(Module<float>& model, Optimizer<float>& optimizer, Index train_size, std::uint32_t fingerprint,
                         TrainOptions options)
    : model_(model),
      registered_(registered_sorted(std::as_const(model))),
      optimizer_(optimizer),
      state_{.options = checked(options), .data_fingerprint = fingerprint},
      sampler_(train_size, options.batch, options.seed),
      rng_(options.seed, kTrainingStream) {
  set_reducer(nullptr);           // SingleProcess: dropout draws from the stream checkpoints save
  tape_.set_release_grads(true);  // nothing reads a step's inner gradients: the walk holds the live ones only
  optimizer_.zero_grad();
}

TrainerBase::~TrainerBase() {
  if (model_.rng() == &rng_ || model_.rng() == &reducer_->step_stream(rng_))
    model_.set_rng(nullptr);  // the streams die with the trainer
}

Rng::State TrainerBase::initial_rng_state(std::uint64_t seed) { return Rng(seed, kTrainingStream).state(); }

void TrainerBase::add_metric_name(std::string name) {
  if (state_.step > 0 || !state_.curve.empty())
    fail<UsageError>("add_metric: '{}' comes after training started; add metrics before the first step", escaped(name));
  if (name.empty() || name == "loss" || name.size() > kMaxMetricName ||
      std::find(metric_names_.begin(), metric_names_.end(), name) != metric_names_.end())
    fail<NameError>("add_metric: '{}' is {}", escaped(name),
                    name.empty()                   ? "an empty name"
                    : name == "loss"               ? "reserved for the loss"
                    : name.size() > kMaxMetricName ? fmt::format("longer than {} bytes", kMaxMetricName)
                                                   : "already a metric");
  metric_names_.push_back(name);
  state_.window_metrics.push_back({std::move(name), {}});
}

double TrainerBase::finish_step(Var<float> loss, double weight, std::span<Tally> tallies) {
  // However the step ends (updated, stopped, or thrown out of part way: anomaly mode or a user's op refusing
  // in backward, a reducer's refusal), none of its gradients outlive it: every step, on every process, starts
  // from zeros (the next backward adds onto nothing stale; a process that computes nothing sends zeros).
  const detail::AtExit cleared{[this] { optimizer_.zero_grad(); }};
  std::optional<double> mine;
  if (loss.tape) {
    mine = loss.value()[0];
    if (std::isfinite(*mine)) {  // a non-finite loss computes nothing more: the step stops below
      check_registered(tape_, std::span<const Parameter<float>* const>(registered_));  // before any gradient is added
      tape_.backward(loss);
    }
  }
  const std::vector<Parameter<float>*>& params = optimizer_.params();
  const double value = reducer_->reduce(params, mine, weight, tallies);
  const double lr = optimizer_.current_lr();
  if (!std::isfinite(value)) stop_step("loss", value, state_.step + 1, lr);
  // Clipping reads the reduced gradient: every process clips, or stops, alike.
  if (state_.options.clip > 0) {
    const double norm = clip_grad_norm(params, state_.options.clip);
    if (!std::isfinite(norm)) stop_step("gradient norm", norm, state_.step + 1, lr);
  }
  optimizer_.step();
  ++state_.step;
  state_.window_loss += value;
  ++state_.window_steps;
  for (std::size_t k = 0; k < state_.window_metrics.size(); ++k) state_.window_metrics[k].tally += tallies[k];
  reducer_->after_step(params, state_.step);
  return value;
}

void TrainerBase::set_reducer(std::unique_ptr<StepReducer> reducer) {
  reducer_ = reducer ? std::move(reducer) : std::make_unique<SingleProcess>();
  model_.set_rng(&reducer_->step_stream(rng_));
}

void TrainerBase::set_collective(Collective* collective, DataParallelOptions options) {
  set_reducer(collective ? reducer_for(*collective, options) : nullptr);
}

void TrainerBase::run(const TrainCallbacks& callbacks) {
  stop_requested_ = false;
  reducer_->start(*this);
  const auto evaluate = [&] {  // a curve point: the window's means and the evaluation; a fresh window
    CurvePoint p;
    p.step = state_.step;
    p.values.push_back({"train_loss", Tally{state_.window_loss, static_cast<double>(state_.window_steps)}.mean()});
    for (const auto& w : state_.window_metrics) p.values.push_back({"train_" + w.name, w.tally.mean()});
    for (auto& v : evaluate_for_curve()) p.values.push_back(std::move(v));  // "eval_loss", "eval_<metric>"
    p.lr = state_.step > 0 ? optimizer_.schedule().lr_at(optimizer_.lr(), state_.step - 1) : optimizer_.current_lr();
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    state_.window_loss = 0;
    state_.window_steps = 0;
    for (auto& w : state_.window_metrics) w.tally = {};
    state_.curve.push_back(p);
    if (callbacks.on_evaluation) callbacks.on_evaluation(p);
  };
  if (state_.curve.empty() && state_.step == 0) evaluate();  // where training starts from (no training loss yet)
  while (state_.step < state_.options.steps && !stop_requested_) {
    step();
    if (state_.step % state_.options.eval_every == 0 || state_.step == state_.options.steps) evaluate();
    // After the evaluation: a checkpoint taken here holds that step's curve point and the fresh window.
    if (callbacks.on_step) callbacks.on_step(state_.step);
  }
  reducer_->after_run(optimizer_.params(), state_.step);
}

TrainerState TrainerBase::state() const {
  TrainerState s = state_;
  s.data_order = sampler_.state();
  s.rng = rng_.state();
  return s;
}

void TrainerBase::set_state(const TrainerState& s, std::string_view op) {
  if (s.data_fingerprint != state_.data_fingerprint)
    fail<ValueError>(
        "{}: the training data differs from the data the checkpoint was trained on (fingerprint "
        "{:08x} in the file, {:08x} now)",
        op, s.data_fingerprint, state_.data_fingerprint);
  const auto text = [](std::optional<std::uint32_t> f) { return f ? fmt::format("{:08x}", *f) : std::string("none"); };
  if (s.eval_fingerprint != state_.eval_fingerprint)
    fail<ValueError>(
        "{}: the evaluation data differs from the checkpoint's (fingerprint {} in the file, {} now); "
        "one curve must not mix two evaluation sets",
        op, text(s.eval_fingerprint), text(state_.eval_fingerprint));
  // Every option but steps (a run may be extended) and anomaly (a debugging aid) shapes the run.
  std::vector<std::string> differ;
  TrainOptions mine = state_.options, theirs = s.options;
  mine.steps = theirs.steps;
  mine.anomaly = theirs.anomaly;
  const Settings a = to_settings(theirs), b = to_settings(mine);
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].value != b[i].value)
      differ.push_back(fmt::format("{} is {} in the file but {} in the trainer", a[i].name, a[i].value, b[i].value));
  if (!differ.empty()) fail<ValueError>("{}: {}", op, fmt::join(differ, "; "));
  std::vector<std::string> names;
  for (const auto& w : s.window_metrics) names.push_back(w.name);
  if (names != metric_names_)
    fail<ValueError>("{}: the checkpoint measured the metrics [{}], the trainer measures [{}]", op,
                     escaped(fmt::format("{}", fmt::join(names, ", "))), fmt::join(metric_names_, ", "));
  const bool tallies_ok = std::all_of(s.window_metrics.begin(), s.window_metrics.end(), [](const MetricWindow& w) {
    return std::isfinite(w.tally.sum) && std::isfinite(w.tally.count) && w.tally.count >= 0;
  });
  if (s.step < 0 || s.window_steps < 0 || s.window_steps > s.step || !std::isfinite(s.window_loss) || !tallies_ok)
    fail<ValueError>("{}: the saved state is inconsistent (step {}, a window of {} steps, loss sum {})", op, s.step,
                     s.window_steps, s.window_loss);
  try {
    Rng().set_state(s.rng);            // the generator's own check of its state
    sampler_.set_state(s.data_order);  // the last check: the sampler changes only if its state fits
  } catch (const ValueError& e) {
    fail<ValueError>("{}: {}", op, e.what());
  }
  rng_.set_state(s.rng);
  const TrainOptions options = state_.options;  // the trainer keeps its own steps and anomaly
  state_ = s;
  state_.options = options;
  reducer_->restart();  // a group compares the new state before it goes on
}

template class Trainer<SequenceBatch>;
template class Trainer<TensorBatch>;

}  // namespace tapegrad
