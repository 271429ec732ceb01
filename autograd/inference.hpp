#pragma once
// The inference path: the values of the ops a trained model's forward uses, computed on tensors without a
// tape (no nodes, no saved state, no gradients), for generation one token at a time (layers/kv_cache.hpp).
// Each function sits beside its op in autograd/ops_*.cpp and runs the op's kernels (the matrix products,
// the row softmax, layer_norm's statistics in double, gelu's erf), so a tape-free forward computes what
// the tape computes; only the grouping of some sums differs (a product of one row against one of many,
// a softmax over a row's open keys against the masked row), which moves the last bits of a float.
//
// Shapes: x is (N, K) or any rank with K columns ("rows" of K values); the result keeps x's leading
// dimensions. Legend: H heads, dk and dv the widths of a head's keys and values, L cached positions.

#include "tapegrad/core/tensor.hpp"

namespace tapegrad::inference {

// x w + b, as affine (or matmul without b): w (K, M), b a row of M values ((M) or (1, M)) or null.
template <class T>
TensorT<T> affine(const TensorT<T>& x, const TensorT<T>& w, const TensorT<T>* b);
// x w^T + b, as matmul_bt and an add: w (M, K) (a tied head reads the embedding table (V, D) so).
template <class T>
TensorT<T> affine_bt(const TensorT<T>& x, const TensorT<T>& w, const TensorT<T>* b);
// layer_norm over each row: (x - mean) / sqrt(var + eps) * gamma + beta.
template <class T>
TensorT<T> layer_norm(const TensorT<T>& x, const TensorT<T>& gamma, const TensorT<T>& beta, double eps);
// x Phi(x), elementwise (exact, erf form), as gelu.
template <class T>
TensorT<T> gelu(TensorT<T> x);
// a + b, elementwise, both of one shape (a residual connection).
template <class T>
TensorT<T> add(TensorT<T> a, const TensorT<T>& b);

// Causal attention of the N newest tokens of a sequence, every head: query row r is the token at position
// first + r and attends to keys 0 .. first + r, as the attention op does under a causal mask,
//   out_h = softmax(scale q_h K_h^T) V_h   over the open keys,
// q (N, H dk), keys (>= first + N, H dk), values (>= first + N, H dv) -> out (N, H dv).
template <class T>
TensorT<T> attend(const TensorT<T>& q, const TensorT<T>& keys, const TensorT<T>& values, Index first, Index heads,
                  double scale);

}  // namespace tapegrad::inference
