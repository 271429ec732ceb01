#pragma once
// The primitive ops. Each is an op struct in autograd/ops_*.cpp, written with the Function API
// (autograd/function.hpp) as yours would be: its shape checks and forward value and, beside them, its
// backward rule; the functions below record it. Shapes are written (B, T, D) with the legend of
// core/shape.hpp; "row" means the last dimension. Every op takes the source line that recorded it
// (defaulted), which errors and anomaly reports print.
//
// All ops exist for float and double (explicitly instantiated).

#include <cstdint>
#include <span>
#include <type_traits>

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/rng.hpp"

namespace tapegrad {

// ---- products (ops_matmul.cpp) ---------------------------------------------------------------
// a and b are 2-D (M,K)x(K,N), both batched (B,M,K)x(B,K,N), or a batched times a shared 2-D
// weight (B,M,K)x(K,N), computed as one (B*M,K)x(K,N) product. The transposed forms read their
// operand transposed in place (no copy).
template <class T>
Var<T> matmul(Var<T> a, Var<T> b, Where where = Where::current());  // a b
template <class T>
Var<T> matmul_bt(Var<T> a, Var<T> b, Where where = Where::current());  // a b^T
template <class T>
Var<T> matmul_at(Var<T> a, Var<T> b, Where where = Where::current());  // a^T b
// x w + b: x (M,K) or (B,M,K) times a 2-D weight w (K,N), plus b, a row of N values ((N) or (1,N)) added
// to every row: a linear layer in one node. The values and gradients are add(matmul(x, w), b)'s, bit
// for bit, without add's pass over the product forward and its copy of the gradient backward (the
// bias is added to each block of rows as its product completes).
template <class T>
Var<T> affine(Var<T> x, Var<T> w, Var<T> b, Where where = Where::current());

// ---- elementwise (ops_elementwise.cpp) ---------------------------------------------------------
// b either has a's shape, or is a row of a's width (rank 1, or 1 x cols) added to every row (a bias),
// or, when a is batched (B,T,D), a (T,D) matrix shared by every batch item (positions), or a column
// (.., 1) with a's leading dimensions, (N,1) for a (N,D) and (B,T,1) for a (B,T,D), one value per row.
// Or the other way round, a broadcast over b (x * r and r * x alike, r a column): the result has the
// shape of the operand the other is broadcast over; a column times a row is a ShapeError.
template <class T>
Var<T> add(Var<T> a, Var<T> b, Where where = Where::current());
template <class T>
Var<T> sub(Var<T> a, Var<T> b, Where where = Where::current());
template <class T>
Var<T> mul(Var<T> a, Var<T> b, Where where = Where::current());
template <class T>
Var<T> scale(Var<T> a, double factor, Where where = Where::current());
template <class T>
Var<T> relu(Var<T> a, Where where = Where::current());
template <class T>
Var<T> tanh(Var<T> a, Where where = Where::current());
template <class T>
Var<T> gelu(Var<T> a, Where where = Where::current());  // exact (erf) form
template <class T>
Var<T> transpose(Var<T> a, Where where = Where::current());  // per batch item

// ---- softmax (ops_rowwise.cpp) -----------------------------------------------------------------
// Row-wise softmax of `scale` * x (the scale fused in: attention's 1/sqrt(d) costs no extra pass). An
// optional mask (nonzero = blocked) of x's (rows, cols), shared over the batch, or of x's full shape
// sets blocked entries to exactly 0; a fully blocked row gives all zeros and a zero gradient, never NaN.
// A NaN or Inf among a row's open entries is not hidden: that row's open outputs are NaN.
// The mask is read during the call only.
template <class T>
Var<T> softmax_rows(Var<T> x, const Mask* mask = nullptr, double scale = 1.0, Where where = Where::current());
template <class T>
Var<T> log_softmax_rows(Var<T> x, Where where = Where::current());

// ---- attention (ops_attention.cpp) -------------------------------------------------------------
// Scaled dot-product attention over `heads` heads, fused: for every batch item and head h,
//   out_h = softmax(scale Q_h K_h^T, mask) V_h
// where Q_h is columns [h dk, (h+1) dk) of q, K_h those of k, V_h columns [h dv, (h+1) dv) of v.
// q (B, Tq, H dk), k (B, Tk, H dk), v (B, Tk, H dv) -> out (B, Tq, H dv), heads side by side; 2-D
// inputs are one sequence. The mask (nonzero = blocked) is (Tq, Tk), shared by the batch and the heads,
// or (B, Tq, Tk), one per batch item; blocked weights are exactly 0, and a query with every key blocked
// gets a zero output. The same as slicing out each head, matmul_bt, softmax_rows, matmul and
// concat_cols (tests compare the two), without the copies: each head's (Tq, Tk) weights are computed,
// normalised and used while they are in cache, its operands read in place. `weights`, when not empty,
// holds one tensor per head and receives that head's weights, (B, Tq, Tk) (for inspection).
template <class T>
Var<T> attention(Var<T> q, Var<T> k, Var<T> v, Index heads, const Mask* mask = nullptr, double scale = 1.0,
                 std::span<TensorT<T>> weights = {}, Where where = Where::current());

// ---- losses (ops_loss.cpp) ---------------------------------------------------------------------
// Cross-entropy of logits (N,V) or (B,T,V) against one integer target per row (targets of shape
// (N) or (B,T)), fused with log-softmax; the mean over rows whose target is not `ignore_label`
// (0 if every row is ignored).
inline constexpr std::int32_t kIgnoreLabel = -100;  // PyTorch's default ignore_index
template <class T>
Var<T> cross_entropy(Var<T> logits, const Ids& targets, std::int32_t ignore_label = kIgnoreLabel,
                     Where where = Where::current());
// Mean of (a - b)^2 over all elements; a and b of the same shape.
template <class T>
Var<T> mse(Var<T> a, Var<T> b, Where where = Where::current());

// ---- indexing (ops_indexing.cpp) ---------------------------------------------------------------
// Columns [begin, begin + count) of every row (one attention head's slice of Q, K or V).
template <class T>
Var<T> slice_cols(Var<T> x, Index begin, Index count, Where where = Where::current());
// Inputs side by side along the columns; all share batch and rows (heads back to one width).
template <class T>
Var<T> concat_cols(std::span<const Var<T>> parts, Where where = Where::current());
// Rows of a 2-D table (V,D) picked by ids: ids (N) -> (N,D), ids (B,T) -> (B,T,D). The backward
// rule scatter-adds into the picked rows (an embedding lookup).
template <class T>
Var<T> gather_rows(Var<T> table, const Ids& ids, Where where = Where::current());

// ---- shapes (ops_indexing.cpp) -----------------------------------------------------------------
// The same elements in row-major order under another shape of equal size: (B, T, D) -> (B*T, D) and
// back. The tensors are contiguous, so no element moves (the value is one copy into the node's buffer).
template <class T>
Var<T> reshape(Var<T> x, Shape shape, Where where = Where::current());
// One position per sequence: x (B, T, D), positions (B) with 0 <= positions[b] < T -> (B, D), row b
// being x[b, positions[b], :] (a sequence's last real token, a classification token).
template <class T>
Var<T> pick_positions(Var<T> x, const Ids& positions, Where where = Where::current());

// ---- reductions (ops_rowwise.cpp) ----------------------------------------------------------------
template <class T>
Var<T> sum(Var<T> a, Where where = Where::current());  // -> one element
template <class T>
Var<T> mean(Var<T> a, Where where = Where::current());  // -> one element
// Over the last axis, keeping it with width 1: (N, D) -> (N, 1), (B, T, D) -> (B, T, 1). A (.., 1)
// result broadcasts back over the rows in add, sub, mul and div, on either side (a column: the other
// operand's leading dimensions, width 1).
template <class T>
Var<T> row_sum(Var<T> x, Where where = Where::current());
template <class T>
Var<T> row_mean(Var<T> x, Where where = Where::current());
// The gradient goes to the first maximal element of each row (as PyTorch's max(dim) picks one index).
template <class T>
Var<T> row_max(Var<T> x, Where where = Where::current());

// ---- more elementwise (ops_elementwise.cpp) -----------------------------------------------------------
template <class T>
Var<T> exp(Var<T> a, Where where = Where::current());
// log and sqrt are defined for a > 0 and a >= 0: outside, the value is NaN (or -Inf at log 0), which
// anomaly detection reports, as in PyTorch.
template <class T>
Var<T> log(Var<T> a, Where where = Where::current());
template <class T>
Var<T> sqrt(Var<T> a, Where where = Where::current());
template <class T>
Var<T> sigmoid(Var<T> a, Where where = Where::current());
// a sigmoid(a) (SiLU, swish): SwiGLU's gate, silu(gate(h)) * up(h).
template <class T>
Var<T> silu(Var<T> a, Where where = Where::current());
// a / b, one broadcast over the other as in add (same shape, a row, the batch-shared matrix, or a column).
template <class T>
Var<T> div(Var<T> a, Var<T> b, Where where = Where::current());

// ---- dropout and layer norm (ops_norm.cpp) -------------------------------------------------------
// Inverted dropout: each element is zeroed with probability p (rng.uniform() < p) and the others are
// scaled by 1 / (1 - p), so the expected value is unchanged; 0 <= p < 1. The mask is drawn from `rng`,
// one uniform per element in row-major order, so a seeded stream (the trainer's, saved in checkpoints)
// gives the same mask again. p = 0 draws nothing and returns x unchanged. This op always drops:
// evaluation mode is the caller's (Dropout, layers/dropout.hpp) decision not to call it.
template <class T>
Var<T> dropout(Var<T> x, double p, Rng& rng, Where where = Where::current());
// Layer normalisation over the last axis, fused: y = (x - mean) / sqrt(var + eps) * gamma + beta with
// the biased variance (as PyTorch); gamma and beta are rows of x's width. One pass forward, one back.
template <class T>
Var<T> layer_norm(Var<T> x, Var<T> gamma, Var<T> beta, double eps = 1e-5, Where where = Where::current());

// ---- operators on Var (ops_elementwise.cpp) -------------------------------------------------------
// a + b, a - b, a * b and a / b are add, sub, mul and div (either broadcast over the other as they do); -a is
// scale(a, -1); a number s on either side is taken in a's type: a + s, s + a, a - s, s - a, a * s and
// s * a (scale), a / s, s / a. On the right, a layer's Parameter is read on a's tape: x * gain is
// x * tape.param(gain), so a layer written with operators reads its weights as it names them. Like every
// op they record the caller's line: an operator cannot take a defaulted argument, but the conversion of its
// right operand (or its scalar) can, and that runs in the caller's expression.
namespace detail {
// The right operand: a Var, a number, or a layer's Parameter, read on the left operand's tape (tape.param).
template <class T>
struct Operand {
  Var<T> var;
  double number = 0;
  bool is_number = false;
  Parameter<T>* parameter = nullptr;
  Where where;
  Operand(Var<T> v, Where w = Where::current()) : var(v), where(w) {}  // NOLINT: converts on purpose
  Operand(double s, Where w = Where::current()) : number(s), is_number(true), where(w) {}  // NOLINT: as above
  Operand(Parameter<T>& p, Where w = Where::current()) : parameter(&p), where(w) {}        // NOLINT: as above
  // The Var this operand stands for in `op` (a op b): a Parameter is read on a's tape once a is checked, so a
  // refused a leaves the tape as it was. (auto: the catalogue's test takes every function declared to return a
  // Var<T> in this header for an op.)
  auto on(Var<T> a, const char* op) const {
    return parameter ? Tape<T>::of(op, {{"a", a}}).param(*parameter, where) : var;
  }
};
// A number on the left.
struct ScalarHere {
  double value;
  Where where;
  ScalarHere(double v, Where w = Where::current()) : value(v), where(w) {}  // NOLINT: converts on purpose
};
template <class T>
Var<T> add_scalar(Var<T> a, double s, Where where);  // a + s
template <class T>
Var<T> div_scalar(Var<T> a, double s, Where where);  // a / s
template <class T>
Var<T> scalar_sub(Var<T> a, double s, Where where);  // s - a
template <class T>
Var<T> scalar_div(Var<T> a, double s, Where where);  // s / a
}  // namespace detail

// The right operand's type is not deduced (std::type_identity_t): T comes from the left operand.
template <class T>
Var<T> operator+(Var<T> a, std::type_identity_t<detail::Operand<T>> b) {
  return b.is_number ? detail::add_scalar(a, b.number, b.where) : add(a, b.on(a, "add"), b.where);
}
template <class T>
Var<T> operator-(Var<T> a, std::type_identity_t<detail::Operand<T>> b) {
  return b.is_number ? detail::add_scalar(a, -b.number, b.where) : sub(a, b.on(a, "sub"), b.where);
}
template <class T>
Var<T> operator*(Var<T> a, std::type_identity_t<detail::Operand<T>> b) {
  return b.is_number ? scale(a, b.number, b.where) : mul(a, b.on(a, "mul"), b.where);
}
template <class T>
Var<T> operator/(Var<T> a, std::type_identity_t<detail::Operand<T>> b) {
  return b.is_number ? detail::div_scalar(a, b.number, b.where) : div(a, b.on(a, "div"), b.where);
}
template <class T>
Var<T> operator+(detail::ScalarHere s, Var<T> a) {
  return detail::add_scalar(a, s.value, s.where);
}
template <class T>
Var<T> operator-(detail::ScalarHere s, Var<T> a) {
  return detail::scalar_sub(a, s.value, s.where);
}
template <class T>
Var<T> operator*(detail::ScalarHere s, Var<T> a) {
  return scale(a, s.value, s.where);
}
template <class T>
Var<T> operator/(detail::ScalarHere s, Var<T> a) {
  return detail::scalar_div(a, s.value, s.where);
}
// Unary minus has one operand, so it is written for each element type (a template would not convert it).
inline Var<float> operator-(detail::Operand<float> a) { return scale(a.var, -1.0, a.where); }
inline Var<double> operator-(detail::Operand<double> a) { return scale(a.var, -1.0, a.where); }
// A Parameter alone has no tape to be read on, so -gain does not compile: subtract it from a Var (x - gain).
template <class T>
Var<T> operator-(const Parameter<T>&) = delete;

}  // namespace tapegrad
