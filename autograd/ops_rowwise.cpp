// Ops along rows: reductions, sum and mean over every element, to one, and row_sum, row_mean and row_max
// over the last axis, keeping it with width 1: x (N, D) -> (N, 1), x (B, T, D) -> (B, T, 1) (the result
// broadcasts back as a column in add, sub, mul and div); row-wise softmax (with an optional mask) and
// log-softmax.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/kernels.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace detail {
namespace {

// Rows shorter than this are processed as whole-matrix expressions, vectorised across row boundaries
// (a row of 8 floats fills no AVX-512 register, so row by row it would run scalar); longer rows one
// at a time, each vectorised.
constexpr Index kShortRow = 32;

// A softmax element (an exp, a max, a sum, a division) costs several elementwise passes' worth of one
// element: the weight of its work against the measured crossover (core/parallel.hpp).
constexpr double kExpCost = 4;

// Where a masked row's exponentials end: at `reach`, rounded up to a whole 64-byte line when the row
// starts on one. Eigen's vectorised exp and its scalar exp differ in the last bit, and Eigen takes the
// elements from the first line boundary on in whole packets, the rest one by one: ending on a line
// boundary, every exponential taken is the one a pass over the whole row takes, packets on the same
// elements, so skipping the blocked tail changes no bit.
template <class T>
Index exp_end(const T* y, Index cols, Index reach) {
  constexpr Index line = 64 / sizeof(T);
  if (reinterpret_cast<std::uintptr_t>(y) % 64 != 0) return cols;
  return std::min(cols, (reach + line - 1) / line * line);
}

// One row with a mask. The exponentials are taken over the open part of the row at once, where Eigen
// vectorises them, and the blocked entries among them set to 0 after (their exponentials, of any value,
// are discarded); past the last open entry none is taken.
template <class T>
void masked_row(const T* x, T* y, Index cols, T k, const std::uint8_t* blocked, MaskRow open) {
  ArrayMap<T> Y(y, cols);
  if (open.reach == 0) {  // every entry blocked
    Y.setZero();
    return;
  }
  // The largest open score, NaN if any open score is NaN (std::max would skip it), so that NaN reaches
  // the output instead of passing for a fully blocked row.
  T top = -std::numeric_limits<T>::infinity();
  if (open.prefix) {
    top = (k * ConstArrayMap<T>(x, open.reach)).template maxCoeff<Eigen::PropagateNaN>();
  } else {
    for (Index c = 0; c < open.reach; ++c)
      if (!blocked[c]) {
        const T v = k * x[c];
        if (std::isnan(v) || v > top) top = v;  // once NaN, it stays: nothing compares greater than NaN
      }
  }
  const Index end = exp_end(y, cols, open.reach);
  Y.head(end) = (k * ConstArrayMap<T>(x, end) - top).exp();
  Y.tail(cols - end).setZero();
  if (open.prefix)
    Y.segment(open.reach, end - open.reach).setZero();
  else
    for (Index c = 0; c < end; ++c)
      if (blocked[c]) y[c] = T(0);
  const T total = Y.sum();  // over the whole row, zeros included: the same sum whatever `end` was
  Y.head(open.reach) /= total;
  if (!std::isfinite(total))  // a NaN or Inf score: the open entries are NaN, the blocked ones stay 0
    for (Index c = 0; c < open.reach; ++c)
      if (blocked[c]) y[c] = T(0);
}

}  // namespace

const MaskRow* read_mask_rows(const Mask& mask) {
  const Index rows = mask.shape().flat_rows(), cols = mask.cols();
  MaskRow* out = thread_scratch<MaskRow>(Scratch::mask_rows, static_cast<std::size_t>(std::max<Index>(rows, 1)));
  for (Index r = 0; r < rows; ++r) {
    const std::uint8_t* row = mask.data() + r * cols;
    Index reach = cols;
    while (reach > 0 && row[reach - 1]) --reach;
    const Index open = static_cast<Index>(std::count(row, row + reach, std::uint8_t{0}));
    out[r] = {reach, open == reach};
  }
  return out;
}

template <class T>
void softmax_forward(const T* x, T* y, Index rows, Index cols, T k, RowMask mask, bool may_split) {
  if (rows == 0 || cols == 0) return;
  const ConstMatrixMap<T> X(x, rows, cols);
  MatrixMap<T> Y(y, rows, cols);
  const int threads = may_split ? threads_for_elements(kExpCost * static_cast<double>(rows * cols)) : 1;
  if (!mask.blocked && cols < kShortRow) {
    // Short rows: subtract each row's maximum (so exp never overflows) row by row, take exp of the whole
    // matrix at once, then divide each row by its sum.
    // The row maximum of s x is s times the row maximum of x: scale > 0.
    for (Index r = 0; r < rows; ++r) Y.row(r).array() = k * X.row(r).array() - k * X.row(r).maxCoeff();
    Y.array() = Y.array().exp();  // one contiguous array: vectorised across rows
    for (Index r = 0; r < rows; ++r) Y.row(r) /= Y.row(r).sum();
  } else if (!mask.blocked) {
    parallel_for(rows, threads, [&](Index first, Index last) {
      for (Index r = first; r < last; ++r) {
        Y.row(r).array() = (k * X.row(r).array() - k * X.row(r).maxCoeff()).exp();
        Y.row(r) /= Y.row(r).sum();
      }
    });
  } else {
    parallel_for(rows, threads, [&](Index first, Index last) {
      for (Index r = first; r < last; ++r) {
        const Index m = r % mask.period;
        masked_row(x + r * cols, y + r * cols, cols, k, mask.blocked + m * cols, mask.rows[m]);
      }
    });
  }
}

template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, Index rows, Index cols, T s, bool assign, bool may_split) {
  if (rows == 0 || cols == 0) return;
  const ConstMatrixMap<T> Y(y, rows, cols), dY(dy, rows, cols);
  MatrixMap<T> dX(dx, rows, cols);
  if (cols < kShortRow) {  // short rows: whole-matrix expressions (see softmax_forward)
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> dot(
        thread_scratch<T>(Scratch::softmax_row_dots, static_cast<std::size_t>(rows)), rows);
    dot = (Y.array() * dY.array()).rowwise().sum().matrix();
    write_grad(dX.array(), s * Y.array() * (dY.colwise() - dot).array(), assign);
    return;
  }
  parallel_for(rows, may_split ? threads_for_elements(3.0 * static_cast<double>(rows * cols)) : 1,
               [&](Index first, Index last) {
                 for (Index r = first; r < last; ++r) {
                   const T dot = Y.row(r).dot(dY.row(r));
                   write_grad(dX.row(r).array(), s * Y.row(r).array() * (dY.row(r).array() - dot), assign);
                 }
               });
}

template void softmax_forward(const float*, float*, Index, Index, float, RowMask, bool);
template void softmax_forward(const double*, double*, Index, Index, double, RowMask, bool);
template void softmax_backward(const float*, const float*, float*, Index, Index, float, bool, bool);
template void softmax_backward(const double*, const double*, double*, Index, Index, double, bool, bool);

}  // namespace detail

namespace {

// sum: C = sum_j X_j, dX_j += dC;  mean: C = sum_j X_j / D, dX_j += dC / D, over every element j of x (sum,
// mean: D = all of them) or of each row (row_sum, row_mean: D = x's width, C a column). `Mean`, `Rows` say which.
template <class T, bool Mean, bool Rows>
struct Reduce {
  static constexpr const char* name = Rows ? (Mean ? "row_mean" : "row_sum") : (Mean ? "mean" : "sum");
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<T>& out, const TensorT<T>& x) const {
    const Shape s = x.shape();
    if constexpr (Rows) {
      if (Mean) detail::require_row_entries(name, s, "average");
      auto C = out.make({s.rank, s.batch, s.rows, 1}, false).flat().col(0);
      if (Mean)
        C = x.flat().rowwise().mean();
      else
        C = x.flat().rowwise().sum();
    } else {
      if (Mean && x.numel() == 0) fail<ShapeError>("{}: x is {}, which has no elements to average", name, s);
      out.make(Shape::scalar(), false)[0] = Mean ? x.array().mean() : x.array().sum();
    }
  }
  static void backward(const Output<T>& out, const OpInput<T>& x) {
    const Index n = Rows ? x.value.cols() : x.value.numel();  // the elements each value of dC summed
    const auto dC = out.grad().flat().col(0).array();         // one value per row (sum, mean: one)
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

  void forward(Output<T, Saved>& out, const TensorT<T>& x) const {
    const Shape s = x.shape();
    detail::require_row_entries(name, s, "take a maximum of");
    auto C = out.make({s.rank, s.batch, s.rows, 1}, false).flat();  // x's shape, 1 wide
    const auto X = x.flat();
    std::vector<Index>* const argmax = out.needs_grad() ? &out.saved().argmax : nullptr;
    if (argmax) argmax->resize(static_cast<std::size_t>(X.rows()));
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
  static void backward(const Output<T, Saved>& out, const OpInput<T>& x) {
    TensorT<T>* dX = detail::pieces(x.grad).zeroed();  // one entry per row: the rest stay zero
    if (!dX) return;
    const auto& at = out.saved().argmax;
    const auto dC = out.grad().flat();
    auto dx = dX->flat();
    for (Index r = 0; r < dC.rows(); ++r) dx(r, at[static_cast<std::size_t>(r)]) += dC(r, 0);
  }
};

// The mask as the softmax reads it (see detail::RowMask): its first row, the rows after which it repeats
// (x's rows for a mask shared over the batch, all of x's rows for a mask of x's full shape) and what each
// row leaves open, read into the calling thread's scratch; or a ShapeError if the mask fits x in
// neither way.
detail::RowMask row_mask(const Mask* mask, const Shape& x) {
  if (!mask) return {};
  const Shape& m = mask->shape();
  if (m != x && (m.rank != 2 || m.rows != x.rows || m.cols != x.cols))
    fail<ShapeError>("softmax_rows: the mask is {} but x is {}; the mask must be {}x{} (shared by the batch) or {}", m,
                     x, x.rows, x.cols, x);
  return {mask->data(), detail::read_mask_rows(*mask), std::max<Index>(m == x ? x.flat_rows() : x.rows, 1)};
}

// y = softmax(s x) along each row, blocked entries 0 (see ops.hpp). Backward, row by row:
// dx = s y * (dy - sum(dy * y)); blocked entries have y = 0 and so get no gradient, and a fully blocked
// row (y = 0) gets none at all.
template <class T>
struct SoftmaxRows {
  static constexpr const char* name = "softmax_rows";
  static constexpr const char* inputs[] = {"x"};
  struct Saved {
    double scale = 1;
  };
  const Mask* mask = nullptr;
  double scale = 1;

  void forward(Output<T, Saved>& out, const TensorT<T>& x) const {
    const Shape s = x.shape();
    const detail::RowMask masks = row_mask(mask, s);
    if (!(scale > 0) || !std::isfinite(scale))
      fail<ValueError>("softmax_rows: the scale must be positive and finite, got {}", scale);
    TensorT<T>& y = out.make(s, false);
    out.saved().scale = scale;
    detail::softmax_forward(x.data(), y.data(), s.flat_rows(), s.cols, static_cast<T>(scale), masks, true);
  }
  static void backward(const Output<T, Saved>& out, const OpInput<T>& x) {
    const GradWrite<T> dX = detail::pieces(x.grad);
    if (!dX) return;
    const Shape& s = out.value().shape();
    detail::softmax_backward(out.value().data(), out.grad().data(), dX.tensor->data(), s.flat_rows(), s.cols,
                             static_cast<T>(out.saved().scale), !dX.accumulate, true);
  }
};

// y = x - log(sum(exp(x))) along each row. Backward: dx = dy - exp(y) sum(dy).
template <class T>
struct LogSoftmaxRows {
  static constexpr const char* name = "log_softmax_rows";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<T>& out, const TensorT<T>& x) const {
    const Shape s = x.shape();
    detail::require_row_entries(name, s, "normalise");
    const auto X = x.flat();
    auto Y = out.make(s, false).flat();
    for (Index r = 0; r < X.rows(); ++r) {
      const T top = X.row(r).maxCoeff();
      const T log_total = std::log((X.row(r).array() - top).exp().sum());
      Y.row(r).array() = X.row(r).array() - top - log_total;
    }
  }
  static void backward(const Output<T>& out, const OpInput<T>& x) {
    const GradWrite<T> dX = detail::pieces(x.grad);
    if (!dX) return;
    const auto Y = out.value().flat();
    const auto dY = out.grad().flat();
    auto dx = dX.tensor->flat();
    for (Index r = 0; r < Y.rows(); ++r) {
      const T total = dY.row(r).sum();
      dX.add(dx.row(r).array(), dY.row(r).array() - Y.row(r).array().exp() * total);
    }
  }
};

}  // namespace

template <class T>
Var<T> softmax_rows(Var<T> x, const Mask* mask, double scale, Where where) {
  return apply(SoftmaxRows<T>{.mask = mask, .scale = scale}, {x}, where);
}

template Var<float> softmax_rows(Var<float>, const Mask*, double, Where);
template Var<double> softmax_rows(Var<double>, const Mask*, double, Where);

// The rest (TAPEGRAD_ONE_INPUT: autograd/kernels.hpp).
TAPEGRAD_ONE_INPUT(log_softmax_rows, LogSoftmaxRows<T>)
TAPEGRAD_ONE_INPUT(sum, Reduce<T, false, false>)
TAPEGRAD_ONE_INPUT(mean, Reduce<T, true, false>)
TAPEGRAD_ONE_INPUT(row_sum, Reduce<T, false, true>)
TAPEGRAD_ONE_INPUT(row_mean, Reduce<T, true, true>)
TAPEGRAD_ONE_INPUT(row_max, RowMax<T>)

}  // namespace tapegrad
