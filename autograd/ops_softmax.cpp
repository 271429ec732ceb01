// Row-wise softmax (with an optional mask) and log-softmax.
#include <cmath>
#include <limits>

#include "autograd/ops.hpp"

namespace tapegrad {
namespace {

// Which mask row applies to flat row r of x, or a ShapeError if the mask fits x in neither way.
struct MaskRows {
  const Mask* mask = nullptr;
  bool shared = false;  // (rows, cols) shared over the batch, rather than x's full shape
  const std::uint8_t* row(Index r, Index rows, Index cols) const {
    if (!mask) return nullptr;
    return mask->data() + (shared ? r % rows : r) * cols;
  }
};

MaskRows mask_rows(const Mask* mask, const Shape& x) {
  if (!mask) return {};
  const Shape& m = mask->shape();
  if (m == x) return {mask, false};
  if (m.rank == 2 && m.rows == x.rows && m.cols == x.cols) return {mask, true};
  fail<ShapeError>("softmax_rows: the mask is {} but x is {}; the mask must be {}x{} (shared by the batch) or {}",
                   m, x, x.rows, x.cols, x);
}

// Forward was y = softmax(x) along each row. So now dx = y * (dy - sum(dy * y)), row by row. Blocked
// entries have y = 0 and so get no gradient; a fully blocked row (y = 0) gets none at all.
template <class T>
void softmax_backward(Tape<T>& t, Node<T>& n) {
  TensorT<T>* dX = t.input(n, 0).grad_sink();
  if (!dX) return;
  const auto Y = n.value.flat();
  const auto dY = n.grad.flat();
  auto dx = dX->flat();
  for (Index r = 0; r < Y.rows(); ++r) {
    const T dot = Y.row(r).dot(dY.row(r));
    dx.row(r).array() += Y.row(r).array() * (dY.row(r).array() - dot);
  }
}

// Forward was y = x - log(sum(exp(x))) along each row. So now dx = dy - exp(y) sum(dy).
template <class T>
void log_softmax_backward(Tape<T>& t, Node<T>& n) {
  TensorT<T>* dX = t.input(n, 0).grad_sink();
  if (!dX) return;
  const auto Y = n.value.flat();
  const auto dY = n.grad.flat();
  auto dx = dX->flat();
  for (Index r = 0; r < Y.rows(); ++r) {
    const T total = dY.row(r).sum();
    dx.row(r).array() += dY.row(r).array() - Y.row(r).array().exp() * total;
  }
}

}  // namespace

template <class T>
Var<T> softmax_rows(Var<T> x, const Mask* mask, Where where) {
  Tape<T>& t = Tape<T>::of("softmax_rows", {{"x", x}});
  const Shape s = t.node(x).val().shape();
  const MaskRows masks = mask_rows(mask, s);
  Node<T>& n = t.record("softmax_rows", {x}, s, where);
  const auto X = t.node(x).val().flat();
  auto Y = n.value.flat();
  for (Index r = 0; r < X.rows(); ++r) {
    const std::uint8_t* blocked = masks.row(r, s.rows, s.cols);
    // Subtract the largest unblocked entry so exp never overflows.
    T top = -std::numeric_limits<T>::infinity();
    for (Index c = 0; c < s.cols; ++c)
      if (!blocked || !blocked[c]) top = std::max(top, X(r, c));
    if (top == -std::numeric_limits<T>::infinity() && blocked) {  // every entry blocked
      Y.row(r).setZero();
      continue;
    }
    T total = 0;
    for (Index c = 0; c < s.cols; ++c) {
      const T e = (blocked && blocked[c]) ? T(0) : std::exp(X(r, c) - top);
      Y(r, c) = e;
      total += e;
    }
    Y.row(r) /= total;
  }
  n.backward = &softmax_backward<T>;
  return t.commit(n);
}

template <class T>
Var<T> log_softmax_rows(Var<T> x, Where where) {
  Tape<T>& t = Tape<T>::of("log_softmax_rows", {{"x", x}});
  const Shape s = t.node(x).val().shape();
  if (s.cols == 0 && s.numel() == 0 && s.flat_rows() > 0)
    fail<ShapeError>("log_softmax_rows: x is {}; its rows have no entries to normalise", s);
  Node<T>& n = t.record("log_softmax_rows", {x}, s, where);
  const auto X = t.node(x).val().flat();
  auto Y = n.value.flat();
  for (Index r = 0; r < X.rows(); ++r) {
    const T top = X.row(r).maxCoeff();
    const T log_total = std::log((X.row(r).array() - top).exp().sum());
    Y.row(r).array() = X.row(r).array() - top - log_total;
  }
  n.backward = &log_softmax_backward<T>;
  return t.commit(n);
}

#define TAPEGRAD_INSTANTIATE(T)                                    \
  template Var<T> softmax_rows(Var<T>, const Mask*, Where);       \
  template Var<T> log_softmax_rows(Var<T>, Where);
TAPEGRAD_INSTANTIATE(float)
TAPEGRAD_INSTANTIATE(double)

}  // namespace tapegrad
