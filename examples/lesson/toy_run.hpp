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
