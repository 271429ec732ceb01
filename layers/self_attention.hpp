#pragma once
// Self-attention, in the two modes the notes contrast, built from the autograd ops (so its backward
// comes from theirs): the projections by affine (x W + b, as Linear computes it; matmul without biases),
// the heads by the fused attention op.
//
//   parameter-free:  softmax(X X^T * s) X                      no parameters at all
//   learnable:       Q = X Wq, K = X Wk, V = X Wv;  softmax(Q K^T * s) V   (+ biases, + X Wo)
//
// Shapes (legend: B batch, T tokens, D = d_model, H heads, dh = d_head):
//   x (B, T, D) -> per head h: Q_h, K_h, V_h (B, T, dh), weights A_h = softmax(Q_h K_h^T s) (B, T, T),
//   out_h = A_h V_h (B, T, dh) -> heads side by side (B, T, H dh) -> with Wo: (B, T, D).
// The parameter-free mode splits X itself into H column blocks (dh = D / H).
//
// With Wq = Wk = Wv = I (one head, dh = D, no Wo, no biases) the learnable mode gives exactly the
// parameter-free result, outputs and input gradients bit for bit (tests/test_layers.cpp checks it).

#include <optional>
#include <string_view>
#include <vector>

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/enum_names.hpp"
#include "tapegrad/core/required.hpp"
#include "tapegrad/layers/init.hpp"
#include "tapegrad/layers/kv_cache.hpp"
#include "tapegrad/layers/module.hpp"

namespace tapegrad {

enum class AttentionMode { parameter_free, learnable };
// The factor s on the scores: 1/sqrt(dh) (the standard), none (note 001), 1/dh (note 002).
enum class AttentionScale { inv_sqrt_d_head, none, inv_d_head };

template <>
struct EnumNames<AttentionMode> {
  static constexpr std::string_view what = "attention mode";
  static constexpr std::array<EnumName<AttentionMode>, 2> names = {{
      {AttentionMode::parameter_free, "parameter_free", "free"},
      {AttentionMode::learnable, "learnable", "learned"},
  }};
};

template <>
struct EnumNames<AttentionScale> {
  static constexpr std::string_view what = "attention scale";
  static constexpr std::array<EnumName<AttentionScale>, 3> names = {{
      {AttentionScale::inv_sqrt_d_head, "inv_sqrt_d_head", "sqrt"},
      {AttentionScale::none, "none"},
      {AttentionScale::inv_d_head, "inv_d_head", "d"},
  }};
};

struct SelfAttentionOptions {
  AttentionMode mode = AttentionMode::learnable;
  Required<Index, "SelfAttentionOptions::d_model"> d_model;
  Index n_heads = 1;
  std::optional<Index> d_head = std::nullopt;  // unset: d_model / n_heads
  bool bias = false;                           // bq, bk, bv (and bo with the output projection)
  bool output_projection = false;              // Wo: (n_heads * d_head, d_model)
  bool causal = false;                         // token t attends to tokens <= t only
  AttentionScale scale = AttentionScale::inv_sqrt_d_head;
  Initializer init = Initializer::xavier_uniform();  // Wq, Wk, Wv, Wo
};

template <class T>
class SelfAttention : public Module<T> {
 public:
  SelfAttention(std::string name, const SelfAttentionOptions& options, Rng& rng)
      : SelfAttention(std::move(name), options, &rng) {}
  // The parameter-free mode initialises nothing, so it needs no Rng; a learnable one given here is a
  // ValueError.
  SelfAttention(std::string name, const SelfAttentionOptions& options)
      : SelfAttention(std::move(name), options, nullptr) {}
  // The constructor's checks of the options, alone: ValueError naming the layer, nothing built.
  static void check(std::string_view name, const SelfAttentionOptions& options);

  // x (B, T, d_model). key_padding (B, T), optional: nonzero marks a padding position, which no
  // query attends to. A query that can see no key at all (causal + padding) gets a zero output.
  // With `cache` (generation, layers/kv_cache.hpp), x (1, N, d_model) is the N newest tokens of a sequence
  // whose earlier tokens' keys and values the cache holds for this layer: theirs are appended, and their
  // queries attend to every position held, as they would in a forward of the whole sequence. Only a causal
  // layer reads a cache (its outputs would otherwise depend on tokens not fed yet), only with gradients off
  // (the keys held are values, not a recording); both are UsageErrors, and tokens past the cache's capacity
  // too.
  Var<T> forward(Var<T> x, const Mask* key_padding = nullptr, KvCache<T>* cache = nullptr);

  // The attention weights of the last forward, one (B, T, T) tensor per head (row = query, column =
  // key), when that forward kept them: keep_weights(true) before it. Keeping costs one copy of every
  // head's weights per forward, which training does not need, so a layer keeps none unless asked.
  // UsageError naming the layer if the last forward kept none.
  const std::vector<TensorT<T>>& attention_weights() const;
  void keep_weights(bool on) { keep_weights_ = on; }
  bool keeps_weights() const { return keep_weights_; }

  const SelfAttentionOptions& options() const { return options_; }
  Index output_width() const {
    return options_.output_projection ? Index{options_.d_model} : options_.n_heads * d_head_;
  }
  double scale_factor() const;
  // The projections, by reference; one the layer does not have (every one in the parameter-free mode, Wo
  // without the output projection, biases without bias) is a NameError naming the layer.
  Parameter<T>& wq() { return need(q_.w, "wq"); }
  Parameter<T>& wk() { return need(k_.w, "wk"); }
  Parameter<T>& wv() { return need(v_.w, "wv"); }
  Parameter<T>& wo() { return need(o_.w, "wo"); }
  Parameter<T>& bq() { return need(q_.b, "bq"); }
  Parameter<T>& bk() { return need(k_.b, "bk"); }
  Parameter<T>& bv() { return need(v_.b, "bv"); }
  Parameter<T>& bo() { return need(o_.b, "bo"); }

  // nn.MultiheadAttention: "in_proj_weight" (3 D, D) stacks Wq^T, Wk^T, Wv^T; "in_proj_bias" bq, bk, bv;
  // "out_proj.weight" Wo^T, "out_proj.bias" bo. ValueError naming the layer and the reason for a learnable
  // layer that has no such twin: without the output projection (MultiheadAttention always has one),
  // with n_heads x d_head other than d_model, or with another scale than 1/sqrt(d_head).
  TorchName torch_name(std::string_view local_name) const override;

 private:
  // A projection in W + b: Linear's computation, on parameters the layer holds itself; either may be absent.
  struct Projection {
    Parameter<T>* w = nullptr;
    Parameter<T>* b = nullptr;
  };

  SelfAttention(std::string name, const SelfAttentionOptions& options, Rng* rng);
  Parameter<T>& need(Parameter<T>* p, const char* what);
  const Mask* build_mask(const Shape& x, const Mask* key_padding, Index first);
  void check_cached(const Tape<T>& t, const Shape& x, const Mask* key_padding) const;

  SelfAttentionOptions options_;
  Index d_head_;
  Projection q_, k_, v_, o_;         // o_: the output projection
  Mask mask_;                        // causal and/or padding, rebuilt per forward without allocating
  std::vector<TensorT<T>> weights_;  // per head, (B, T, T), of the last forward that kept them
  bool keep_weights_ = false;
  bool kept_ = false;  // whether the last forward kept its weights
};

extern template class SelfAttention<float>;
extern template class SelfAttention<double>;

}  // namespace tapegrad
