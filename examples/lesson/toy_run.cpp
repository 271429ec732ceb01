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

double estimated_bytes(const ToyRunConfig& config, Index length, Index examples) {
  const ModelConfig& m = config.model;
  const Index parameters = ToyModel<float>::count_parameters_of(m);  // ValueError for one that does not fit together
  const auto d = [](Index v) { return static_cast<double>(v); };
  const ModelWidths w = model_widths(m);  // a valid configuration: count_parameters checked it
  const double width_in = d(w.input), d_model = d(w.d_model), d_head = d(w.d_head), heads = d(m.heads);
  const double t = d(length);
  // Floats per sequence on the tape: features, positions, Q, K, V and their head slices, head outputs,
  // Wo, residual, logits and the softmax cross-entropy keeps per position; scores, weights and the copy
  // the layer keeps per head and pair of positions.
  double per_sequence = t * (4 * width_in + 4 * d_model + 8 * heads * d_head + 2 * d(m.labels)) + 3 * heads * t * t;
  if (m.blocks())  // per block: attention as above, the residual, the MLP's 4d hidden units, norms, masks
    per_sequence += d(m.layers) * (t * (8 * d_model + 8 * heads * d_head + (m.mlp ? 14 * d_model : 0) +
                                        (m.layernorm ? 6 * d_model : 0) + (m.dropout > 0 ? 4 * d_model : 0)) +
                                   3 * heads * t * t);
  const double batches = 3 * d(config.training.batch) + 1.5 * d(config.training.eval_batch);  // values, grads, saved
  const double data = d(examples) * (16 * t + 64);  // ids and labels, and each example's vectors
  return 4 * (4 * d(parameters) + per_sequence * batches) + data;  // value, grad, two optimizer buffers
}

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
