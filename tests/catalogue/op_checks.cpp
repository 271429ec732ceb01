#include "catalogue/op_checks.hpp"

#include <array>
#include <type_traits>

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

// One generic lambda serves both element types.
template <class F>
OpCheck check(std::string op, std::string name, std::vector<Shape> inputs, F f) {
  return {std::move(op), std::move(name), std::move(inputs), OpFn<double>(f), OpFn<float>(f)};
}

Mask causal_mask(Index t) {
  Mask m(Shape::mat(t, t));
  for (Index r = 0; r < t; ++r)
    for (Index c = r + 1; c < t; ++c) m.at(r, c) = 1;
  return m;
}

// A per-item mask with one fully blocked row and a padded key column.
Mask ragged_mask() {
  Mask m(Shape::batched(2, 4, 4));
  for (Index r = 0; r < 4; ++r) m.at(0, r, 3) = 1;  // item 0: key 3 is padding
  for (Index c = 0; c < 4; ++c) m.at(1, 2, c) = 1;  // item 1: row 2 sees nothing
  m.at(1, 0, 1) = 1;
  return m;
}

const Mask kCausal = causal_mask(4);
const Mask kRagged = ragged_mask();
const Ids kTargets2d(Shape::vec(5), {0, 3, 1, 1, 2});
const Ids kTargets3d(Shape::mat(2, 3), {0, kIgnoreLabel, 3, 2, 1, kIgnoreLabel});
const Ids kIds1d(Shape::vec(5), {4, 0, 4, 2, 4});
const Ids kIds2d(Shape::mat(2, 3), {1, 1, 0, 3, 1, 4});
const Ids kPositions2(Shape::vec(2), {2, 0});
const Ids kPositions3(Shape::vec(3), {3, 0, 3});

// x^2 + 1/2: an input at least 1/2 away from 0 for log, sqrt and div's divisor, whose rules (and finite
// differences) need one. mul and add have their own cases, so a wrong rule of the op under test still shows.
template <class T>
Var<T> positive(Tape<T>& t, Var<T> x) {
  return add(mul(x, x), t.constant(TensorT<T>(x.shape(), T(0.5))));
}

}  // namespace

const std::vector<OpCheck>& op_checks() {
  using S = Shape;
  static const std::vector<OpCheck> checks = {
      check("matmul", "matmul 2-D", {S::mat(3, 4), S::mat(4, 5)}, [](auto&, auto in) { return matmul(in[0], in[1]); }),
      check("matmul", "matmul batched", {S::batched(2, 3, 4), S::batched(2, 4, 5)},
              [](auto&, auto in) { return matmul(in[0], in[1]); }),
      check("matmul", "matmul batched x shared weight", {S::batched(2, 3, 4), S::mat(4, 5)},
              [](auto&, auto in) { return matmul(in[0], in[1]); }),
      check("matmul_bt", "matmul_bt 2-D", {S::mat(3, 4), S::mat(5, 4)}, [](auto&, auto in) { return matmul_bt(in[0], in[1]); }),
      check("matmul_bt", "matmul_bt batched", {S::batched(2, 3, 4), S::batched(2, 5, 4)},
              [](auto&, auto in) { return matmul_bt(in[0], in[1]); }),
      check("matmul_bt", "matmul_bt batched x shared weight", {S::batched(2, 3, 4), S::mat(5, 4)},
              [](auto&, auto in) { return matmul_bt(in[0], in[1]); }),
      check("matmul_bt", "matmul_bt x x^T (one input on both sides)", {S::batched(2, 3, 4)},
              [](auto&, auto in) { return matmul_bt(in[0], in[0]); }),
      check("matmul_at", "matmul_at 2-D", {S::mat(4, 3), S::mat(4, 5)}, [](auto&, auto in) { return matmul_at(in[0], in[1]); }),
      check("matmul_at", "matmul_at batched", {S::batched(2, 4, 3), S::batched(2, 4, 5)},
              [](auto&, auto in) { return matmul_at(in[0], in[1]); }),
      check("affine", "affine 2-D, b (N)", {S::mat(3, 4), S::mat(4, 5), S::vec(5)},
              [](auto&, auto in) { return affine(in[0], in[1], in[2]); }),
      check("affine", "affine batched x shared weight, b (1,N)", {S::batched(2, 3, 4), S::mat(4, 5), S::mat(1, 5)},
              [](auto&, auto in) { return affine(in[0], in[1], in[2]); }),
      check("affine", "affine x x + b (one input as x and w)", {S::mat(4, 4), S::vec(4)},
              [](auto&, auto in) { return affine(in[0], in[0], in[1]); }),
      check("affine", "affine x w + x (one input as x and b)", {S::mat(1, 4), S::mat(4, 4)},
              [](auto&, auto in) { return affine(in[0], in[1], in[0]); }),
      check("add", "add same shape", {S::mat(3, 4), S::mat(3, 4)}, [](auto&, auto in) { return add(in[0], in[1]); }),
      check("add", "add row bias (rank 1)", {S::batched(2, 3, 4), S::vec(4)}, [](auto&, auto in) { return add(in[0], in[1]); }),
      check("add", "add positions shared by the batch", {S::batched(2, 3, 4), S::mat(3, 4)},
              [](auto&, auto in) { return add(in[0], in[1]); }),
      check("sub", "sub same shape", {S::batched(2, 3, 4), S::batched(2, 3, 4)},
              [](auto&, auto in) { return sub(in[0], in[1]); }),
      check("sub", "sub row (1 x cols)", {S::mat(3, 4), S::mat(1, 4)}, [](auto&, auto in) { return sub(in[0], in[1]); }),
      check("sub", "sub shared by the batch", {S::batched(2, 3, 4), S::mat(3, 4)},
              [](auto&, auto in) { return sub(in[0], in[1]); }),
      check("mul", "mul same shape", {S::mat(3, 4), S::mat(3, 4)}, [](auto&, auto in) { return mul(in[0], in[1]); }),
      check("mul", "mul row", {S::batched(2, 3, 4), S::vec(4)}, [](auto&, auto in) { return mul(in[0], in[1]); }),
      check("mul", "mul shared by the batch", {S::batched(2, 3, 4), S::mat(3, 4)},
              [](auto&, auto in) { return mul(in[0], in[1]); }),
      check("mul", "mul x * x", {S::mat(3, 4)}, [](auto&, auto in) { return mul(in[0], in[0]); }),
      check("scale", "scale", {S::batched(2, 3, 4)}, [](auto&, auto in) { return scale(in[0], -0.37); }),
      check("scale", "operators: x * s, s * x and -x", {S::mat(3, 4)}, [](auto&, auto in) { return -(2 * (in[0] * 0.5)); }),
      check("add_scalar", "operators: x + s, s + x and x - s", {S::batched(2, 3, 4)},
            [](auto&, auto in) { return (0.25 + (in[0] + 0.7)) - 1.5; }),
      check("silu", "silu 3-D", {S::batched(2, 3, 4)}, [](auto&, auto in) { return silu(in[0]); }),
      check("div_scalar", "operator: x / s", {S::mat(3, 4)}, [](auto&, auto in) { return in[0] / -1.3; }),
      check("scalar_sub", "operator: s - x", {S::mat(3, 4)}, [](auto&, auto in) { return 0.7 - in[0]; }),
      check("scalar_div", "operator: s / x, x^2 + 1/2", {S::mat(3, 4)},
            [](auto& t, auto in) { return 1.3 / positive(t, in[0]); }),
      check("relu", "relu", {S::batched(2, 3, 4)}, [](auto&, auto in) { return relu(in[0]); }),
      check("tanh", "tanh", {S::batched(2, 3, 4)}, [](auto&, auto in) { return tanh(in[0]); }),
      check("gelu", "gelu", {S::batched(2, 3, 4)}, [](auto&, auto in) { return gelu(in[0]); }),
      check("sum", "sum", {S::batched(2, 3, 4)}, [](auto&, auto in) { return sum(in[0]); }),
      check("mean", "mean", {S::mat(3, 4)}, [](auto&, auto in) { return mean(in[0]); }),
      check("transpose", "transpose 2-D", {S::mat(3, 4)}, [](auto&, auto in) { return transpose(in[0]); }),
      check("transpose", "transpose batched", {S::batched(2, 3, 4)}, [](auto&, auto in) { return transpose(in[0]); }),
      check("softmax_rows", "softmax_rows", {S::batched(2, 3, 5)}, [](auto&, auto in) { return softmax_rows(in[0]); }),
      check("softmax_rows", "softmax_rows, causal mask shared by the batch", {S::batched(2, 4, 4)},
              [](auto&, auto in) { return softmax_rows(in[0], &kCausal); }),
      check("softmax_rows", "softmax_rows, per-item mask with a fully blocked row", {S::batched(2, 4, 4)},
              [](auto&, auto in) { return softmax_rows(in[0], &kRagged); }),
      check("softmax_rows", "softmax_rows, scale 0.35 fused, per-item mask", {S::batched(2, 4, 4)},
              [](auto&, auto in) { return softmax_rows(in[0], &kRagged, 0.35); }),
      check("attention", "attention, 2 heads, 4 queries over 5 keys, dk 3, dv 2", {S::batched(2, 4, 6), S::batched(2, 5, 6), S::batched(2, 5, 4)},
              [](auto&, auto in) { return attention(in[0], in[1], in[2], 2, nullptr, 0.6); }),
      check("attention", "attention, 1 head, causal mask shared by the batch", {S::batched(2, 4, 3), S::batched(2, 4, 3), S::batched(2, 4, 3)},
              [](auto&, auto in) { return attention(in[0], in[1], in[2], 1, &kCausal); }),
      check("attention", "attention, 2 heads, per-item mask with a fully blocked row", {S::batched(2, 4, 4), S::batched(2, 4, 4), S::batched(2, 4, 6)},
              [](auto&, auto in) { return attention(in[0], in[1], in[2], 2, &kRagged, 0.35); }),
      check("attention", "attention, q = k = v (parameter-free), 3 heads, causal", {S::batched(2, 4, 6)},
              [](auto&, auto in) { return attention(in[0], in[0], in[0], 3, &kCausal, 0.8); }),
      check("attention", "attention, q = k, v apart, 2-D (one sequence)", {S::mat(4, 4), S::mat(4, 2)},
              [](auto&, auto in) { return attention(in[0], in[0], in[1], 2, &kCausal); }),
      check("log_softmax_rows", "log_softmax_rows", {S::batched(2, 3, 5)}, [](auto&, auto in) { return log_softmax_rows(in[0]); }),
      check("cross_entropy", "cross_entropy 2-D", {S::mat(5, 4)}, [](auto&, auto in) { return cross_entropy(in[0], kTargets2d); }),
      check("cross_entropy", "cross_entropy batched with ignored rows", {S::batched(2, 3, 4)},
              [](auto&, auto in) { return cross_entropy(in[0], kTargets3d); }),
      check("mse", "mse", {S::batched(2, 3, 4), S::batched(2, 3, 4)}, [](auto&, auto in) { return mse(in[0], in[1]); }),
      check("slice_cols", "slice_cols", {S::batched(2, 3, 6)}, [](auto&, auto in) { return slice_cols(in[0], 2, 3); }),
      check("concat_cols", "concat_cols of three", {S::batched(2, 3, 2), S::batched(2, 3, 1), S::batched(2, 3, 3)},
              [](auto&, auto in) { return concat_cols(in); }),
      check("concat_cols", "heads: slice_cols then concat_cols in another order", {S::batched(2, 3, 6)},
              [](auto&, auto in) {
                using V = std::remove_cvref_t<decltype(in[0])>;
                const std::array<V, 2> parts = {slice_cols(in[0], 3, 3), slice_cols(in[0], 0, 3)};
                return concat_cols(std::span<const V>(parts));
              }),
      check("gather_rows", "gather_rows, ids (N) with repeats", {S::mat(5, 3)},
              [](auto&, auto in) { return gather_rows(in[0], kIds1d); }),
      check("gather_rows", "gather_rows, ids (B, T)", {S::mat(5, 3)}, [](auto&, auto in) { return gather_rows(in[0], kIds2d); }),
      check("add", "add column (N,1) over the rows' columns", {S::mat(3, 4), S::mat(3, 1)},
              [](auto&, auto in) { return add(in[0], in[1]); }),
      check("add", "add column (B,T,1) batched", {S::batched(2, 3, 4), S::batched(2, 3, 1)},
              [](auto&, auto in) { return add(in[0], in[1]); }),
      check("sub", "sub column (B,T,1) batched", {S::batched(2, 3, 4), S::batched(2, 3, 1)},
              [](auto&, auto in) { return sub(in[0], in[1]); }),
      check("sub", "sub column (N,1)", {S::mat(4, 3), S::mat(4, 1)}, [](auto&, auto in) { return sub(in[0], in[1]); }),
      check("mul", "mul column (N,1)", {S::mat(3, 4), S::mat(3, 1)}, [](auto&, auto in) { return mul(in[0], in[1]); }),
      check("mul", "mul column (B,T,1) batched", {S::batched(2, 3, 4), S::batched(2, 3, 1)},
              [](auto&, auto in) { return mul(in[0], in[1]); }),
      check("div", "div same shape, divisor x^2 + 1/2", {S::mat(3, 4), S::mat(3, 4)},
              [](auto& t, auto in) { return div(in[0], positive(t, in[1])); }),
      check("div", "div row, divisor x^2 + 1/2", {S::batched(2, 3, 4), S::vec(4)},
              [](auto& t, auto in) { return div(in[0], positive(t, in[1])); }),
      check("div", "div shared by the batch, divisor x^2 + 1/2", {S::batched(2, 3, 4), S::mat(3, 4)},
              [](auto& t, auto in) { return div(in[0], positive(t, in[1])); }),
      check("div", "div column (N,1), divisor x^2 + 1/2", {S::mat(3, 4), S::mat(3, 1)},
              [](auto& t, auto in) { return div(in[0], positive(t, in[1])); }),
      check("div", "div column (B,T,1) batched, divisor e^x", {S::batched(2, 3, 4), S::batched(2, 3, 1)},
              [](auto&, auto in) { return div(in[0], exp(in[1])); }),
      // The broadcast operand on the left (a over b, as PyTorch broadcasts either way round).
      check("add", "add, a row on the left", {S::vec(4), S::batched(2, 3, 4)}, [](auto&, auto in) { return add(in[0], in[1]); }),
      check("add", "add, a column (B,T,1) on the left", {S::batched(2, 3, 1), S::batched(2, 3, 4)},
              [](auto&, auto in) { return add(in[0], in[1]); }),
      check("sub", "sub, a row (1 x cols) on the left", {S::mat(1, 4), S::mat(3, 4)},
              [](auto&, auto in) { return sub(in[0], in[1]); }),
      check("sub", "sub, shared by the batch on the left", {S::mat(3, 4), S::batched(2, 3, 4)},
              [](auto&, auto in) { return sub(in[0], in[1]); }),
      check("mul", "mul, a column (N,1) on the left", {S::mat(3, 1), S::mat(3, 4)},
              [](auto&, auto in) { return mul(in[0], in[1]); }),
      check("mul", "mul, shared by the batch on the left", {S::mat(3, 4), S::batched(2, 3, 4)},
              [](auto&, auto in) { return mul(in[0], in[1]); }),
      check("div", "div, a row on the left, divisor x^2 + 1/2", {S::vec(4), S::batched(2, 3, 4)},
              [](auto& t, auto in) { return div(in[0], positive(t, in[1])); }),
      check("div", "div, shared by the batch on the left, divisor x^2 + 1/2", {S::mat(3, 4), S::batched(2, 3, 4)},
              [](auto& t, auto in) { return div(in[0], positive(t, in[1])); }),
      check("div", "div, a column (B,T,1) on the left, divisor e^x", {S::batched(2, 3, 1), S::batched(2, 3, 4)},
              [](auto&, auto in) { return div(in[0], exp(in[1])); }),
      check("mul", "mul, a row on the left, its other operand used again", {S::vec(4), S::mat(3, 4)},
              [](auto&, auto in) { return add(mul(in[0], in[1]), in[1]); }),
      check("reshape", "reshape 3-D -> 2-D, then a product", {S::batched(2, 3, 4), S::mat(4, 2)},
              [](auto&, auto in) { return matmul(reshape(in[0], S::mat(6, 4)), in[1]); }),
      check("reshape", "reshape 2-D -> 3-D, then a batched product", {S::mat(6, 4)},
              [](auto&, auto in) {
                const auto x = reshape(in[0], S::batched(2, 3, 4));
                return matmul_bt(x, x);
              }),
      check("reshape", "reshape vector -> 2-D", {S::vec(12)}, [](auto&, auto in) { return reshape(in[0], S::mat(3, 4)); }),
      check("pick_positions", "pick_positions, B = 2", {S::batched(2, 3, 4)},
              [](auto&, auto in) { return pick_positions(in[0], kPositions2); }),
      check("pick_positions", "pick_positions, B = 3, two items at the last position", {S::batched(3, 4, 2)},
              [](auto&, auto in) { return pick_positions(in[0], kPositions3); }),
      check("row_sum", "row_sum 2-D", {S::mat(3, 4)}, [](auto&, auto in) { return row_sum(in[0]); }),
      check("row_sum", "row_sum 3-D", {S::batched(2, 3, 4)}, [](auto&, auto in) { return row_sum(in[0]); }),
      check("row_mean", "row_mean 2-D", {S::mat(3, 4)}, [](auto&, auto in) { return row_mean(in[0]); }),
      check("row_mean", "row_mean 3-D, subtracted as a column", {S::batched(2, 3, 4)},
              [](auto&, auto in) { return sub(in[0], row_mean(in[0])); }),
      check("row_max", "row_max 2-D (distinct values)", {S::mat(3, 5)}, [](auto&, auto in) { return row_max(in[0]); }),
      check("row_max", "row_max 3-D (distinct values)", {S::batched(2, 3, 4)}, [](auto&, auto in) { return row_max(in[0]); }),
      check("exp", "exp", {S::batched(2, 3, 4)}, [](auto&, auto in) { return exp(in[0]); }),
      check("log", "log of x^2 + 1/2", {S::mat(3, 4)}, [](auto& t, auto in) { return log(positive(t, in[0])); }),
      check("log", "log of sigmoid(x)", {S::batched(2, 3, 4)}, [](auto&, auto in) { return log(sigmoid(in[0])); }),
      check("sqrt", "sqrt of x^2 + 1/2", {S::batched(2, 3, 4)}, [](auto& t, auto in) { return sqrt(positive(t, in[0])); }),
      check("sqrt", "sqrt of e^x", {S::mat(3, 4)}, [](auto&, auto in) { return sqrt(exp(in[0])); }),
      check("sigmoid", "sigmoid", {S::batched(2, 3, 4)}, [](auto&, auto in) { return sigmoid(in[0]); }),
      // A generator made inside the function: every evaluation (each finite difference) draws the same mask.
      check("dropout", "dropout p = 0.5, 2-D", {S::mat(4, 6)},
              [](auto&, auto in) {
                Rng rng(7, 3);
                return dropout(in[0], 0.5, rng);
              }),
      check("dropout", "dropout p = 0.2, 3-D", {S::batched(2, 3, 4)},
              [](auto&, auto in) {
                Rng rng(8, 1);
                return dropout(in[0], 0.2, rng);
              }),
      check("layer_norm", "layer_norm 3-D, gamma and beta (D)", {S::batched(2, 3, 5), S::vec(5), S::vec(5)},
              [](auto&, auto in) { return layer_norm(in[0], in[1], in[2]); }),
      check("layer_norm", "layer_norm 2-D, gamma and beta (1,D), eps 0.1", {S::mat(4, 6), S::mat(1, 6), S::mat(1, 6)},
              [](auto&, auto in) { return layer_norm(in[0], in[1], in[2], 0.1); }),
  };
  return checks;
}

const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names = {
      "matmul", "matmul_bt", "matmul_at", "affine", "add", "sub", "mul", "scale", "relu", "tanh", "gelu", "sum", "mean",
      "transpose", "softmax_rows", "log_softmax_rows", "attention", "cross_entropy", "mse", "slice_cols", "concat_cols",
      "gather_rows", "reshape", "pick_positions", "row_sum", "row_mean", "row_max", "exp", "log", "sqrt", "sigmoid",
      "div", "dropout", "layer_norm", "silu", "add_scalar", "div_scalar", "scalar_sub", "scalar_div"};
  return names;
}

}  // namespace tapegrad
