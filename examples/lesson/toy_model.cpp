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

ModelWidths model_widths(const ModelConfig& c) {
  ModelWidths w;
  w.input = c.features == FeatureKind::onehot ? c.vocab : c.d_embed;
  w.d_model = c.positions == PositionEncoding::onehot ? w.input + c.max_len : w.input;
  w.d_head = c.d_head != 0 ? c.d_head : w.d_model / c.heads;
  w.attention = c.output_projection ? w.d_model : c.heads * w.d_head;
  return w;
}

namespace {

SelfAttentionOptions attention_options(const ModelConfig& c, Index d_model) {
  return {.mode = c.attention, .d_model = d_model, .n_heads = c.heads, .d_head = c.d_head,
          .output_projection = c.output_projection, .scale = c.scale};
}
}  // namespace

template <class T>
void ToyModel<T>::check_config(const ModelConfig& c) {
  check_fields(c, "model");  // every size positive and below 2^24: the arithmetic below cannot overflow
  const ModelWidths w = model_widths(c);
  SelfAttention<T>::check("attn", attention_options(c, w.d_model));
  if (c.residual && w.attention != w.d_model)
    fail<ValueError>("model: a residual connection adds the attention output ({} wide) to its input ({} wide); make "
                     "heads x d_head equal {} or use the output projection",
                     w.attention, w.d_model, w.d_model);
}

template <class T>
ToyModel<T>::ToyModel(const ModelConfig& c) : Module<T>(), config_(c) {
  check_config(c);  // before anything is allocated
  Rng rng(c.seed, 0x6d6f64656c);
  const ModelWidths w = model_widths(c);
  if (c.features == FeatureKind::onehot) {
    onehot_ = std::make_unique<OneHotTokens<T>>("tokens", c.vocab);
  } else {
    embedding_ = std::make_unique<Embedding<T>>("embed", EmbeddingOptions{.vocab = c.vocab, .dim = c.d_embed}, rng);
    this->register_child(*embedding_);
  }
  positions_ = std::make_unique<Positions<T>>(
      "pos", PositionOptions{.kind = c.positions, .max_len = c.max_len, .d_model = w.input}, rng);
  this->register_child(*positions_);
  d_model_ = positions_->output_width();
  attention_ = std::make_unique<SelfAttention<T>>("attn", attention_options(c, d_model_), rng);
  this->register_child(*attention_);
  readout_ = std::make_unique<Linear<T>>("readout", LinearOptions{.in = attention_->output_width(), .out = c.labels}, rng);
  this->register_child(*readout_);
}

template <class T>
Index ToyModel<T>::implied_parameter_count(const ModelConfig& c) {
  try {
    check_config(c);
  } catch (const ValueError&) {
    return -1;
  }
  // Mirrors the constructor: embedding table, learned positions, attention projections, readout.
  const ModelWidths w = model_widths(c);
  Index n = c.features == FeatureKind::learned ? c.vocab * c.d_embed : 0;
  if (c.positions == PositionEncoding::learned) n += c.max_len * w.input;
  if (c.attention == AttentionMode::learnable) {
    const Index heads_width = c.heads * w.d_head;
    n += 3 * w.d_model * heads_width;
    if (c.output_projection) n += heads_width * w.d_model;
  }
  return n + w.attention * c.labels + c.labels;
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
