// Row-wise softmax (with an optional mask) and log-softmax.
#include <cmath>
#include <limits>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/parallel.hpp"

namespace tapegrad {
namespace {

// Rows shorter than this are processed as whole-matrix expressions, vectorised across row boundaries
// (a row of 8 floats fills no AVX-512 register, so row by row it would run scalar); longer rows one
// at a time, each vectorised. (Measured with build/bench/step_bench: W1 has rows of 8, W3 of 128.)
constexpr Index kShortRow = 32;

// A softmax element (an exp, a max, a sum, a division) costs several elementwise passes' worth of one
// element: the weight of its work against the measured crossover (core/parallel.hpp).
constexpr double kExpCost = 4;

// What softmax_rows keeps: its scale, and scratch for the backward rule's per-row dot products.
template <class T>
struct SoftmaxSaved {
  double scale = 1;
  TensorT<T> row_dots;
};

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

// Forward was y = softmax(s x) along each row. So now dx = s y * (dy - sum(dy * y)), row by row.
// Blocked entries have y = 0 and so get no gradient; a fully blocked row (y = 0) gets none at all.
template <class T>
void softmax_backward(Tape<T>& t, Node<T>& n) {
  const auto dX = t.input(n, 0).grad_whole();
  if (!dX) return;
  const auto Y = n.value.flat();
  const auto dY = n.grad.flat();
  auto dx = dX.grad->flat();
  auto& saved = n.template saved<SoftmaxSaved<T>>();
  const T s = static_cast<T>(saved.scale);
  if (Y.cols() < kShortRow) {  // short rows: whole-matrix expressions (see softmax_rows)
    saved.row_dots.resize(Shape::mat(Y.rows(), 1));
    auto dot = saved.row_dots.flat().col(0);
    dot = (Y.array() * dY.array()).rowwise().sum().matrix();
    write_grad(dx.array(), s * Y.array() * (dY.colwise() - dot).array(), dX.assign);
    return;
  }
  parallel_for(Y.rows(), split_elements(3.0 * static_cast<double>(Y.size())), [&](Index first, Index last) {
    for (Index r = first; r < last; ++r) {
      const T dot = Y.row(r).dot(dY.row(r));
      write_grad(dx.row(r).array(), s * Y.row(r).array() * (dY.row(r).array() - dot), dX.assign);
    }
  });
}

// Forward was y = x - log(sum(exp(x))) along each row. So now dx = dy - exp(y) sum(dy).
template <class T>
void log_softmax_backward(Tape<T>& t, Node<T>& n) {
  const auto dX = t.input(n, 0).grad_whole();
  if (!dX) return;
  const auto Y = n.value.flat();
  const auto dY = n.grad.flat();
  auto dx = dX.grad->flat();
  for (Index r = 0; r < Y.rows(); ++r) {
    const T total = dY.row(r).sum();
    write_grad(dx.row(r).array(), dY.row(r).array() - Y.row(r).array().exp() * total, dX.assign);
  }
}

}  // namespace

template <class T>
Var<T> softmax_rows(Var<T> x, const Mask* mask, double scale, Where where) {
  Tape<T>& t = Tape<T>::of("softmax_rows", {{"x", x}});
  const Shape s = t.node(x).val().shape();
  const MaskRows masks = mask_rows(mask, s);
  if (!(scale > 0) || !std::isfinite(scale))
    fail<ValueError>("softmax_rows: the scale must be positive and finite, got {}", scale);
  Node<T>& n = t.record("softmax_rows", {x}, s, where);
  n.template saved<SoftmaxSaved<T>>().scale = scale;
  const T k = static_cast<T>(scale);
  const auto X = t.node(x).val().flat();
  auto Y = n.value.flat();
  if (!mask && s.cols < kShortRow) {
    // Short rows: subtract each row's maximum (so exp never overflows) row by row, take exp of the whole
    // matrix at once, then divide each row by its sum.
    // The row maximum of s x is s times the row maximum of x: scale > 0.
    for (Index r = 0; r < X.rows(); ++r) Y.row(r).array() = k * X.row(r).array() - k * X.row(r).maxCoeff();
    Y.array() = Y.array().exp();  // one contiguous array: vectorised across rows
    for (Index r = 0; r < X.rows(); ++r) Y.row(r) /= Y.row(r).sum();
  } else if (!mask) {
    parallel_for(X.rows(), split_elements(kExpCost * static_cast<double>(s.numel())), [&](Index first, Index last) {
      for (Index r = first; r < last; ++r) {
        Y.row(r).array() = (k * X.row(r).array() - k * X.row(r).maxCoeff()).exp();
        Y.row(r) /= Y.row(r).sum();
      }
    });
  } else {
    parallel_for(X.rows(), split_elements(kExpCost * static_cast<double>(s.numel())), [&](Index first, Index last) {
    for (Index r = first; r < last; ++r) {
      const std::uint8_t* blocked = masks.row(r, s.rows, s.cols);
      // The largest open score, NaN if any open score is NaN (std::max would skip it), so that NaN
      // reaches the output instead of passing for a fully blocked row.
      T top = -std::numeric_limits<T>::infinity();
      bool open = false;
      for (Index c = 0; c < s.cols; ++c)
        if (!blocked[c]) {
          open = true;
          const T v = k * X(r, c);
          if (std::isnan(v) || v > top) top = v;  // once NaN, it stays: nothing compares greater than NaN
        }
      if (!open) {  // every entry blocked
        Y.row(r).setZero();
        continue;
      }
      T total = 0;
      for (Index c = 0; c < s.cols; ++c) {
        const T e = blocked[c] ? T(0) : std::exp(k * X(r, c) - top);
        Y(r, c) = e;
        total += e;
      }
      Y.row(r) /= total;
      if (!std::isfinite(total))  // a NaN or Inf score: the open entries are NaN, the blocked ones stay 0
        for (Index c = 0; c < s.cols; ++c)
          if (blocked[c]) Y(r, c) = T(0);
    }
    });
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
  template Var<T> softmax_rows(Var<T>, const Mask*, double, Where);       \
  template Var<T> log_softmax_rows(Var<T>, Where);
TAPEGRAD_INSTANTIATE(float)
TAPEGRAD_INSTANTIATE(double)

}  // namespace tapegrad
