#include "lesson/toy_model.hpp"

#include <numeric>

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad::lesson {

std::string ModelConfig::describe() const {
  return fmt::format("{} features{}, {} positions, {} attention ({} head{}, scale {}{}{}), readout to {} labels",
                     to_string(features), features == FeatureKind::learned ? fmt::format(" (d {})", d_embed) : "",
                     to_string(positions), to_string(attention), heads, heads == 1 ? "" : "s", to_string(scale),
                     output_projection ? ", Wo" : "", residual ? ", residual" : "", labels) +
         (blocks() ? fmt::format(", as {} transformer block{}{}{}{}", layers, layers == 1 ? "" : "s", mlp ? " with MLP" : "",
                                 layernorm ? ", LayerNorm" : "", dropout > 0 ? fmt::format(", dropout {}", dropout) : "")
                   : "");
}

namespace {
bool is_block_field(std::string_view name) {
  return name == "layers" || name == "mlp" || name == "layernorm" || name == "dropout";
}
}  // namespace

void ModelConfig::complete_settings(Settings& settings) {
  for (const Setting& s : to_settings(ModelConfig{}))
    if (is_block_field(s.name) && !find_setting(settings, s.name)) settings.push_back(s);
}

ModelWidths model_widths(const ModelConfig& c) {
  ModelWidths w;
  w.input = c.features == FeatureKind::onehot ? c.vocab : c.d_embed;
  w.d_model = c.positions == PositionEncoding::onehot ? w.input + c.max_len : w.input;
  w.d_head = c.d_head.value_or(w.d_model / c.heads);
  w.attention = c.output_projection || c.blocks() ? w.d_model : c.heads * w.d_head;
  return w;
}

namespace {

SelfAttentionOptions attention_options(const ModelConfig& c, Index d_model) {
  return {.mode = c.attention, .d_model = d_model, .n_heads = c.heads, .d_head = c.d_head,
          .output_projection = c.output_projection, .scale = c.scale};
}

TransformerBlockOptions block_options(const ModelConfig& c, Index d_model) {
  return {.mode = c.attention, .d_model = d_model, .n_heads = c.heads, .causal = false, .layernorm = c.layernorm,
          .mlp = c.mlp, .dropout = c.dropout};
}
}  // namespace

template <class T>
void ToyModel<T>::check_config(const ModelConfig& c) {
  check_fields(c, "model");  // every size positive and below 2^24: the arithmetic below cannot overflow
  const ModelWidths w = model_widths(c);
  if (c.blocks()) {
    const ModelConfig plain;
    if (c.d_head || c.scale != plain.scale || c.output_projection)
      fail<ValueError>("model: transformer blocks (layers {}{}{}{}) fix d_head = d_model / heads, the 1/sqrt(d_head) "
                       "scale and the output projection (learnable mode); leave d_head, scale and output_projection "
                       "at their defaults",
                       c.layers, c.mlp ? ", mlp" : "", c.layernorm ? ", layernorm" : "",
                       c.dropout > 0 ? fmt::format(", dropout {}", c.dropout) : "");
    if (w.d_model % c.heads != 0) {
      const bool onehot = c.features == FeatureKind::onehot;
      fail<ValueError>("model: transformer blocks split the model width {} ({} {}{}) into {} heads, which do not "
                       "divide it; choose other heads{}",
                       w.d_model, onehot ? "one-hot vocabulary" : "embeddings", w.input,
                       c.positions == PositionEncoding::onehot ? fmt::format(" + {} one-hot positions", c.max_len) : "",
                       c.heads, onehot ? " or --features learned --d-model N" : " or another width");
    }
    TransformerBlock<T>::check("blocks", block_options(c, w.d_model));
    return;
  }
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
  if (c.blocks()) {
    stack_ = std::make_unique<TransformerStack<T>>(
        "stack", TransformerStackOptions{.n_layers = c.layers, .block = block_options(c, d_model_)}, rng);
    this->register_child(*stack_);
  } else {
    attention_ = std::make_unique<SelfAttention<T>>("attn", attention_options(c, d_model_), rng);
    this->register_child(*attention_);
  }
  const Index attention_width = stack_ ? d_model_ : attention_->output_width();
  readout_ = std::make_unique<Linear<T>>("readout", LinearOptions{.in = attention_width, .out = c.labels}, rng);
  this->register_child(*readout_);
}

template <class T>
Index ToyModel<T>::count_parameters_of(const ModelConfig& c) {
  check_config(c);
  // Mirrors the constructor: embedding table, learned positions, attention projections, readout.
  const ModelWidths w = model_widths(c);
  Index n = c.features == FeatureKind::learned ? c.vocab * c.d_embed : 0;
  if (c.positions == PositionEncoding::learned) n += c.max_len * w.input;
  if (c.blocks()) {
    const Index d = w.d_model;
    Index block = c.attention == AttentionMode::learnable ? 4 * d * d + 4 * d : 0;  // Wq Wk Wv Wo and biases
    if (c.mlp) block += 8 * d * d + 5 * d;                                        // d -> 4d -> d
    if (c.layernorm) block += (c.mlp ? 4 : 2) * d;                                // LN1 (and LN2)
    n += c.layers * block + (c.layernorm ? 2 * d : 0);                            // and the final norm
  } else if (c.attention == AttentionMode::learnable) {
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
  const Mask* padding = batch.padded ? &batch.padding : nullptr;
  if (stack_) return readout_->forward(stack_->forward(x, padding));  // (B, T, labels)
  Var<T> h = attention_->forward(x, padding);
  if (config_.residual) h = x + h;
  return readout_->forward(h);  // (B, T, labels)
}

template <class T>
StepOutput<T> ToyModel<T>::loss(Tape<T>& tape, const SequenceBatch& batch) {
  Var<T> z = logits(tape, batch);
  return {cross_entropy(z, batch.labels), z};
}

template <class T>
SelfAttention<T>& ToyModel<T>::attention() {
  if (!attention_)
    fail<UsageError>("model: a model of {} transformer blocks has no single attention layer; ask for attention(k)",
                     config_.layers);
  return *attention_;
}

template <class T>
SelfAttention<T>& ToyModel<T>::attention(std::size_t k) {
  if (!stack_ && k == 0) return *attention_;
  if (!stack_ || k >= stack_->size())
    fail<UsageError>("model: attention({}) asked of a model with {} attention layer{}", k, config_.layers,
                     config_.layers == 1 ? "" : "s");
  return stack_->block(k).attention();
}

template <class T>
ModelRecord ToyModel<T>::model_record() const {
  Settings settings = to_settings(config_);
  // The single attention layer is recorded as before the block fields existed, so that its files and
  // the files written before compare equal (a resume checks the record), and old readers read new files.
  if (!config_.blocks())
    std::erase_if(settings, [](const Setting& s) { return is_block_field(s.name); });
  return {std::string(kind), std::move(settings)};
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
