#pragma once
// The primitive ops. Each is one function in autograd/ops_*.cpp holding its shape checks, its forward
// value and, beside it, its backward rule. Shapes are written (B, T, D) with the legend of
// core/shape.hpp; "row" means the last dimension. Every op takes the source line that recorded it
// (defaulted), which errors and anomaly reports print.
//
// All ops exist for float and double (explicitly instantiated).

#include <cstdint>
#include <span>

#include "tapegrad/autograd/tape.hpp"

namespace tapegrad {

// ---- products (ops_matmul.cpp) ---------------------------------------------------------------
// a and b are 2-D (M,K)x(K,N), both batched (B,M,K)x(B,K,N), or a batched times a shared 2-D
// weight (B,M,K)x(K,N), computed as one (B*M,K)x(K,N) product. The transposed forms read their
// operand transposed in place (no copy).
template <class T> Var<T> matmul(Var<T> a, Var<T> b, Where where = Where::current());     // a b
template <class T> Var<T> matmul_bt(Var<T> a, Var<T> b, Where where = Where::current());  // a b^T
template <class T> Var<T> matmul_at(Var<T> a, Var<T> b, Where where = Where::current());  // a^T b

// ---- elementwise (ops_elementwise.cpp) ---------------------------------------------------------
// b either has a's shape, or is a row of a's width (rank 1, or 1 x cols) added to every row (a bias),
// or, when a is batched (B,T,D), a (T,D) matrix shared by every batch item (positions).
template <class T> Var<T> add(Var<T> a, Var<T> b, Where where = Where::current());
template <class T> Var<T> sub(Var<T> a, Var<T> b, Where where = Where::current());
template <class T> Var<T> mul(Var<T> a, Var<T> b, Where where = Where::current());
template <class T> Var<T> scale(Var<T> a, double factor, Where where = Where::current());
template <class T> Var<T> relu(Var<T> a, Where where = Where::current());
template <class T> Var<T> tanh(Var<T> a, Where where = Where::current());
template <class T> Var<T> gelu(Var<T> a, Where where = Where::current());  // exact (erf) form
template <class T> Var<T> sum(Var<T> a, Where where = Where::current());   // -> one element
template <class T> Var<T> mean(Var<T> a, Where where = Where::current());  // -> one element
template <class T> Var<T> transpose(Var<T> a, Where where = Where::current());  // per batch item

// ---- softmax (ops_softmax.cpp) -----------------------------------------------------------------
// Row-wise softmax of `scale` * x (the scale fused in: attention's 1/sqrt(d) costs no extra pass). An
// optional mask (nonzero = blocked) of x's (rows, cols), shared over the batch, or of x's full shape
// sets blocked entries to exactly 0; a fully blocked row gives all zeros and a zero gradient, never NaN.
// A NaN or Inf among a row's open entries is not hidden: that row's open outputs are NaN.
// The mask is read during the call only.
template <class T>
Var<T> softmax_rows(Var<T> x, const Mask* mask = nullptr, double scale = 1.0, Where where = Where::current());
template <class T> Var<T> log_softmax_rows(Var<T> x, Where where = Where::current());

// ---- losses (ops_loss.cpp) ---------------------------------------------------------------------
// Cross-entropy of logits (N,V) or (B,T,V) against one integer target per row (targets of shape
// (N) or (B,T)), fused with log-softmax; the mean over rows whose target is not `ignore_label`
// (0 if every row is ignored).
inline constexpr std::int32_t kIgnoreLabel = -100;  // PyTorch's default ignore_index
template <class T>
Var<T> cross_entropy(Var<T> logits, const Ids& targets, std::int32_t ignore_label = kIgnoreLabel,
                     Where where = Where::current());
// Mean of (a - b)^2 over all elements; a and b of the same shape.
template <class T> Var<T> mse(Var<T> a, Var<T> b, Where where = Where::current());

// ---- indexing (ops_indexing.cpp) ---------------------------------------------------------------
// Columns [begin, begin + count) of every row (one attention head's slice of Q, K or V).
template <class T> Var<T> slice_cols(Var<T> x, Index begin, Index count, Where where = Where::current());
// Inputs side by side along the columns; all share batch and rows (heads back to one width).
template <class T> Var<T> concat_cols(std::span<const Var<T>> parts, Where where = Where::current());
// Rows of a 2-D table (V,D) picked by ids: ids (N) -> (N,D), ids (B,T) -> (B,T,D). The backward
// rule scatter-adds into the picked rows (an embedding lookup).
template <class T> Var<T> gather_rows(Var<T> table, const Ids& ids, Where where = Where::current());

}  // namespace tapegrad
