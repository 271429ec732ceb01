// Reductions: sum and mean over every element, to one; row_sum, row_mean and row_max over the last axis,
// keeping it with width 1: x (N, D) -> (N, 1), x (B, T, D) -> (B, T, 1); the result broadcasts back as a
// column in add, sub, mul and div.
#include <cmath>
#include <vector>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/kernels.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

// x's shape with the last axis reduced to width 1.
Shape column_of(Shape s) {
  s.cols = 1;
  return s;
}

// sum: C = sum_j X_j, dX_j += dC;  mean: C = sum_j X_j / D, dX_j += dC / D, over every element j of x (sum,
// mean: D = all of them) or of each row (row_sum, row_mean: D = x's width, C a column). `Mean`, `Rows` say which.
template <class T, bool Mean, bool Rows>
struct Reduce {
  static constexpr const char* name = Rows ? (Mean ? "row_mean" : "row_sum") : (Mean ? "mean" : "sum");
  static constexpr const char* inputs[] = {"x"};
  void forward(ForwardContext<T>& ctx, const TensorT<T>& x) const {
    const Shape s = x.shape();
    if constexpr (Rows) {
      if (Mean) detail::require_row_entries(name, s, "average");
      auto C = ctx.output(column_of(s)).flat().col(0);
      if (Mean)
        C = x.flat().rowwise().mean();
      else
        C = x.flat().rowwise().sum();
    } else {
      if (Mean && x.numel() == 0) fail<ShapeError>("{}: x is {}, which has no elements to average", name, s);
      ctx.output(Shape::scalar())[0] = Mean ? x.array().mean() : x.array().sum();
    }
  }
  static void backward(BackwardContext<T>& ctx, const OpInput<T>& x) {
    const Index n = Rows ? x.value.cols() : x.value.numel();  // the elements each value of dC summed
    const auto dC = ctx.grad_output().flat().col(0).array();  // one value per row (sum, mean: one)
    if constexpr (Rows && Mean) x.grad.add((dC / static_cast<T>(n)).replicate(1, n));
    if constexpr (Rows && !Mean) x.grad.add(dC.replicate(1, n));
    if constexpr (!Rows)  // every element in order
      x.grad.add(Eigen::Array<T, Eigen::Dynamic, 1>::Constant(n, Mean ? dC(0) / static_cast<T>(n) : dC(0)));
  }
};

// C = max_j X_j per row;  dX_k += dC for k the first maximal column (a NaN, if the row holds one), 0 elsewhere
template <class T>
struct RowMax {
  static constexpr const char* name = "row_max";
  static constexpr const char* inputs[] = {"x"};
  struct Saved {
    std::vector<Index> argmax;  // per flat row, the column whose value the forward returned
    std::size_t heap_bytes() const { return buffer_bytes(argmax); }
  };

  void forward(ForwardContext<T, Saved>& ctx, const TensorT<T>& x) const {
    const Shape s = x.shape();
    detail::require_row_entries(name, s, "take a maximum of");
    auto C = ctx.output(column_of(s)).flat();
    const auto X = x.flat();
    std::vector<Index>* argmax = nullptr;
    if (ctx.needs_grad()) {
      argmax = &ctx.saved().argmax;
      argmax->resize(static_cast<std::size_t>(X.rows()));
    }
    for (Index r = 0; r < X.rows(); ++r) {
      // Strictly greater replaces, so a tie keeps the first column. A NaN ends the search: the row's maximum
      // is NaN, as in PyTorch, rather than the largest of the other entries (maxCoeff would skip it).
      Index at = 0;
      for (Index c = 1; c < X.cols() && !std::isnan(X(r, at)); ++c)
        if (std::isnan(X(r, c)) || X(r, c) > X(r, at)) at = c;
      C(r, 0) = X(r, at);
      if (argmax) (*argmax)[static_cast<std::size_t>(r)] = at;
    }
  }
  static void backward(BackwardContext<T, Saved>& ctx, const OpInput<T>& x) {
    TensorT<T>* dX = detail::zeroed_grad(x.grad);  // one entry per row: the rest stay zero
    if (!dX) return;
    const auto& at = ctx.saved().argmax;
    const auto dC = ctx.grad_output().flat();
    auto dx = dX->flat();
    for (Index r = 0; r < dC.rows(); ++r) dx(r, at[static_cast<std::size_t>(r)]) += dC(r, 0);
  }
};

}  // namespace

// The public functions of this file (TAPEGRAD_ONE_INPUT: autograd/kernels.hpp).
TAPEGRAD_ONE_INPUT(sum, Reduce<T, false, false>)
TAPEGRAD_ONE_INPUT(mean, Reduce<T, true, false>)
TAPEGRAD_ONE_INPUT(row_sum, Reduce<T, false, true>)
TAPEGRAD_ONE_INPUT(row_mean, Reduce<T, true, true>)
TAPEGRAD_ONE_INPUT(row_max, RowMax<T>)

}  // namespace tapegrad
