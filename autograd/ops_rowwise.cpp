// Reductions over the last axis that keep it with width 1: row_sum, row_mean, row_max.
// x (N, D) -> (N, 1), x (B, T, D) -> (B, T, 1); the result broadcasts back as a column in add, sub,
// mul and div.
#include <cmath>
#include <vector>

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

struct RowMaxSaved {
  std::vector<Index> argmax;  // per flat row, the column whose value the forward returned
  std::size_t heap_bytes() const { return buffer_bytes(argmax); }
};

// x's shape with the last axis reduced to width 1.
Shape column_of(Shape s) {
  s.cols = 1;
  return s;
}

// sum: C = sum_j X_j, dX_j += dC;  mean: C = sum_j X_j / D, dX_j += dC / D (every column of the row).
// `Mean` says which.
template <class T, bool Mean>
void row_reduce_backward(Tape<T>& t, Node<T>& n) {
  Node<T>& in = t.input_node(n, 0);
  if (const auto dX = in.grad_whole()) {
    const Index width = in.val().cols();
    const auto dC = n.grad.flat().col(0).array();  // (rows)
    if (Mean)
      write_grad(dX.grad->flat().array(), (dC / static_cast<T>(width)).replicate(1, width), dX.assign);
    else
      write_grad(dX.grad->flat().array(), dC.replicate(1, width), dX.assign);
  }
}

template <class T, bool Mean>
Var<T> row_reduce(const char* op, Var<T> x, Where where) {
  Tape<T>& t = Tape<T>::of(op, {{"x", x}});
  const Shape s = t.node(x).val().shape();
  if (Mean && s.cols == 0 && s.flat_rows() > 0)
    fail<ShapeError>("{}: x is {}; its rows have no entries to average", op, s);
  Node<T>& n = t.record(op, {x}, column_of(s), where);
  const auto X = t.node(x).val().flat();
  if (Mean)
    n.value.flat().col(0) = X.rowwise().mean();
  else
    n.value.flat().col(0) = X.rowwise().sum();
  n.backward = &row_reduce_backward<T, Mean>;
  return t.commit(n);
}

}  // namespace

template <class T>
Var<T> row_sum(Var<T> x, Where where) {
  return row_reduce<T, false>("row_sum", x, where);
}

template <class T>
Var<T> row_mean(Var<T> x, Where where) {
  return row_reduce<T, true>("row_mean", x, where);
}

// C = max_j X_j per row;  dX_k += dC for k the first maximal column (a NaN, if the row holds one), 0 elsewhere
template <class T>
Var<T> row_max(Var<T> x, Where where) {
  Tape<T>& t = Tape<T>::of("row_max", {{"x", x}});
  const Shape s = t.node(x).val().shape();
  if (s.cols == 0 && s.flat_rows() > 0)
    fail<ShapeError>("row_max: x is {}; its rows have no entries to take a maximum of", s);
  Node<T>& n = t.record("row_max", {x}, column_of(s), where);
  const auto X = t.node(x).val().flat();
  auto C = n.value.flat();
  std::vector<Index>* argmax = nullptr;
  if (n.requires_grad) {
    argmax = &n.template save<RowMaxSaved>().argmax;
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
  n.backward = [](Tape<T>& tp, Node<T>& node) {
    TensorT<T>* dX = tp.input_node(node, 0).grad_sink();  // one entry per row: the rest stay zero
    if (!dX) return;
    const auto& at = node.template saved<RowMaxSaved>().argmax;
    const auto dC = node.grad.flat();
    auto dx = dX->flat();
    for (Index r = 0; r < dC.rows(); ++r) dx(r, at[static_cast<std::size_t>(r)]) += dC(r, 0);
  };
  return t.commit(n);
}

#define TAPEGRAD_INSTANTIATE(T)                    \
  template Var<T> row_sum(Var<T>, Where);          \
  template Var<T> row_mean(Var<T>, Where);         \
  template Var<T> row_max(Var<T>, Where);
TAPEGRAD_INSTANTIATE(float)
TAPEGRAD_INSTANTIATE(double)
#undef TAPEGRAD_INSTANTIATE  // each file its own: the library is built several files to a unit

}  // namespace tapegrad
