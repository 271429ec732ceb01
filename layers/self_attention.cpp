#include "tapegrad/layers/self_attention.hpp"

#include <array>
#include <cmath>
#include <span>

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {

template <class T>
void SelfAttention<T>::check(std::string_view name, const SelfAttentionOptions& options) {
  const Index D = options.d_model, H = options.n_heads;
  if (D <= 0 || H <= 0)
    fail<ValueError>("self_attention '{}': d_model and n_heads must be positive, got {} and {}", name, D, H);
  if (options.d_head && *options.d_head <= 0)
    fail<ValueError>("self_attention '{}': d_head must be positive, got {}", name, *options.d_head);
  const bool learnable = options.mode == AttentionMode::learnable;
  if (!learnable && (D % H != 0 || options.d_head.value_or(D / H) != D / H))
    fail<ValueError>(
        "self_attention '{}': the parameter-free mode splits X into heads, so d_model ({}) must be "
        "n_heads ({}) times d_head ({})",
        name, D, H, options.d_head.value_or(D / H));
  if (!learnable && (options.bias || options.output_projection))
    fail<ValueError>(
        "self_attention '{}': the parameter-free mode has no parameters, so no bias and no output "
        "projection",
        name);
  if (learnable && !options.d_head && D % H != 0)
    fail<ValueError>("self_attention '{}': d_model {} is not divisible by n_heads {}, and no d_head is given", name, D,
                     H);
}

template <class T>
SelfAttention<T>::SelfAttention(std::string name, const SelfAttentionOptions& options, Rng* rng)
    : Module<T>(std::move(name)), options_(options) {
  check(this->name(), options);
  const Index D = options.d_model, H = options.n_heads;
  d_head_ = options.d_head.value_or(D / H);
  weights_.resize(static_cast<std::size_t>(H));
  if (options.mode == AttentionMode::parameter_free) return;
  if (!rng)
    fail<ValueError>("self_attention '{}': the learnable mode initialises Wq, Wk and Wv, so it needs an Rng",
                     this->name());
  auto weight = [&](std::string_view local, Index rows, Index cols) {
    return &this->register_parameter(local, options.init.make<T>(Shape::mat(rows, cols), *rng));
  };
  const Index width = H * d_head_;
  q_.w = weight("wq", D, width);
  k_.w = weight("wk", D, width);
  v_.w = weight("wv", D, width);
  if (options.bias) {
    q_.b = &this->register_parameter("bq", TensorT<T>(Shape::vec(width)));
    k_.b = &this->register_parameter("bk", TensorT<T>(Shape::vec(width)));
    v_.b = &this->register_parameter("bv", TensorT<T>(Shape::vec(width)));
  }
  if (options.output_projection) {
    o_.w = weight("wo", width, D);
    if (options.bias) o_.b = &this->register_parameter("bo", TensorT<T>(Shape::vec(D)));
  }
}

template <class T>
Parameter<T>& SelfAttention<T>::need(Parameter<T>* p, const char* what) {
  if (!p)
    fail<NameError>("self_attention '{}': has no {} ({})", this->path(), what,
                    options_.mode == AttentionMode::parameter_free ? "the parameter-free mode has no parameters"
                    : what[0] == 'b'                               ? "it was built without bias"
                                                                   : "it was built without the output projection");
  return *p;
}

template <class T>
const std::vector<TensorT<T>>& SelfAttention<T>::attention_weights() const {
  if (!kept_)
    fail<UsageError>("self_attention '{}': {}; call keep_weights(true) before the forward whose weights you want",
                     this->path(),
                     keep_weights_ ? "no forward has kept its weights since keep_weights(true)"
                                   : "the layer keeps no attention weights");
  return weights_;
}

template <class T>
double SelfAttention<T>::scale_factor() const {
  const auto dh = static_cast<double>(d_head_);
  if (options_.scale == AttentionScale::inv_sqrt_d_head) return 1.0 / std::sqrt(dh);
  return options_.scale == AttentionScale::inv_d_head ? 1.0 / dh : 1.0;  // none: 1
}

// The combined mask (nonzero = blocked), or nullptr when nothing is blocked: causal alone is one (T, Tk)
// mask shared by the batch; padding makes it (B, T, T), blocking padded key columns. Query i is the token
// at position first + i, key j the token at position j (first > 0: the newest tokens against a cache).
template <class T>
const Mask* SelfAttention<T>::build_mask(const Shape& x, const Mask* key_padding, Index first) {
  const Index B = x.batch, L = x.rows, keys = first + L;
  if (!options_.causal && !key_padding) return nullptr;
  mask_.resize(key_padding ? Shape::batched(B, L, keys) : Shape::mat(L, keys));
  for (Index b = 0; b < mask_.batch(); ++b)
    for (Index i = 0; i < L; ++i)
      for (Index j = 0; j < keys; ++j)
        mask_.at(b, i, j) =
            static_cast<std::uint8_t>((options_.causal && j > first + i) || (key_padding && key_padding->at(b, j)));
  return &mask_;
}

template <class T>
Var<T> SelfAttention<T>::forward(Var<T> x, const Mask* key_padding, KvCache<T>* kv_cache) {
  Tape<T>& t = Tape<T>::of("self_attention", {{"x", x}});
  const Shape s = x.shape();
  if (s.rank != 3 || s.cols != options_.d_model)
    fail<ShapeError>("self_attention '{}': x is {} but the layer takes (batch, tokens, {}) inputs", this->path(), s,
                     options_.d_model);
  if (key_padding && key_padding->shape() != Shape::mat(s.batch, s.rows))
    fail<ShapeError>("self_attention '{}': the key padding mask is {} but x is {}; it must be {}x{} (batch, tokens)",
                     this->path(), key_padding->shape(), s, s.batch, s.rows);
  if (kv_cache) check_cached(t, s, key_padding);
  AttentionCache<T>* cache = kv_cache ? &kv_cache->of(this) : nullptr;  // this layer's keys and values
  const Index first = cache ? cache->length() : 0;                      // the position of x's first token
  const Mask* mask = build_mask(s, key_padding, first);

  // in w + b in one affine node (as Linear computes it), or in w without biases.
  const auto project = [&](Var<T> in, const Projection& p) {
    return p.b ? affine(in, t.param(*p.w), t.param(*p.b)) : matmul(in, t.param(*p.w));
  };
  Var<T> q = x, k = x, v = x;
  if (options_.mode == AttentionMode::learnable) {
    // K, then Q, then V: backward then adds dV, dQ, dK into dX in the order the parameter-free graph
    // does (softmax(X X^T) X), so with identity weights the two give bit-identical input gradients.
    k = project(x, k_);  // (B, T, D) x (D, H dh): one product over all tokens
    q = project(x, q_);
    v = project(x, v_);
  }
  if (cache) {  // the newest tokens' keys and values join the cache; attention reads all it holds
    cache->append(k.value(), v.value());
    k = t.constant_in_place(cache->keys());  // (1, L, H dh): read where they are, not copied
    v = t.constant_in_place(cache->values());
  }
  // Every head at once, each reading its columns of Q, K and V in place (autograd/ops_attention.cpp).
  kept_ = false;
  Var<T> out = attention(q, k, v, options_.n_heads, mask, scale_factor(),
                         keep_weights_ ? std::span<TensorT<T>>(weights_) : std::span<TensorT<T>>());
  kept_ = keep_weights_;
  if (o_.w) out = project(out, o_);  // (B, T, H dh) -> (B, T, D)
  return out;
}

template <class T>
void SelfAttention<T>::check_cached(const Tape<T>& t, const Shape& s, const Mask* key_padding) const {
  if (!options_.causal)
    fail<UsageError>(
        "self_attention '{}': a cache feeds the newest tokens only, which needs a causal layer (here every "
        "token attends to later ones too)",
        this->path());
  if (t.grad_enabled())
    fail<UsageError>(
        "self_attention '{}': a cached forward takes no gradient (the cache's keys are values, not a "
        "recording); run it with gradients off (NoGradGuard)",
        this->path());
  if (s.batch != 1 || key_padding)
    fail<ShapeError>(
        "self_attention '{}': a cached forward reads one sequence's newest tokens, (1, tokens, {}) and no "
        "padding; x is {}",
        this->path(), options_.d_model, s);
}

template <class T>
TorchName SelfAttention<T>::torch_name(std::string_view local_name) const {
  const Index width = options_.n_heads * d_head_;
  std::string differs;
  if (!options_.output_projection)
    differs = "always has an output projection (out_proj) and this layer has none";
  else if (width != options_.d_model)
    differs = fmt::format("projects to d_model columns and this layer to n_heads x d_head = {} (d_model {})", width,
                          options_.d_model);
  else if (options_.scale != AttentionScale::inv_sqrt_d_head)
    differs = fmt::format("scales scores by 1/sqrt(d_head) and this layer by '{}'", to_string(options_.scale));
  if (!differs.empty())
    fail<ValueError>(
        "self_attention '{}': has no twin in PyTorch: nn.MultiheadAttention {}; save it in the tapegrad "
        "layout",
        this->path(), differs);
  static constexpr std::array<std::string_view, 3> weights = {"wq", "wk", "wv"}, biases = {"bq", "bk", "bv"};
  for (int k = 0; k < 3; ++k) {
    if (local_name == weights[static_cast<std::size_t>(k)]) return {"in_proj_weight", true, k, 3};
    if (local_name == biases[static_cast<std::size_t>(k)]) return {"in_proj_bias", false, k, 3};
  }
  if (local_name == "wo") return {"out_proj.weight", true};
  if (local_name == "bo") return {"out_proj.bias"};
  return Module<T>::torch_name(local_name);
}

template class SelfAttention<float>;
template class SelfAttention<double>;

}  // namespace tapegrad
