#pragma once
// The training loop: seeded minibatches, SGD (with momentum) or Adam, optional gradient clipping and a
// cosine schedule, evaluation every N steps, and a curve of (step, train loss/accuracy, eval
// loss/accuracy). A non-finite loss or gradient stops training with a ValueError naming the step;
// with `anomaly` on, the tape names the first op that produced the NaN or Inf and its source line.
//
// The loop itself prints nothing: callbacks see every step and every evaluation (train/report.hpp
// turns them into a progress bar, plain lines or a CSV file).

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "tapegrad/train/data.hpp"
#include "tapegrad/train/model.hpp"
#include "tapegrad/train/optimizer.hpp"
#include "tapegrad/train/schedule.hpp"

namespace tapegrad {

enum class OptimizerKind { sgd, adam };
std::string_view to_string(OptimizerKind k);
OptimizerKind parse_optimizer_kind(std::string_view name);  // NameError listing the choices

struct TrainConfig {
  Index steps = 2000;
  Index batch = 32;
  OptimizerKind optimizer = OptimizerKind::adam;
  double lr = 0.01;
  double momentum = 0.9;  // SGD only
  double clip = 0;        // clip gradients to this global norm; 0 = no clipping
  bool cosine = false;    // cosine decay to 0 after a 5% linear warm-up, instead of a constant lr
  Index eval_every = 100;
  std::uint64_t seed = 0;  // data order
  bool anomaly = false;

  std::string describe() const;  // one line
};

struct Evaluation {
  double loss = 0;
  double accuracy = 0;  // over labelled positions
  Index labelled = 0;
};

struct CurvePoint {
  Index step = 0;
  double train_loss = 0, train_accuracy = 0;  // mean over the steps since the previous point
  double eval_loss = 0, eval_accuracy = 0;    // NaN without an evaluation set
  double lr = 0;
  double seconds = 0;  // since the trainer was made
};

struct TrainCallbacks {
  std::function<void(Index step)> on_step;               // after every step (and its evaluation, if any)
  std::function<void(const CurvePoint&)> on_evaluation;  // after every evaluation
};

// What a Trainer holds besides the model, the optimizer and the data: enough, with those, to resume
// exactly (checkpoints save it).
struct TrainerState {
  Index step = 0;
  Sampler::State data_order;
  double window_loss = 0;  // sums since the last curve point
  Index window_correct = 0, window_labelled = 0, window_steps = 0;
  std::vector<CurvePoint> curve;
};

class Trainer {
 public:
  // `eval` may be null. The trainer keeps references: model and data must outlive it.
  Trainer(ToyModel<float>& model, const Dataset& train, const Dataset* eval, const TrainConfig& config);
  ~Trainer();

  // Trains from the current step to config.steps, evaluating before the first step, every eval_every
  // steps and at the end.
  void run(const TrainCallbacks& callbacks = {});
  // One step: batch, forward, loss, backward, clip, update. Returns the batch loss.
  double step();
  // Loss and accuracy over a whole dataset, without recording gradients.
  Evaluation evaluate(const Dataset& data);

  Index steps_done() const { return step_; }
  const std::vector<CurvePoint>& curve() const { return curve_; }
  // The first evaluated step (after step 0) whose eval accuracy reached `target`, or -1.
  Index steps_to(double target) const;
  ToyModel<float>& model() { return model_; }
  Optimizer<float>& optimizer() { return *optimizer_; }
  const TrainConfig& config() const { return config_; }
  const Dataset& train_data() const { return train_; }

  TrainerState state() const;
  // Restores a state (from a checkpoint); ValueError, and no change, if it is inconsistent or does
  // not fit this trainer's data (the data order covers another number of examples).
  void set_state(const TrainerState& s);
  void check_state(const TrainerState& s) const;  // set_state's checks alone

 private:
  CurvePoint record_point();

  ToyModel<float>& model_;
  const Dataset& train_;
  const Dataset* eval_;
  TrainConfig config_;
  std::unique_ptr<Optimizer<float>> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  Sampler sampler_;
  Index length_;
  Batch batch_;
  Tape<float> tape_, eval_tape_;
  Index step_ = 0;
  double window_loss_ = 0;  // sums since the last curve point
  Index window_correct_ = 0, window_labelled_ = 0, window_steps_ = 0;
  std::vector<CurvePoint> curve_;
  double start_seconds_;
};

// Accuracy bookkeeping: how many labelled rows of `logits` (.., labels) have their target as argmax.
void count_correct(const Tensor& logits, const Ids& targets, Index& correct, Index& labelled);

// Seconds on a steady clock (differences only): the curve's and the progress bar's time.
double now_seconds();

}  // namespace tapegrad
