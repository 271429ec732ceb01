#include "tapegrad/layers/decoder_lm.hpp"

#include <cmath>

namespace tapegrad {

namespace {

TransformerBlockOptions block_options(const DecoderLmConfig& c) {
  TransformerBlockOptions block{.mode = c.attention,
                                .d_model = c.d_model,
                                .n_heads = c.n_heads,
                                .d_ff = c.d_ff,
                                .causal = true,
                                .layernorm = true,
                                .mlp = true,
                                .dropout = c.dropout};
  if (c.init == LmInit::gpt2) block.init = Initializer::normal(0.02);
  return block;
}

}  // namespace

template <class T>
void DecoderLm<T>::check_config(const Config& c) {
  check_fields(c, "decoder_lm");  // every size within its bounds: the products below cannot overflow
  if (c.positions == PositionEncoding::onehot)
    fail<ValueError>("decoder_lm: one-hot positions widen the stream past d_model; use learned, sinusoidal or none");
  TransformerBlock<T>::check("stack.blocks.0", block_options(c));
}

// What the constructor below builds, counted (tests/test_decoder_lm.cpp compares it with built models of
// every kind): within check_config's bounds every product fits an Index.
template <class T>
Index DecoderLm<T>::count_parameters_of(const Config& c) {
  check_config(c);
  const Index V = c.vocab, D = c.d_model, F = feed_forward_width(c.d_model, c.d_ff);
  const Index attention = c.attention == AttentionMode::learnable ? 4 * D * D + 4 * D : 0;  // Wq Wk Wv Wo, biases
  const Index block = 2 * D + attention + 2 * D + (D * F + F + F * D + D);                  // LN1, attention, LN2, MLP
  return V * D                                                                              // the embedding
         + (c.positions == PositionEncoding::learned ? c.context * D : 0)                   // learned positions
         + c.n_layers * block + 2 * D                    // the blocks, the final LayerNorm
         + (c.tie ? 0 : D * V) + (c.head_bias ? V : 0);  // the head
}

// [readme:decoder_lm]
// The draws, in this order, are part of what a seed means (a program's checkpoints and tables depend on
// them): the embedding, learned positions, the blocks in order, an untied head, then GPT-2's residual
// projections.
template <class T>
DecoderLm<T>::DecoderLm(const Config& c, std::uint64_t stream) : Module<T>(), config_(c), rng_(c.seed, stream) {
  check_config(c);
  const bool gpt2 = c.init == LmInit::gpt2;
  EmbeddingOptions embedding{.vocab = c.vocab, .dim = c.d_model};
  if (gpt2) embedding.init = Initializer::normal(0.02);
  this->make_child(embed_, "embed", embedding, rng_);
  const PositionOptions positions{.kind = c.positions, .max_len = c.context, .d_model = c.d_model};
  this->make_child(pos_, "pos", positions, rng_);  // draws for learned positions only
  this->make_child(stack_, "stack", TransformerStackOptions{.n_layers = c.n_layers, .block = block_options(c)}, rng_);
  LmHeadOptions head{.d_model = c.d_model, .vocab = c.vocab, .bias = c.head_bias};
  if (gpt2) head.init = Initializer::normal(0.02);
  if (c.tie)
    this->make_child(head_, "head", head, *embed_);
  else
    this->make_child(head_, "head", head, rng_);
  if (gpt2) {
    // Each block adds two projections to the residual stream, so its variance grows with 2 N terms of this size.
    const Initializer residual = Initializer::normal(0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layers)));
    for (std::size_t i = 0; i < stack_->size(); ++i) {
      TransformerBlock<T>& block = stack_->block(i);
      if (c.attention == AttentionMode::learnable) residual.apply(block.attention().wo().value, rng_);
      residual.apply(block.feed_forward().linear2().weight().value, rng_);
    }
  }
}

template <class T>
Var<T> DecoderLm<T>::forward(Tape<T>& tape, const Ids& tokens, KvCache<T>* cache) {
  // No key-padding mask: in a causal model a query never sees later keys, so padding after a sequence's
  // end changes none of its positions' logits.
  Var<T> x = pos_->forward(embed_->forward(tape, tokens), cache);  // (B, T, D), at positions cache->length() on
  return head_->forward(stack_->forward(x, nullptr, cache));       // (B, T, V)
}
// [readme:decoder_lm-end]

template <class T>
std::vector<std::vector<TensorT<T>>> DecoderLm<T>::attention_maps(std::span<const std::int32_t> tokens) {
  if (tokens.empty()) fail<ValueError>("attention_maps: no tokens; give 1 to {} (the context)", config_.context);
  const EvalModeGuard<T> eval_mode(*this);  // no dropout on the weights shown
  const auto n = static_cast<Index>(tokens.size());
  const Ids ids(Shape::mat(1, n), tokens);
  Tape<T> tape;
  NoGradGuard<T> no_grad(tape);
  // Every attention layer keeps its weights for this forward, then each keeps them as it did before, also
  // when the forward throws (the embedding and the positions refuse tokens it cannot read).
  std::vector<bool> kept_before;
  for (std::size_t i = 0; i < stack_->size(); ++i) {
    kept_before.push_back(stack_->block(i).attention().keeps_weights());
    stack_->block(i).attention().keep_weights(true);
  }
  const detail::AtExit restore{[&] {
    for (std::size_t i = 0; i < kept_before.size(); ++i) stack_->block(i).attention().keep_weights(kept_before[i]);
  }};
  (void)forward(tape, ids, nullptr);
  std::vector<std::vector<TensorT<T>>> maps(stack_->size());
  for (std::size_t layer = 0; layer < stack_->size(); ++layer)
    for (const TensorT<T>& head : stack_->block(layer).attention().attention_weights())  // (1, T, T)
      maps[layer].emplace_back(Shape::mat(n, n), head.span());
  return maps;
}

template class DecoderLm<float>;
template class DecoderLm<double>;

}  // namespace tapegrad
