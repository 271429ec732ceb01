#pragma once
// The training loop, for any model. The user hands it the model (a Module: its parameters, train/eval
// mode), an optimizer with its schedule, a data source, and a loss function of (tape, batch); the loop
// orders the data (a seeded sampler), steps, clips, stops on a non-finite loss, evaluates with any
// metrics, keeps a curve, calls callbacks, and can be checkpointed and resumed bit for bit
// (train/checkpoint/checkpoint.hpp: snapshot(trainer), restore(checkpoint, trainer)).
//
//   Mlp model(config);                                        // the user's Module<float>
//   AdamW<float> opt(model.parameters(), {.lr = 1e-2});
//   opt.set_schedule(CosineWithWarmup({.warmup_steps = 50, .total_steps = 2000}));
//   TensorSource train("moons", features, labels), test("moons test", test_features, test_labels);
//   Trainer trainer(model, opt, train, [&](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
//     Var<float> logits = model.forward(tape.constant(b.features));
//     return {cross_entropy(logits, b.labels), logits};   // the loss, and the output metrics read
//   }, {.steps = 2000, .batch = 64, .eval_every = 100});
//   trainer.evaluate_on(test);
//   trainer.add_metric("accuracy", metrics::accuracy);
//   trainer.run();
//
// A non-finite loss or gradient norm stops training with a NonFiniteError naming the step, before anything
// is updated ("train: the loss is NaN at step 2 (lr 0.01); the step was not taken": a program adds what its
// own flags can do about it); with `anomaly` on, the tape names the first op that produced the NaN or Inf
// and its source line. A step that throws, wherever (anomaly mode, the loss function, an op's backward),
// leaves no gradient behind in the optimizer's parameters: the next step starts from zeros. The loop prints
// nothing: callbacks see every step and every evaluation (train/program/progress.hpp turns them into a
// progress bar, plain lines or a CSV file).
//
// The loop has one shape however many processes train the model: it asks its StepReducer
// (train/step_reducer.hpp) for this process's part of each batch and for the batch's sums. The default,
// SingleProcess, is the identity; set_collective() makes the trainer one replica of a data-parallel group
// (train/data_parallel.hpp: the protocol, and why the result does not depend on the number of ranks but
// for float rounding).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/rng.hpp"
#include "tapegrad/core/settings.hpp"
#include "tapegrad/layers/module.hpp"
#include "tapegrad/train/collective.hpp"
#include "tapegrad/train/data.hpp"
#include "tapegrad/train/data_source.hpp"
#include "tapegrad/train/metrics.hpp"
#include "tapegrad/train/optimizer.hpp"
#include "tapegrad/train/step_reducer.hpp"

namespace tapegrad {

struct TrainOptions {
  static constexpr double kMaxBatch = 1 << 24;  // far beyond a CPU batch; keeps a forged size from allocating
  static constexpr double kMaxSteps = 1e12;     // years of the fastest step; a forged count reads as forged
  Index steps = 1000;
  Index batch = 32;
  Index eval_every = 100;  // evaluate (and record a curve point) every N steps
  Index eval_batch = 256;  // examples per batch when evaluating
  std::uint64_t seed = 0;  // the data order and the training random stream (rng())
  double clip = 0;         // clip gradients to this global norm; 0 = no clipping
  bool anomaly = false;    // every op checks its output for NaN and Inf

  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("steps", s.steps, "training steps", in_range(0, kMaxSteps));
    field("batch", s.batch, "examples per training batch", in_range(1, kMaxBatch));
    field("eval_every", s.eval_every, "evaluate every N steps", at_least(1));
    field("eval_batch", s.eval_batch, "examples per evaluation batch", in_range(1, kMaxBatch));
    field("seed", s.seed, "seed of the data order and the training random stream");
    field("clip", s.clip, "clip gradients to this global norm (0: no clipping)", at_least(0));
    field("anomaly", s.anomaly, "check every op's output for NaN and Inf");
  }
};

// What a loss function returns: the loss (one element, what backward starts from) and, for metrics, the
// output they read (logits, predictions). A bare Var converts to it, for a loss without metrics.
template <class T>
struct StepOutput {
  Var<T> loss;
  Var<T> output;  // may be empty: then no metric is measured on training batches
  StepOutput(Var<T> loss_, Var<T> output_ = {}) : loss(loss_), output(output_) {}  // NOLINT: implicit on purpose
};

// A point of the training curve: after `step` steps, named values in a fixed order: "train_loss", then
// "train_<metric>" for each metric (means over the steps since the previous point), then "eval_loss"
// and "eval_<metric>" when there is evaluation data. NaN where nothing was measured yet.
struct CurvePoint {
  Index step = 0;
  double lr = 0;       // the rate of the last step taken (of the first one, at step 0)
  double seconds = 0;  // since the trainer was made
  NamedValues values;
};

// The step of the first point after step 0 whose value `name` reached `target`, if one did.
std::optional<Index> first_step_reaching(const std::vector<CurvePoint>& curve, std::string_view name, double target);

struct TrainCallbacks {
  std::function<void(Index step)> on_step;               // after every step (and its evaluation, if any)
  std::function<void(const CurvePoint&)> on_evaluation;  // after every evaluation
};

// What a trainer holds besides the model's weights and the optimizer: enough, with those, to resume
// exactly (checkpoints save it).
struct TrainerState {
  TrainOptions options;
  Index step = 0;
  std::uint32_t data_fingerprint = 0;               // of the training data (DataSource::fingerprint)
  std::optional<std::uint32_t> eval_fingerprint{};  // of the evaluation data; none without it
  Sampler::State data_order{};
  Rng::State rng{};        // the training random stream
  double window_loss = 0;  // sum of losses since the last curve point
  Index window_steps = 0;
  std::vector<MetricWindow> window_metrics{};
  std::vector<CurvePoint> curve{};
};

// The loop's bookkeeping, whatever the batch type: step count, data order, random stream, clipping,
// the NaN stop, the curve and the state checkpoints save, and the reducer a step goes through. Trainer<B>
// below adds the data and the loss.
class TrainerBase {
 public:
  virtual ~TrainerBase();
  TrainerBase(const TrainerBase&) = delete;
  TrainerBase& operator=(const TrainerBase&) = delete;

  // Trains from the current step to options().steps: evaluates before the first step (if no curve
  // point exists yet), every eval_every steps and at the end. stop() from a callback ends it early (in a
  // data-parallel run, on every rank at the same step). The reducer starts first and has the last word
  // (a data-parallel group compares its replicas).
  void run(const TrainCallbacks& callbacks = {});
  // One step: batch, forward, loss, backward, clip, update. Returns the batch loss.
  virtual double step() = 0;
  void stop() { stop_requested_ = true; }

  Index steps_done() const { return state_.step; }
  const std::vector<CurvePoint>& curve() const { return state_.curve; }
  Module<float>& model() { return model_; }
  const Module<float>& model() const { return model_; }
  Optimizer<float>& optimizer() { return optimizer_; }
  const Optimizer<float>& optimizer() const { return optimizer_; }
  const TrainOptions& options() const { return state_.options; }
  // The training random stream (dropout masks, ...): seeded from options().seed, saved in checkpoints.
  // The trainer sets it as the model's (Module::set_rng) while the trainer lives.
  Rng& rng() { return rng_; }
  // That stream's state before anything drew from it, for a seed.
  static Rng::State initial_rng_state(std::uint64_t seed);
  const std::vector<std::string>& metric_names() const { return metric_names_; }
  // The longest name of a metric: every curve point holds its columns' names ("train_<name>"), so a file's
  // longer column is refused (a forged one copied into every point would take many times the file).
  static constexpr std::size_t kMaxMetricName = 64;

  TrainerState state() const;
  // Restores a state (from a checkpoint): step, data order, random stream, windows, curve. ValueError
  // naming what does not fit, and no change, if the state is inconsistent, holds other options (all but
  // steps and anomaly must match; the trainer keeps its own of those two), other data (fingerprint), or
  // other metrics. `op` starts the message.
  void set_state(const TrainerState& s, std::string_view op = "set_state");

  // How the processes that train this model share its steps (train/step_reducer.hpp); nullptr: back to
  // SingleProcess, the default. Give it once the trainer is complete (evaluation data, metrics, a resumed
  // state): the next step, run() or evaluate() starts it. The trainer sets the reducer's step_stream() as
  // the model's random stream.
  void set_reducer(std::unique_ptr<StepReducer> reducer);
  StepReducer& reducer() { return *reducer_; }
  // Data-parallel training as this rank of `collective`, which must outlive the trainer (nullptr: back to
  // one process): set_reducer(reducer_for(*collective, options)) (train/data_parallel.hpp).
  void set_collective(Collective* collective, DataParallelOptions options = {});

 protected:
  // `fingerprint` is the training data's (DataSource::fingerprint).
  TrainerBase(Module<float>& model, Optimizer<float>& optimizer, Index train_size, std::uint32_t fingerprint,
              TrainOptions options);
  void set_eval_fingerprint(std::optional<std::uint32_t> f) { state_.eval_fingerprint = f; }

  // For Trainer<B>::step(): the global batch's indices (reducer().shard() takes this process's part),
  // then, once this process's loss is on tape() (empty when it computed nothing) with its shard's weight
  // and its metric tallies, the rest of the step: backward, the reduction, the NaN stop, clipping, the
  // update and the window sums. Returns the global batch's loss.
  std::span<const Index> next_indices() { return sampler_.next(); }
  double finish_step(Var<float> loss, double weight, std::span<Tally> tallies);
  Tape<float>& tape() { return tape_; }
  void add_metric_name(std::string name);
  // Evaluation data's loss and metrics, or nothing without evaluation data.
  virtual NamedValues evaluate_for_curve() = 0;

 private:
  Module<float>& model_;
  std::vector<const Parameter<float>*> registered_;  // model_.parameters(), sorted: check_registered each step
  Optimizer<float>& optimizer_;
  // Options, step, fingerprints, windows and curve; the data order and the random stream are sampler_'s
  // and rng_'s (state() reads them there).
  TrainerState state_;
  Sampler sampler_;
  Rng rng_;
  Tape<float> tape_;
  std::vector<std::string> metric_names_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool stop_requested_ = false;
  std::unique_ptr<StepReducer> reducer_;  // SingleProcess unless set_reducer() says otherwise
};

// The loop over batches of type B (SequenceBatch, TensorBatch, or a user's own with weight()).
template <TrainingBatch B>
class Trainer final : public TrainerBase {
 public:
  using LossFn = std::function<StepOutput<float>(Tape<float>&, const B&)>;
  using MetricFn = std::function<Tally(const Tensor& output, const B& batch)>;

  // The trainer keeps references: model, optimizer and data must outlive it.
  Trainer(Module<float>& model, Optimizer<float>& optimizer, const DataSource<B>& train, LossFn loss,
          TrainOptions options = {});

  // Evaluation data for the curve (eval_loss, eval_<metric>); may be the training data itself. Its
  // fingerprint is saved and checked on resume as the training data's is.
  void evaluate_on(const DataSource<B>& data) {
    eval_ = &data;
    set_eval_fingerprint(data.fingerprint());
  }
  // A metric measured on training batches and evaluation data, named `name` ("train_<name>",
  // "eval_<name>" in the curve). Before the first step only; NameError for a repeated or reserved name, or
  // one longer than kMaxMetricName.
  void add_metric(std::string name, MetricFn measure);

  double step() override;
  // The loss and every metric over a whole data source, without recording gradients and with the model
  // in evaluation mode: {"eval_loss", then "eval_<metric>" for each metric}, the names the curve's
  // evaluation columns have (one vocabulary: what evaluate() returns is what the curve shows).
  NamedValues evaluate(const DataSource<B>& data);

 private:
  NamedValues evaluate_for_curve() override { return eval_ ? evaluate(*eval_) : NamedValues{}; }

  const DataSource<B>& train_;
  const DataSource<B>* eval_ = nullptr;
  LossFn loss_;
  std::vector<MetricFn> metrics_;
  std::vector<Tally> step_tallies_;  // one per metric: this process's shard of a step, then the batch's
  B batch_, eval_batch_;
  std::vector<Index> eval_indices_;
};

// Trainer trainer(model, opt, source, lambda, options): the batch type comes from the source.
template <class B, class F>
Trainer(Module<float>&, Optimizer<float>&, const DataSource<B>&, F, TrainOptions = {}) -> Trainer<B>;

// ---- Trainer<B> ---------------------------------------------------------------------------------------

template <TrainingBatch B>
Trainer<B>::Trainer(Module<float>& model, Optimizer<float>& optimizer, const DataSource<B>& train, LossFn loss,
                    TrainOptions options)
    : TrainerBase(model, optimizer, train.size(), train.fingerprint(), options), train_(train), loss_(std::move(loss)) {
  if (!loss_) fail<ValueError>("train: the loss function is empty");
}

template <TrainingBatch B>
void Trainer<B>::add_metric(std::string name, MetricFn measure) {
  if (!measure) fail<ValueError>("add_metric: the function for '{}' is empty", name);
  add_metric_name(std::move(name));
  metrics_.push_back(std::move(measure));
  step_tallies_.emplace_back();
}

template <TrainingBatch B>
double Trainer<B>::step() {
  StepReducer& reducer = this->reducer();
  reducer.start(*this);
  const std::span<const Index> mine = reducer.shard(next_indices(), rng());
  double weight = 0;
  std::optional<StepOutput<float>> out;
  if (!mine.empty()) {
    train_.fill(mine, batch_);
    weight = batch_.weight();
    if (reducer.computes(weight)) {  // the forward: the model in training mode, a fresh tape, the loss function
      if (!model().training()) model().train();
      tape().reset();
      tape().set_anomaly_detection(options().anomaly);  // evaluation turns it off
      out.emplace(loss_(tape(), batch_));
    }
  }
  // The output as the forward recorded it. A non-finite loss measures nothing: the step stops.
  const bool measured = out && std::isfinite(out->loss.value()[0]) && out->output.tape;
  for (std::size_t k = 0; k < metrics_.size(); ++k)
    step_tallies_[k] = measured ? metrics_[k](out->output.value(), batch_) : Tally{};
  return finish_step(out ? out->loss : Var<float>{}, weight, step_tallies_);
}

template <TrainingBatch B>
NamedValues Trainer<B>::evaluate(const DataSource<B>& data) {
  const EvalModeGuard<float> eval_mode(model());  // for the pass; as it was afterwards
  StepReducer& reducer = this->reducer();
  reducer.start(*this);
  // On the training tape, which a step has already sized: values only, in buffers training holds anyway,
  // so evaluating in batches no larger than training's costs time and no memory of its own.
  // Anomaly detection is training's (options().anomaly, which a step turns back on): a non-finite
  // evaluation is reported, not thrown, as when evaluation had a tape of its own.
  Tape<float>& tape = this->tape();
  NoGradGuard<float> guard(tape);
  tape.set_anomaly_detection(false);
  // loss * weight and weight, then each metric's sum and count, over this process's part of the data;
  // then over every process's.
  std::vector<double> sums(2 + 2 * metrics_.size());
  const Shard part = reducer.eval_shard(data.size());
  for (Index start = part.begin; start < part.end; start += options().eval_batch) {
    eval_indices_.resize(static_cast<std::size_t>(std::min(options().eval_batch, part.end - start)));
    std::iota(eval_indices_.begin(), eval_indices_.end(), start);
    data.fill(eval_indices_, eval_batch_);
    tape.reset();
    const StepOutput<float> out = loss_(tape, eval_batch_);
    const double weight = eval_batch_.weight();
    sums[0] += static_cast<double>(out.loss.value()[0]) * weight;  // undo the batch's mean
    sums[1] += weight;
    if (out.output.tape)
      for (std::size_t k = 0; k < metrics_.size(); ++k) {
        const Tally t = metrics_[k](out.output.value(), eval_batch_);
        sums[2 + 2 * k] += t.sum;
        sums[3 + 2 * k] += t.count;
      }
  }
  reducer.reduce_sums(sums);
  NamedValues values{{"eval_loss", Tally{sums[0], sums[1]}.mean()}};
  for (std::size_t k = 0; k < metrics_.size(); ++k)
    values.push_back({"eval_" + metric_names()[k], Tally{sums[2 + 2 * k], sums[3 + 2 * k]}.mean()});
  return values;
}

extern template class Trainer<SequenceBatch>;
extern template class Trainer<TensorBatch>;

}  // namespace tapegrad
