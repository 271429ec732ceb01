#include "tapegrad/layers/transformer.hpp"

#include <cmath>

#include "tapegrad/autograd/activation_checkpoint.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {

// ---- FeedForward ----------------------------------------------------------------------------------

template <class T>
FeedForward<T>::FeedForward(std::string name, const FeedForwardOptions& o, Rng& rng)
    : Module<T>(std::move(name)),
      linear1_("linear1", {.in = o.d_model, .out = feed_forward_width(o.d_model, o.d_hidden), .weight_init = o.init},
               rng),
      linear2_("linear2", {.in = linear1_.options().out, .out = o.d_model, .weight_init = o.init}, rng),
      drop_("dropout", o.dropout) {
  this->register_children(linear1_, linear2_, drop_);
}

template <class T>
Var<T> FeedForward<T>::forward(Var<T> x) {
  return linear2_.forward(drop_.forward(gelu(linear1_.forward(x))));
}

// ---- TransformerBlock -----------------------------------------------------------------------------

namespace {
// The block's attention. Biases and the output projection, unset: both in the learnable mode, as
// nn.TransformerEncoderLayer.
SelfAttentionOptions attention_options(const TransformerBlockOptions& o) {
  return {.mode = o.mode,
          .d_model = o.d_model,
          .n_heads = o.n_heads,
          .bias = o.bias.value_or(o.mode == AttentionMode::learnable),
          .output_projection = o.output_projection.value_or(o.mode == AttentionMode::learnable),
          .causal = o.causal,
          .init = o.init};
}
}  // namespace

template <class T>
const TransformerBlockOptions& TransformerBlock<T>::check(std::string_view name, const TransformerBlockOptions& o) {
  // The attention's sizes and mode are its own checks, naming it (the block's "attn").
  SelfAttention<T>::check(fmt::format("{}.attn", name), attention_options(o));
  if (o.d_ff && *o.d_ff <= 0) fail<ValueError>("transformer_block '{}': d_ff must be positive, got {}", name, *o.d_ff);
  if (!(o.dropout >= 0 && o.dropout < 1))
    fail<ValueError>("transformer_block '{}': dropout must be in [0, 1), got {}", name, o.dropout);
  if (!(o.eps > 0) || !std::isfinite(o.eps))
    fail<ValueError>("transformer_block '{}': eps must be a positive number, got {}", name, o.eps);
  return o;
}

template <class T>
TransformerBlock<T>::TransformerBlock(std::string name, const TransformerBlockOptions& o, Rng& rng)
    : Module<T>(std::move(name)),
      options_(check(this->name(), o)),
      attn_("attn", attention_options(o), rng),  // draws in the learnable mode only
      drop1_("dropout1", o.dropout),
      drop2_("dropout2", o.dropout) {
  // Registered in PyTorch's order of the encoder layer: attention, FFN, norms.
  this->register_child(attn_);
  if (o.mlp)
    this->make_child(ff_, "ff",
                     FeedForwardOptions{.d_model = o.d_model, .d_hidden = o.d_ff, .dropout = o.dropout, .init = o.init},
                     rng);
  if (o.layernorm) this->make_child(norm1_, "norm1", o.d_model, o.eps);
  if (o.layernorm && o.mlp) this->make_child(norm2_, "norm2", o.d_model, o.eps);
  this->register_children(drop1_, drop2_);
}

template <class T>
Var<T> TransformerBlock<T>::forward(Var<T> x, const Mask* key_padding, KvCache<T>* cache) {
  // x's shape is checked by the first layer that reads it, LN1 (its width) or the attention, naming it
  // ("<block>.norm1", "<block>.attn").
  Var<T> h = norm1_ ? norm1_->forward(x) : x;
  x = x + drop1_.forward(attn_.forward(h, key_padding, cache));
  if (ff_) {
    Var<T> g = norm2_ ? norm2_->forward(x) : x;
    x = x + drop2_.forward(ff_->forward(g));
  }
  return x;
}

// ---- TransformerStack -----------------------------------------------------------------------------

template <class T>
TransformerStack<T>::TransformerStack(std::string name, const TransformerStackOptions& o, Rng& rng)
    : Module<T>(std::move(name)), options_(o), blocks_("blocks") {
  if (o.n_layers < 1 || o.n_layers > 1024)
    fail<ValueError>("transformer_stack '{}': n_layers must be in [1, 1024], got {}", this->path(), o.n_layers);
  TransformerBlock<T>::check("blocks.0", o.block);
  set_checkpoint_every(o.checkpoint_every);
  this->register_child(blocks_);
  for (Index i = 0; i < o.n_layers; ++i) blocks_.template emplace<TransformerBlock<T>>(o.block, rng);
  if (o.block.layernorm) this->make_child(norm_, "norm", o.block.d_model, o.block.eps);
}

template <class T>
Var<T> TransformerStack<T>::forward(Var<T> x, const Mask* key_padding, KvCache<T>* cache) {
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    TransformerBlock<T>& b = block(i);
    if (checkpointed(i) && !cache)  // a cached forward runs with gradients off, where there is nothing to save
      x = checkpoint(x, b.rng(), [&b, key_padding](Var<T> h) { return b.forward(h, key_padding); });
    else
      x = b.forward(x, key_padding, cache);
  }
  return norm_ ? norm_->forward(x) : x;
}

template <class T>
void TransformerStack<T>::set_checkpoint_every(Index every) {
  if (every < 0)
    fail<ValueError>("transformer_stack '{}': checkpoint_every must be >= 0 (0: off), got {}", this->path(), every);
  options_.checkpoint_every = every;
}

// ---- LmHead -----------------------------------------------------------------------------------------

template <class T>
LmHead<T>::LmHead(std::string name, const LmHeadOptions& o, Rng& rng) : Module<T>(std::move(name)), options_(o) {
  if (o.d_model <= 0 || o.vocab <= 0)
    fail<ValueError>("lm_head '{}': d_model and vocab must be positive, got {} and {}", this->path(), o.d_model,
                     o.vocab);
  this->make_child(linear_, "", LinearOptions{.in = o.d_model, .out = o.vocab, .bias = o.bias, .weight_init = o.init},
                   rng);
}

template <class T>
LmHead<T>::LmHead(std::string name, const LmHeadOptions& o, Embedding<T>& tied)
    : Module<T>(std::move(name)), options_(o), tied_(&tied) {
  const Shape table = tied.table().value.shape();
  if (table != Shape::mat(o.vocab, o.d_model))
    fail<ShapeError>(
        "lm_head '{}': tied to the embedding '{}' of shape {}, but the head maps {} features to {} "
        "tokens (it needs {}x{})",
        this->path(), tied.path(), table, o.d_model, o.vocab, o.vocab, o.d_model);
  if (o.bias) bias_ = &this->register_parameter("bias", TensorT<T>(Shape::vec(o.vocab)));
}

template <class T>
Var<T> LmHead<T>::forward(Var<T> h) {
  Tape<T>& t = Tape<T>::of("lm_head", {{"h", h}});
  if (h.shape().cols != options_.d_model)
    fail<ShapeError>("lm_head '{}': h is {} but the head reads rows of {} features", this->path(), h.shape(),
                     options_.d_model);
  if (!tied_) return linear_->forward(h);
  Var<T> logits = matmul_bt(h, t.param(tied_->table()));
  return bias_ ? logits + t.param(*bias_) : logits;
}

template class FeedForward<float>;
template class FeedForward<double>;
template class TransformerBlock<float>;
template class TransformerBlock<double>;
template class TransformerStack<float>;
template class TransformerStack<double>;
template class LmHead<float>;
template class LmHead<double>;

}  // namespace tapegrad
