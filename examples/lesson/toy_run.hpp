#pragma once
// A training run of the toy model, put together in one place for the trainer CLI and the tests: the
// model, an optimizer of a named kind with its schedule, sequence sources over the data (train and
// evaluation batches padded alike), and the generic Trainer with an accuracy metric. Everything in it
// is the library's public API; the flagship demo writes the same steps out by hand.

#include <memory>
#include <optional>

#include "lesson/toy_model.hpp"
#include "tapegrad/train/optimizer.hpp"
#include "tapegrad/train/schedule.hpp"
#include "tapegrad/train/trainer.hpp"

namespace tapegrad::lesson {

struct ToyRunConfig {
  ModelConfig model = {};
  OptimizerKind optimizer = OptimizerKind::adam;
  Settings hyperparameters = {{"lr", "0.01"}};  // over the optimizer's defaults: the lesson's lr
  ScheduleRecord schedule = {};                 // constant
  TrainOptions training = {.steps = 2000};
};

// A generous estimate of the memory a toy run takes, from its configuration alone (nothing is
// allocated): the parameters with their gradients and the optimizer's buffers, the activations of a
// training batch and of an evaluation batch (values, gradients and what the ops keep), and `examples`
// sequences of `length` tokens of data. ValueError for a configuration the model would refuse. The trainer
// CLI compares it with --max-memory before it builds or generates anything.
double estimated_bytes(const ToyRunConfig& config, Index length, Index examples);

class ToyRun {
 public:
  // The run keeps references to the datasets: they must outlive it. `eval` may be null.
  ToyRun(const ToyRunConfig& config, const Dataset& train, const Dataset* eval = nullptr);
  ToyRun(const ToyRun&) = delete;
  ToyRun& operator=(const ToyRun&) = delete;

  ToyModel<float>& model() { return model_; }
  Optimizer<float>& optimizer() { return *optimizer_; }
  Trainer<SequenceBatch>& trainer() { return trainer_; }
  const SequenceSource& train_source() const { return train_; }
  const SequenceSource* eval_source() const { return eval_ ? &*eval_ : nullptr; }

 private:
  ToyModel<float> model_;
  std::unique_ptr<Optimizer<float>> optimizer_;
  SequenceSource train_;
  std::optional<SequenceSource> eval_;
  Trainer<SequenceBatch> trainer_;
};

}  // namespace tapegrad::lesson
