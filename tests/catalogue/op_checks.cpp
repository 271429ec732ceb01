#include "catalogue/op_checks.hpp"

#include <array>

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
  };
  return checks;
}

const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names = {
      "matmul", "matmul_bt", "matmul_at", "add", "sub", "mul", "scale", "relu", "tanh", "gelu", "sum", "mean",
      "transpose", "softmax_rows", "log_softmax_rows", "cross_entropy", "mse", "slice_cols", "concat_cols",
      "gather_rows"};
  return names;
}

}  // namespace tapegrad
