// Reductions over the last axis that keep it with width 1: row_sum, row_mean, row_max.
// x (N, D) -> (N, 1), x (B, T, D) -> (B, T, 1); the result broadcasts back as a column in add, sub,
// mul and div.
#include <cmath>
#include <vector>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

// x's shape with the last axis reduced to width 1.
Shape column_of(Shape s) {
  s.cols = 1;
  return s;
}

// sum: C = sum_j X_j, dX_j += dC;  mean: C = sum_j X_j / D, dX_j += dC / D (every column of the row).
// `Mean` says which.
template <class T, bool Mean>
struct RowReduce {
  static constexpr const char* name = Mean ? "row_mean" : "row_sum";
  static constexpr const char* inputs[] = {"x"};
  void forward(ForwardContext<T>& ctx, const TensorT<T>& x) const {
    const Shape s = x.shape();
    if (Mean) detail::require_row_entries(name, s, "average");
    auto C = ctx.output(column_of(s)).flat().col(0);
    if (Mean)
      C = x.flat().rowwise().mean();
    else
      C = x.flat().rowwise().sum();
  }
  static void backward(BackwardContext<T>& ctx, const OpInput<T>& x) {
    const Index width = x.value.cols();
    const auto dC = ctx.grad_output().flat().col(0).array();  // (rows)
    if (Mean)
      x.grad.add((dC / static_cast<T>(width)).replicate(1, width));
    else
      x.grad.add(dC.replicate(1, width));
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

template <class T>
Var<T> row_sum(Var<T> x, Where where) {
  return apply(RowReduce<T, false>{}, {x}, where);
}

template <class T>
Var<T> row_mean(Var<T> x, Where where) {
  return apply(RowReduce<T, true>{}, {x}, where);
}

template <class T>
Var<T> row_max(Var<T> x, Where where) {
  return apply(RowMax<T>{}, {x}, where);
}

template Var<float> row_sum(Var<float>, Where);
template Var<double> row_sum(Var<double>, Where);
template Var<float> row_mean(Var<float>, Where);
template Var<double> row_mean(Var<double>, Where);
template Var<float> row_max(Var<float>, Where);
template Var<double> row_max(Var<double>, Where);

}  // namespace tapegrad
