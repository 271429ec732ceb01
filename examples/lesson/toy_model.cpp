#include "lesson/toy_model.hpp"

#include <numeric>

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad::lesson {

std::string ModelConfig::describe() const {
  return fmt::format("{} features{}, {} positions, {} attention ({} head{}, scale {}{}{}), readout to {} labels",
                     to_string(features), features == FeatureKind::learned ? fmt::format(" (d {})", d_embed) : "",
                     to_string(positions), to_string(attention), heads, heads == 1 ? "" : "s", to_string(scale),
                     output_projection ? ", Wo" : "", residual ? ", residual" : "", labels);
}

template <class T>
ToyModel<T>::ToyModel(const ModelConfig& c) : Module<T>("model"), config_(c) {
  check_fields(c, "model");
  Rng rng(c.seed, 0x6d6f64656c);
  Index width = 0;
  if (c.features == FeatureKind::onehot) {
    onehot_ = std::make_unique<OneHotTokens<T>>("tokens", c.vocab);
    width = c.vocab;
  } else {
    embedding_ = std::make_unique<Embedding<T>>("embed", EmbeddingOptions{.vocab = c.vocab, .dim = c.d_embed}, rng);
    this->register_child(*embedding_, "embed");
    width = c.d_embed;
  }
  positions_ = std::make_unique<Positions<T>>(
      "pos", PositionOptions{.kind = c.positions, .max_len = c.max_len, .d_model = width}, rng);
  this->register_child(*positions_, "pos");
  d_model_ = positions_->output_width();

  attention_ = std::make_unique<SelfAttention<T>>(
      "attn",
      SelfAttentionOptions{.mode = c.attention, .d_model = d_model_, .n_heads = c.heads, .d_head = c.d_head,
                           .output_projection = c.output_projection, .scale = c.scale},
      rng);
  this->register_child(*attention_, "attn");
  if (c.residual && attention_->output_width() != d_model_)
    fail<ValueError>("model: a residual connection adds the attention output ({} wide) to its input ({} wide); make "
                     "heads x d_head equal {} or use the output projection",
                     attention_->output_width(), d_model_, d_model_);
  readout_ = std::make_unique<Linear<T>>("readout", LinearOptions{.in = attention_->output_width(), .out = c.labels}, rng);
  this->register_child(*readout_, "readout");
}

template <class T>
Index ToyModel<T>::implied_parameter_count(const ModelConfig& c) {
  // Mirrors the constructor: embedding table, learned positions, attention projections, readout.
  if (c.vocab <= 0 || c.labels <= 0 || c.max_len <= 0 || c.heads <= 0 || c.d_head < 0) return -1;
  const Index width = c.features == FeatureKind::onehot ? c.vocab : c.d_embed;
  if (width <= 0) return -1;
  const Index d_model = c.positions == PositionEncoding::onehot ? width + c.max_len : width;
  Index n = c.features == FeatureKind::learned ? c.vocab * c.d_embed : 0;
  if (c.positions == PositionEncoding::learned) n += c.max_len * width;
  if (c.d_head == 0 && d_model % c.heads != 0) return -1;
  const Index dh = c.d_head != 0 ? c.d_head : d_model / c.heads;
  Index out = c.heads * dh;
  if (c.attention == AttentionMode::learnable) {
    n += 3 * d_model * out;
    if (c.output_projection) {
      n += out * d_model;
      out = d_model;
    }
  } else if (dh * c.heads != d_model || c.output_projection) {
    return -1;
  }
  if (c.residual && out != d_model) return -1;
  return n + out * c.labels + c.labels;
}

template <class T>
Var<T> ToyModel<T>::features(Tape<T>& tape, const Ids& tokens) {
  Var<T> x = onehot_ ? onehot_->forward(tape, tokens) : embedding_->forward(tape, tokens);  // (B, T, width)
  return positions_->forward(x);                                                            // (B, T, d_model)
}

template <class T>
Var<T> ToyModel<T>::logits(Tape<T>& tape, const SequenceBatch& batch) {
  if (batch.length() > config_.max_len)
    fail<ShapeError>("model: the batch has sequences of {} positions but the model takes at most {}", batch.length(),
                     config_.max_len);
  Var<T> x = features(tape, batch.tokens);
  Var<T> h = attention_->forward(x, batch.padded ? &batch.padding : nullptr);
  if (config_.residual) h = add(x, h);
  return readout_->forward(h);  // (B, T, labels)
}

template <class T>
StepOutput<T> ToyModel<T>::loss(Tape<T>& tape, const SequenceBatch& batch) {
  Var<T> z = logits(tape, batch);
  return {cross_entropy(z, batch.labels), z};
}

template <class T>
ModelRecord ToyModel<T>::model_record() const {
  return {std::string(kind), to_settings(config_)};
}

template class ToyModel<float>;
template class ToyModel<double>;

Tensor dataset_logits(ToyModel<float>& model, const Dataset& data) {
  std::vector<Index> all(static_cast<std::size_t>(data.size()));
  std::iota(all.begin(), all.end(), Index{0});
  SequenceBatch batch;
  SequenceSource(data).fill(all, batch);
  Tape<float> tape;
  NoGradGuard<float> guard(tape);
  return model.logits(tape, batch).value();
}

}  // namespace tapegrad::lesson
