#include "lesson/toy_run.hpp"

namespace tapegrad::lesson {
namespace {

std::unique_ptr<Optimizer<float>> optimizer_for(const ToyRunConfig& c, ToyModel<float>& model) {
  const std::string kind(to_string(c.optimizer));
  auto opt = make_optimizer<float>(c.optimizer, model.parameters(),
                                   with_overrides(default_hyperparameters(c.optimizer), c.hyperparameters, kind));
  opt->set_schedule(*make_schedule(c.schedule));
  return opt;
}

Index padded_length(const Dataset& train, const Dataset* eval) {
  return std::max(train.max_len(), eval ? eval->max_len() : 0);
}

}  // namespace

ToyRun::ToyRun(const ToyRunConfig& config, const Dataset& train, const Dataset* eval)
    : model_(config.model),
      optimizer_(optimizer_for(config, model_)),
      train_(train, padded_length(train, eval)),
      trainer_(model_, *optimizer_, train_, [this](Tape<float>& t, const SequenceBatch& b) { return model_.loss(t, b); },
               config.training) {
  if (eval) {
    eval_.emplace(*eval, padded_length(train, eval));
    trainer_.evaluate_on(*eval_);
  }
  trainer_.add_metric("accuracy", metrics::accuracy);
}

}  // namespace tapegrad::lesson
