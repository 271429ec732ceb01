// Losses: cross-entropy fused with log-softmax, mean-squared error.
#include <cmath>
#include <vector>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/parallel.hpp"

namespace tapegrad {
namespace {

// What cross_entropy keeps: the softmax of each labelled row (zeros for ignored rows), each row's max
// and sum of exponentials (scratch), the targets and how many rows are labelled.
template <class T>
struct CrossEntropySaved {
  TensorT<T> probabilities;  // (rows, classes)
  TensorT<T> row_stats;      // (rows, 2): max, sum of exp(x - max)
  std::vector<std::int32_t> targets;
  std::int32_t ignore_label = kIgnoreLabel;
  Index labelled = 0;
  std::size_t heap_bytes() const { return buffer_bytes(probabilities, row_stats, targets); }
};

// Forward was L = mean over labelled rows r of -log softmax(x_r)[t_r], with p_r = softmax(x_r) saved.
// So now dx_r += dL / count * (p_r - onehot(t_r)) for labelled rows; ignored rows get nothing.
template <class T>
void cross_entropy_backward(Tape<T>& t, Node<T>& n) {
  const auto dX = t.input_node(n, 0).grad_whole();
  const auto& saved = n.template saved<CrossEntropySaved<T>>();
  if (!dX || saved.labelled == 0) return;  // no labelled row: a zero gradient (an unwritten one reads as zero)
  const T g = n.grad[0] / static_cast<T>(saved.labelled);
  const auto P = saved.probabilities.flat();
  auto dx = dX.grad->flat();
  parallel_rows(P.rows(), P.cols(), [&](Index first, Index count) {
    for (Index r = first; r < first + count; ++r) {
      const std::int32_t target = saved.targets[static_cast<std::size_t>(r)];
      if (target == saved.ignore_label) {
        if (dX.assign) dx.row(r).setZero();
        continue;
      }
      write_grad(dx.row(r), g * P.row(r), dX.assign);
      dx(r, target) -= g;
    }
  });
}

// Forward was L = mean((a - b)^2) over N elements. So now da += 2 (a - b) dL / N, db -= the same.
template <class T>
void mse_backward(Tape<T>& t, Node<T>& n) {
  Node<T>& na = t.input_node(n, 0);
  Node<T>& nb = t.input_node(n, 1);
  const T g = T(2) * n.grad[0] / static_cast<T>(na.val().numel());
  if (const auto dA = na.grad_whole()) write_grad(dA.grad->array(), g * (na.val().array() - nb.val().array()), dA.assign);
  if (const auto dB = nb.grad_whole()) write_grad(dB.grad->array(), -g * (na.val().array() - nb.val().array()), dB.assign);
}

}  // namespace

template <class T>
Var<T> cross_entropy(Var<T> logits, const Ids& targets, std::int32_t ignore_label, Where where) {
  Tape<T>& t = Tape<T>::of("cross_entropy", {{"logits", logits}});
  const Shape s = t.node(logits).val().shape();
  if (s.rank == 1)
    fail<ShapeError>("cross_entropy: logits are a vector of {}; they must be (rows, classes) or (batch, rows, "
                     "classes)",
                     s);
  if (s.cols == 0) fail<ShapeError>("cross_entropy: logits are {}, with no classes", s);
  const Shape expected = s.rank == 3 ? Shape::mat(s.batch, s.rows) : Shape::vec(s.rows);
  if (targets.shape() != expected && targets.shape() != Shape::vec(s.flat_rows()))
    fail<ShapeError>("cross_entropy: targets are {} but logits are {}; give one target per row: {}",
                     targets.shape(), s, expected);
  Index count = 0;
  for (Index r = 0; r < targets.numel(); ++r) {
    const std::int32_t target = targets[r];
    if (target == ignore_label) continue;
    if (target < 0 || target >= s.cols)
      fail<ValueError>("cross_entropy: target {} at row {} is outside [0, {}) and is not the ignore label {}",
                       target, r, s.cols, ignore_label);
    ++count;
  }

  Node<T>& n = t.record("cross_entropy", {logits}, Shape::scalar(), where);
  const auto X = t.node(logits).val().flat();
  auto& saved = n.template save<CrossEntropySaved<T>>();
  if (n.requires_grad) {
    saved.targets.assign(targets.data(), targets.data() + targets.numel());
    saved.ignore_label = ignore_label;
    saved.labelled = count;
  }
  // -log softmax(x)[t] = log(sum exp(x - max)) + max - x[t], for all rows at once: `row_stats` holds
  // each row's max and sum of exponentials, `probabilities` first the exponentials, then, divided by
  // their row sums, what the backward rule needs. Whole-matrix expressions on contiguous data vectorise
  // across rows (a row of 16 classes alone would not fill the registers evenly).
  saved.probabilities.resize(s);
  saved.row_stats.resize(Shape::mat(X.rows(), 2));
  auto P = saved.probabilities.flat();
  auto top = saved.row_stats.flat().col(0);
  auto sums = saved.row_stats.flat().col(1);
  // In row ranges over the threads when large (core/parallel.hpp: the ranges keep the packets in place).
  parallel_rows(X.rows(), X.cols(), [&](Index first, Index rows) {
    for (Index r = first; r < first + rows; ++r) {  // row by row: a row is one aligned packet
      top(r) = X.row(r).maxCoeff();
      P.row(r).array() = X.row(r).array() - top(r);
    }
    P.middleRows(first, rows).array() = P.middleRows(first, rows).array().exp();  // contiguous, vectorised
    for (Index r = first; r < first + rows; ++r) {
      sums(r) = P.row(r).sum();
      P.row(r) /= sums(r);
    }
  }, 4);
  double total = 0;  // summed in double: a float sum over many rows would lose digits
  for (Index r = 0; r < X.rows(); ++r) {
    const std::int32_t target = targets[r];
    if (target == ignore_label) {
      P.row(r).setZero();
      continue;
    }
    // Not log(P[t]): exp(x[t] - max) underflows to 0 for a confidently wrong row; max - x[t] is exact.
    total += static_cast<double>(std::log(sums(r)) + top(r) - X(r, target));
  }
  n.value[0] = count == 0 ? T(0) : static_cast<T>(total / static_cast<double>(count));
  n.backward = &cross_entropy_backward<T>;
  return t.commit(n);
}

template <class T>
Var<T> mse(Var<T> a, Var<T> b, Where where) {
  Tape<T>& t = Tape<T>::of("mse", {{"a", a}, {"b", b}});
  const Shape sa = t.node(a).val().shape();
  const Shape sb = t.node(b).val().shape();
  if (sa != sb) fail<ShapeError>("mse: a is {} but b is {}; they must have the same shape", sa, sb);
  if (sa.numel() == 0) fail<ShapeError>("mse: a and b are {}, with no elements to average", sa);
  Node<T>& n = t.record("mse", {a, b}, Shape::scalar(), where);
  n.value[0] = (t.node(a).val().array() - t.node(b).val().array()).square().mean();
  n.backward = &mse_backward<T>;
  return t.commit(n);
}

#define TAPEGRAD_INSTANTIATE(T)                                                 \
  template Var<T> cross_entropy(Var<T>, const Ids&, std::int32_t, Where);      \
  template Var<T> mse(Var<T>, Var<T>, Where);
TAPEGRAD_INSTANTIATE(float)
TAPEGRAD_INSTANTIATE(double)
#undef TAPEGRAD_INSTANTIATE  // each file its own: the library is built several files to a unit

}  // namespace tapegrad
