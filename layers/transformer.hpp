#pragma once
// The pieces of a decoder-style language model, on SelfAttention in either mode:
//
//   FeedForward        Linear(d, d_ff), GELU, [dropout], Linear(d_ff, d)
//   TransformerBlock   pre-norm:  x = x + drop(attn(LN1 x));  x = x + drop(FFN(LN2 x))
//   TransformerStack   N blocks ("blocks.0", "blocks.1", ...) and a final LayerNorm ("norm")
//   LmHead             logits = h W + b, or tied to a token embedding: h E^T + b
//
// With the learnable mode a block is PyTorch's nn.TransformerEncoderLayer(norm_first=True,
// activation="gelu", batch_first=True): attention with biases and the output projection (Wq, Wk, Wv are
// the three blocks of in_proj_weight, transposed; Wo is out_proj.weight transposed), and the FFN's
// linear1/linear2. tests/test_layers.cpp checks outputs and every gradient against it in float64. The
// parameter-free mode is softmax(h h^T / sqrt(d_head)) h with h = LN1(x), heads splitting h's columns; it
// has no attention parameters (the norms and the FFN still learn).
//
// Without `layernorm` the sub-layers see x itself (no LN1, LN2, final norm); without `mlp` a block is
// attention and its residual only.
//
// Generation runs the same forward, with gradients off (NoGradGuard) and a cache of keys and values
// (layers/kv_cache.hpp): the blocks pass it to their attention, which then reads the newest tokens only.

#include <memory>
#include <optional>

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/required.hpp"
#include "tapegrad/layers/dropout.hpp"
#include "tapegrad/layers/embedding.hpp"
#include "tapegrad/layers/kv_cache.hpp"
#include "tapegrad/layers/linear.hpp"
#include "tapegrad/layers/module.hpp"
#include "tapegrad/layers/normalization.hpp"
#include "tapegrad/layers/self_attention.hpp"

namespace tapegrad {

// The hidden width of a FeedForward: d_hidden, or 4 d_model when it is unset (as FeedForwardOptions and the
// blocks' d_ff say), for code that sizes a model before building it.
inline Index feed_forward_width(Index d_model, std::optional<Index> d_hidden) { return d_hidden.value_or(4 * d_model); }

struct FeedForwardOptions {
  Required<Index, "FeedForwardOptions::d_model"> d_model;
  std::optional<Index> d_hidden = std::nullopt;  // unset: 4 d_model
  double dropout = 0;                            // after the GELU
  Initializer init = Initializer::xavier_uniform();
};

template <class T>
class FeedForward : public Module<T> {
 public:
  FeedForward(std::string name, const FeedForwardOptions& options, Rng& rng);
  Var<T> forward(Var<T> x);  // (..., d_model) -> (..., d_model)
  Linear<T>& linear1() { return linear1_; }
  Linear<T>& linear2() { return linear2_; }

 private:
  Linear<T> linear1_, linear2_;
  Dropout<T> drop_;
};

struct TransformerBlockOptions {
  AttentionMode mode = AttentionMode::learnable;
  Required<Index, "TransformerBlockOptions::d_model"> d_model;
  Index n_heads = 1;
  std::optional<Index> d_ff = std::nullopt;  // the FFN's hidden width; unset: 4 d_model
  // Attention's biases (bq, bk, bv, bo) and output projection (Wo). Unset: as nn.TransformerEncoderLayer,
  // both in the learnable mode; the parameter-free mode has neither (setting either there is a ValueError).
  std::optional<bool> bias = std::nullopt;
  std::optional<bool> output_projection = std::nullopt;
  bool causal = true;                                // token t sees tokens <= t (a language model)
  bool layernorm = true;                             // pre-norm LN1, LN2; false: none
  bool mlp = true;                                   // the FFN sub-layer
  double dropout = 0;                                // on both residual branches and after the FFN's GELU
  double eps = 1e-5;                                 // the LayerNorms'
  Initializer init = Initializer::xavier_uniform();  // attention and FFN weights
};

template <class T>
class TransformerBlock : public Module<T> {
 public:
  TransformerBlock(std::string name, const TransformerBlockOptions& options, Rng& rng);
  // The checks of the options alone, nothing built; `options` back. ValueError naming the block, or its
  // attention ("<name>.attn", SelfAttention::check) for the sizes and the mode.
  static const TransformerBlockOptions& check(std::string_view name, const TransformerBlockOptions& options);
  // x (B, T, d_model) -> (B, T, d_model); key_padding (B, T) and `cache` as SelfAttention's (with a cache,
  // x is the newest tokens of one sequence).
  Var<T> forward(Var<T> x, const Mask* key_padding = nullptr, KvCache<T>* cache = nullptr);

  const TransformerBlockOptions& options() const { return options_; }
  SelfAttention<T>& attention() { return attn_; }
  // NameError naming the block when it was built without them.
  LayerNorm<T>& norm1() { return need(norm1_, "norm1", "layernorm"); }
  LayerNorm<T>& norm2() { return need(norm2_, "norm2", options_.mlp ? "layernorm" : "the MLP"); }
  FeedForward<T>& feed_forward() { return need(ff_, "feed-forward sub-layer", "mlp"); }
  // nn.TransformerEncoderLayer: "self_attn", and the FFN's linear1 and linear2 directly in the block.
  std::string torch_child_name(std::string_view child_name) const override {
    return child_name == "attn" ? "self_attn" : child_name == "ff" ? "" : std::string(child_name);
  }

 private:
  // *part; NameError "has no <what> (built without <option>)" when the block has none.
  template <class M>
  M& need(const std::unique_ptr<M>& part, const char* what, const char* option) const {
    if (!part) fail<NameError>("transformer_block '{}': has no {} (built without {})", this->path(), what, option);
    return *part;
  }

  TransformerBlockOptions options_;
  SelfAttention<T> attn_;
  std::unique_ptr<LayerNorm<T>> norm1_, norm2_;
  std::unique_ptr<FeedForward<T>> ff_;
  Dropout<T> drop1_, drop2_;
};

struct TransformerStackOptions {
  Index n_layers = 1;
  TransformerBlockOptions block;  // the final norm follows block.layernorm
  // Activation checkpointing (autograd/activation_checkpoint.hpp): 0, off; k > 0, blocks 0, k, 2k, ...
  // keep only their input and output on the tape and run their forward again in backward (1: every
  // block). Gradients are bit-identical either way, so it is how a model runs, not what it is: no
  // checkpoint file holds it, and set_checkpoint_every changes it on a built (or loaded) stack.
  Index checkpoint_every = 0;
};

template <class T>
class TransformerStack : public Module<T> {
 public:
  TransformerStack(std::string name, const TransformerStackOptions& options, Rng& rng);
  // key_padding and `cache` as each block's (with a cache, x is the newest tokens of one sequence).
  Var<T> forward(Var<T> x, const Mask* key_padding = nullptr, KvCache<T>* cache = nullptr);
  std::size_t size() const { return blocks_.size(); }
  TransformerBlock<T>& block(std::size_t i) { return blocks_.template at<TransformerBlock<T>>(i); }
  const TransformerStackOptions& options() const { return options_; }
  // TransformerStackOptions::checkpoint_every, on a built stack; ValueError naming the stack when negative.
  void set_checkpoint_every(Index every);
  // Whether block i is checkpointed (when gradients are recorded; otherwise checkpointing changes nothing).
  bool checkpointed(std::size_t i) const {
    return options_.checkpoint_every > 0 && i % static_cast<std::size_t>(options_.checkpoint_every) == 0;
  }
  // nn.TransformerEncoder: "layers.0", "layers.1", ..., and the final "norm".
  std::string torch_child_name(std::string_view child_name) const override {
    return child_name == "blocks" ? "layers" : std::string(child_name);
  }

 private:
  TransformerStackOptions options_;
  ModuleList<T> blocks_;
  std::unique_ptr<LayerNorm<T>> norm_;
};

struct LmHeadOptions {
  Required<Index, "LmHeadOptions::d_model"> d_model;
  Required<Index, "LmHeadOptions::vocab"> vocab;
  bool bias = true;
  Initializer init = Initializer::xavier_uniform();
};

template <class T>
class LmHead : public Module<T> {
 public:
  // Its own (d_model, vocab) weight: a Linear(d_model, vocab), unnamed, so that its parameters are the
  // head's own ("head.weight", "head.bias").
  LmHead(std::string name, const LmHeadOptions& options, Rng& rng);
  // Tied: the logits are h E^T with the embedding's (vocab, d_model) table, which stays the embedding's
  // parameter (listed once, under the embedding's name); only the bias is the head's. The embedding must
  // outlive the head.
  LmHead(std::string name, const LmHeadOptions& options, Embedding<T>& tied);
  Var<T> forward(Var<T> h);  // (..., d_model) -> (..., vocab)
  // PyTorch's names are the Linear's, nn.Linear(d_model, vocab): "weight" (vocab, d_model), transposed;
  // "bias". A tied head has only its bias: the table is the embedding's, written once under its name.

 private:
  LmHeadOptions options_;
  std::unique_ptr<Linear<T>> linear_;  // untied
  Parameter<T>* bias_ = nullptr;       // tied
  Embedding<T>* tied_ = nullptr;
};

extern template class FeedForward<float>;
extern template class FeedForward<double>;
extern template class TransformerBlock<float>;
extern template class TransformerBlock<double>;
extern template class TransformerStack<float>;
extern template class TransformerStack<double>;
extern template class LmHead<float>;
extern template class LmHead<double>;

}  // namespace tapegrad
