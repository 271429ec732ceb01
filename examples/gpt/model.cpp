#include "gpt/model.hpp"

#include <algorithm>
#include <cmath>

#include "tapegrad/autograd/ops.hpp"

namespace gpt {

using namespace tapegrad;

template <class T>
TransformerBlockOptions Gpt<T>::block_options(const Config& c) {
  return {.mode = c.attention, .d_model = c.d_model, .n_heads = c.n_heads, .d_ff = c.d_ff, .causal = true,
          .layernorm = true, .mlp = true, .dropout = c.dropout, .init = Initializer::normal(0.02)};
}

template <class T>
void Gpt<T>::check_config(const Config& c) {
  check_fields(c, "gpt");  // every size within its bounds: the arithmetic below cannot overflow
  (void)ByteVocabulary::from_hex(c.vocabulary, "gpt");
  TransformerBlock<T>::check("stack.blocks.0", block_options(c));
}

template <class T>
Index Gpt<T>::implied_parameter_count(const Config& c) {
  try {
    check_config(c);
  } catch (const ValueError&) {
    return -1;
  }
  // Mirrors the constructor (the constructor checks that it does): the embedding (shared with the head),
  // positions, per block the attention (Wq Wk Wv Wo and their biases, learnable only), the MLP (D -> d_ff ->
  // D with biases) and two LayerNorms, then the final LayerNorm.
  const Index V = static_cast<Index>(c.vocabulary.size() / 2), D = c.d_model, F = feed_forward_width(D, c.d_ff);
  const Index attention = c.attention == AttentionMode::learnable ? 4 * D * D + 4 * D : 0;
  const Index block = attention + (2 * D * F + F + D) + 4 * D;
  return V * D + c.context * D + c.n_layers * block + 2 * D;
}

template <class T>
Gpt<T>::Gpt(const Config& c)
    : Module<T>(), config_(c), vocabulary_(ByteVocabulary::from_hex(c.vocabulary, "gpt")), rng_(c.seed, 0x677074) {  // "gpt"
  check_config(c);
  embed_ = std::make_unique<Embedding<T>>(
      "embed", EmbeddingOptions{.vocab = vocabulary_.size(), .dim = c.d_model, .init = Initializer::normal(0.02)}, rng_);
  this->register_child(*embed_);
  pos_ = std::make_unique<Positions<T>>(
      "pos", PositionOptions{.kind = PositionEncoding::learned, .max_len = c.context, .d_model = c.d_model}, rng_);
  this->register_child(*pos_);
  stack_ = std::make_unique<TransformerStack<T>>(
      "stack", TransformerStackOptions{.n_layers = c.n_layers, .block = block_options(c)}, rng_);
  this->register_child(*stack_);
  head_ = std::make_unique<LmHead<T>>("head", LmHeadOptions{.d_model = c.d_model, .vocab = vocabulary_.size(), .bias = false},
                                      *embed_);
  this->register_child(*head_);
  // GPT-2's scaled init of the projections into the residual stream: each block adds two, so the stream's
  // variance grows with 2 N terms of this size.
  const Initializer residual = Initializer::normal(0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layers)));
  for (std::size_t i = 0; i < stack_->size(); ++i) {
    TransformerBlock<T>& block = stack_->block(i);
    if (c.attention == AttentionMode::learnable) residual.apply(block.attention().wo().value, rng_);
    residual.apply(block.feed_forward().linear2().weight().value, rng_);
  }
  if (this->parameter_count() != implied_parameter_count(c))
    fail<Error>("gpt: the model has {} parameters but implied_parameter_count says {}; the two must be kept in step",
                this->parameter_count(), implied_parameter_count(c));
}

// The one forward: training (no cache, gradients on), evaluation and sampling (gradients off, with or
// without a cache) all run it.
template <class T>
Var<T> Gpt<T>::forward(Tape<T>& tape, const Ids& tokens, KvCache<T>* cache) {
  Var<T> x = pos_->forward(embed_->forward(tape, tokens), cache ? cache->length() : 0);  // (B, T, D)
  return head_->forward(stack_->forward(x, nullptr, cache));                             // (B, T, V)
}

template <class T>
StepOutput<T> Gpt<T>::loss(Tape<T>& tape, const SequenceBatch& batch) {
  Var<T> out = forward(tape, batch.tokens, nullptr);
  return {cross_entropy(out, batch.labels), out};
}

template class Gpt<float>;

std::string_view mode_title(AttentionMode mode) {
  return mode == AttentionMode::learnable ? "learnable" : "parameter-free";
}
std::string_view mode_file_name(AttentionMode mode) {
  return mode == AttentionMode::learnable ? "learnable" : "parameter_free";
}

std::string describe(const Gpt<float>::Config& c) {
  return fmt::format("{} attention, {} block{} of width {}, {} heads, MLP {}, context {}, {} bytes{}", mode_title(c.attention),
                     c.n_layers, c.n_layers == 1 ? "" : "s", c.d_model, c.n_heads, feed_forward_width(c.d_model, c.d_ff),
                     c.context, c.vocabulary.size() / 2, c.dropout > 0 ? fmt::format(", dropout {}", c.dropout) : "");
}

std::vector<std::vector<std::vector<double>>> attention_maps(Gpt<float>& model, std::string_view text) {
  const std::vector<std::int32_t> ids = model.vocabulary().encode(text, "attention_maps");
  const bool was_training = model.training();
  model.eval();
  for (std::size_t layer = 0; layer < model.stack().size(); ++layer) model.stack().block(layer).attention().keep_weights(true);
  Tape<float> tape;
  NoGradGuard<float> no_grad(tape);
  Ids window(Shape::mat(1, static_cast<Index>(ids.size())));
  std::copy(ids.begin(), ids.end(), window.data());
  (void)model.forward(tape, window, nullptr);
  std::vector<std::vector<std::vector<double>>> maps;
  for (std::size_t layer = 0; layer < model.stack().size(); ++layer) {
    maps.emplace_back();
    SelfAttention<float>& attention = model.stack().block(layer).attention();
    for (const Tensor& head : attention.attention_weights())  // (1, T, T)
      maps.back().emplace_back(head.data(), head.data() + head.numel());
    attention.keep_weights(false);  // training and sampling have no use for them
  }
  model.train(was_training);
  return maps;
}

Var<double> BigramModel::forward(Tape<double>& tape, const Ids& tokens, KvCache<double>*) {
  if (tokens.numel() == 0) fail<ValueError>("bigram: no bytes to read");
  const Index N = tokens.numel(), V = bigram_.vocab();
  Node<double>& n = tape.record("bigram_logits", {}, Shape::batched(1, N, V), Where::current());
  for (Index t = 0; t < N; ++t)  // log P(next | this byte), for each byte
    for (Index v = 0; v < V; ++v) n.value.at(0, t, v) = std::log(bigram_.probability(tokens[t], static_cast<std::int32_t>(v)));
  return tape.commit(n);
}

}  // namespace gpt
