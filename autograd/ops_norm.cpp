// Inverted dropout and fused layer normalisation over the last axis.
#include <cmath>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/kernels.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

// The calling thread's row of doubles for one row of x (grow-only scratch).
inline Eigen::Map<Eigen::ArrayXd> double_row(Index cols) {
  return {detail::thread_scratch<double>(detail::Scratch::norm_row, static_cast<std::size_t>(cols)), cols};
}

// C = X * F, F = [u >= p] / (1 - p) per element (u: the next rng.uniform());  dX += dC * F
template <class T>
struct Dropout {
  static constexpr const char* name = "dropout";
  static constexpr const char* inputs[] = {"x"};
  // What dropout keeps: per element, the factor the forward multiplied by (0 where dropped, 1 / (1 - p)
  // where kept). A node's tensor, so it is resized in place step after step, never reallocated.
  struct Saved {
    TensorT<T> factor;  // x's shape
    std::size_t heap_bytes() const { return buffer_bytes(factor); }
  };
  double p = 0;
  Rng* rng = nullptr;

  void forward(Output<T, Saved>& out, const TensorT<T>& x) const {
    TensorT<T>& C = out.make(x.shape(), false);
    const T keep_scale = static_cast<T>(1 / (1 - p));
    TensorT<T>* const factor = out.needs_grad() ? &out.saved().factor : nullptr;
    if (factor) factor->resize(x.shape());
    // One uniform per element in row-major order, drawn whether or not gradients are on, so that the
    // stream (and every later mask drawn from it) does not depend on the mode.
    for (Index i = 0; i < x.numel(); ++i) {
      const T f = rng->uniform() < p ? T(0) : keep_scale;
      C[i] = x[i] * f;
      if (factor) (*factor)[i] = f;
    }
  }
  static void backward(const Output<T, Saved>& out, const OpInput<T>& x) {
    x.grad.add(out.grad().array() * out.saved().factor.array());
  }
};

// Per row of x (width D): mean m, biased variance v, rstd = 1 / sqrt(v + eps), xhat = (x - m) rstd,
// y = xhat * gamma + beta. Backward, per row (dxhat = dy * gamma):
//   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat * xhat)),  dgamma += sum over rows dy * xhat,
//   dbeta += sum over rows dy.
// The forward statistics are computed in double whatever T is (a float row's sum of squares loses digits
// when the mean is large next to the spread); the backward works in T.
template <class T>
struct LayerNorm {
  static constexpr const char* name = "layer_norm";
  static constexpr const char* inputs[] = {"x", "gamma", "beta"};
  // What layer_norm keeps: each row's mean and 1 / sqrt(var + eps), in the double they were computed in.
  // Not the normalised input: backward recomputes it from x (which the tape keeps anyway, as x's node's
  // value) with the forward's own arithmetic, so it has the same bits, and the op's saved state is two
  // numbers a row instead of a copy of x (as PyTorch's native_layer_norm keeps mean and rstd).
  struct Saved {
    TensorT<double> stats;  // (rows, 2): mean, rstd per flat row of x
    std::size_t heap_bytes() const { return buffer_bytes(stats); }
  };
  double eps = 1e-5;

  void forward(Output<T, Saved>& out, const TensorT<T>& x, const TensorT<T>& gamma, const TensorT<T>& beta) const {
    const Shape s = x.shape();
    const Shape sg = gamma.shape(), sb = beta.shape();
    detail::require_row_entries(name, s, "normalise");
    if (!detail::is_row_of(sg, s.cols) || !detail::is_row_of(sb, s.cols))
      fail<ShapeError>(
          "layer_norm: gamma is {} and beta is {} but x is {}; both must be rows of {} values ({} or 1x{})", sg, sb, s,
          s.cols, s.cols, s.cols);
    if (!(eps > 0) || !std::isfinite(eps)) fail<ValueError>("layer_norm: eps must be positive and finite, got {}", eps);
    // Per row of x: mean and rstd with the statistics in double (saved in stats), y = xhat * gamma + beta.
    auto Y = out.make(s, false).flat();
    TensorT<double>& stats = out.saved().stats;
    stats.resize(Shape::mat(s.flat_rows(), 2));
    const auto X = x.flat();                     // (rows, D)
    const auto G = gamma.flat().row(0).array();  // (D)
    const auto Bt = beta.flat().row(0).array();  // (D)
    parallel_rows(
        X.rows(), X.cols(),
        [&](Index first, Index rows) {  // row by row: split in row ranges when large
          // The row in double, converted once: read through a lazy cast, each of the three passes would convert
          // it again, element by element, at several times the cost for the same values.
          auto xr = double_row(X.cols());
          for (Index r = first; r < first + rows; ++r) {
            xr = X.row(r).transpose().array().template cast<double>();
            const double mean = xr.mean();
            xr -= mean;
            const double rstd = 1 / std::sqrt(xr.square().mean() + eps);
            stats[2 * r] = mean;
            stats[2 * r + 1] = rstd;
            Y.row(r).array() = (xr * rstd).transpose().template cast<T>();  // xhat (as backward forms it), then y
            Y.row(r).array() = Y.row(r).array() * G + Bt;
          }
        },
        4);
  }

  static void backward(const Output<T, Saved>& out, const OpInput<T>& x, const OpInput<T>& gamma,
                       const OpInput<T>& beta) {
    const auto& stats = out.saved().stats;
    const auto dY = out.grad().flat();  // (rows, D)
    const auto X = x.value.flat();
    const Index rows = dY.rows(), cols = dY.cols();
    const GradWrite<T> dX = detail::pieces(x.grad), dGamma = detail::pieces(gamma.grad),
                       dBeta = detail::pieces(beta.grad);
    // One pass over the rows recomputes xhat (into the calling thread's scratch: one buffer for every
    // layer_norm's backward, not a copy per node) and forms dx from it; one pass over the columns sums
    // dgamma and dbeta: two parallel regions, not three or four.
    const bool need_xhat = dX || dGamma;
    MatrixMap<T> XHat(
        need_xhat ? detail::thread_scratch<T>(detail::Scratch::norm_xhat, static_cast<std::size_t>(X.size())) : nullptr,
        rows, cols);
    if (need_xhat) {
      const auto Gam = gamma.value.flat().row(0).array();
      parallel_rows(
          rows, cols,
          [&](Index first, Index count) {
            auto xr = double_row(cols);
            for (Index r = first; r < first + count; ++r) {
              // xhat in the forward's arithmetic, so that it has the forward's bits (the suite's golden values
              // and bit-identity tests would see a difference).
              xr = X.row(r).transpose().array().template cast<double>();
              xr -= stats[2 * r];
              XHat.row(r).array() = (xr * stats[2 * r + 1]).transpose().template cast<T>();
              if (!dX) continue;
              const auto dxhat = dY.row(r).array() * Gam;
              const T mean_dxhat = dxhat.mean();
              const T mean_dxhat_xhat = (dxhat * XHat.row(r).array()).mean();
              const T rstd = static_cast<T>(stats[2 * r + 1]);
              dX.add(dX.tensor->flat().row(r).array(),
                     rstd * (dxhat - mean_dxhat - XHat.row(r).array() * mean_dxhat_xhat));
            }
          },
          dX ? 5 : 2);
    }
    if (!dGamma && !dBeta) return;
    // Both sums in one pass over the columns, each column summed as write_column_sums sums it (same bits).
    detail::for_column_ranges(rows, cols, 2, [&](Index first, Index last) {
      if (dGamma) detail::write_column_sums_of(dGamma, dY.array() * XHat.array(), first, last);
      if (dBeta) detail::write_column_sums_of(dBeta, dY.array(), first, last);
    });
  }
};

}  // namespace

template <class T>
Var<T> dropout(Var<T> x, double p, Rng& rng, Where where) {
  Tape<T>::of("dropout", {{"x", x}});
  if (!(p >= 0 && p < 1)) fail<ValueError>("dropout: the drop probability p must be in [0, 1), got {}", p);
  if (p == 0) return x;  // nothing dropped, nothing scaled, nothing drawn: x itself, no new node
  return apply(Dropout<T>{.p = p, .rng = &rng}, {x}, where);
}

template <class T>
Var<T> layer_norm(Var<T> x, Var<T> gamma, Var<T> beta, double eps, Where where) {
  return apply(LayerNorm<T>{.eps = eps}, {x, gamma, beta}, where);
}

template Var<float> dropout(Var<float>, double, Rng&, Where);
template Var<double> dropout(Var<double>, double, Rng&, Where);
template Var<float> layer_norm(Var<float>, Var<float>, Var<float>, double, Where);
template Var<double> layer_norm(Var<double>, Var<double>, Var<double>, double, Where);

}  // namespace tapegrad
