// Inverted dropout and fused layer normalisation over the last axis.
#include <cmath>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/autograd/scratch.hpp"
#include "tapegrad/core/parallel.hpp"

namespace tapegrad {
namespace {

// What dropout keeps: per element, the factor the forward multiplied by (0 where dropped, 1 / (1 - p)
// where kept). A node's tensor, so it is resized in place step after step, never reallocated.
template <class T>
struct DropoutSaved {
  TensorT<T> factor;  // x's shape
  std::size_t heap_bytes() const { return buffer_bytes(factor); }
};

// What layer_norm keeps: the normalised input and each row's 1 / sqrt(var + eps).
template <class T>
struct LayerNormSaved {
  TensorT<T> xhat;  // x's shape: (x - mean) * rstd
  TensorT<T> rstd;  // (rows, 1), one per flat row of x
  std::size_t heap_bytes() const { return buffer_bytes(xhat, rstd); }
};

// gamma and beta are rows of x's width: (D) or (1, D).
bool is_row_of(const Shape& p, Index width) { return p.rank <= 2 && p.batch == 1 && p.rows == 1 && p.cols == width; }

// Per row of x: xhat = (x - mean) rstd with the statistics in double, y = xhat * gamma + beta, and rstd
// (one per row). xhat, y (x's shape) and rstd are sized by the caller.
template <class T>
void normalize_rows(const TensorT<T>& x, const TensorT<T>& gamma, const TensorT<T>& beta, double eps, TensorT<T>& xhat,
                    TensorT<T>& rstd_out, TensorT<T>& y) {
  const auto X = x.flat();                       // (rows, D)
  const auto G = gamma.flat().row(0).array();    // (D)
  const auto Bt = beta.flat().row(0).array();    // (D)
  auto XH = xhat.flat();
  auto Y = y.flat();
  parallel_rows(X.rows(), X.cols(), [&](Index first, Index rows) {  // row by row: split in row ranges when large
    // The row in double, converted once: read through a lazy cast, each of the three passes converted it
    // again, element by element, at several times the cost for the same values (docs/performance.md;
    // OMP_NUM_THREADS=1 build/bench/step_bench --workloads W5).
    Eigen::Map<Eigen::ArrayXd> xr(detail::thread_scratch<double>(detail::Scratch::norm_row, static_cast<std::size_t>(X.cols())),
                                  X.cols());
    for (Index r = first; r < first + rows; ++r) {
      xr = X.row(r).transpose().array().template cast<double>();
      const double mean = xr.mean();
      xr -= mean;
      const double rstd = 1 / std::sqrt(xr.square().mean() + eps);
      XH.row(r).array() = (xr * rstd).transpose().template cast<T>();
      rstd_out[r] = static_cast<T>(rstd);
      Y.row(r).array() = XH.row(r).array() * G + Bt;
    }
  }, 4);
}

}  // namespace

// C = X * F, F = [u >= p] / (1 - p) per element (u: the next rng.uniform());  dX += dC * F
template <class T>
Var<T> dropout(Var<T> x, double p, Rng& rng, Where where) {
  Tape<T>& t = Tape<T>::of("dropout", {{"x", x}});
  if (!(p >= 0 && p < 1)) fail<ValueError>("dropout: the drop probability p must be in [0, 1), got {}", p);
  if (p == 0) return x;  // nothing dropped, nothing scaled, nothing drawn: x itself, no new node
  const Shape s = t.node(x).val().shape();
  Node<T>& n = t.record("dropout", {x}, s, where);
  const T keep_scale = static_cast<T>(1 / (1 - p));
  TensorT<T>* factor = nullptr;
  if (n.requires_grad) {
    factor = &n.template save<DropoutSaved<T>>().factor;
    factor->resize(s);
  }
  const TensorT<T>& X = t.node(x).val();
  // One uniform per element in row-major order, drawn whether or not gradients are on, so that the
  // stream (and every later mask drawn from it) does not depend on the mode.
  for (Index i = 0; i < X.numel(); ++i) {
    const T f = rng.uniform() < p ? T(0) : keep_scale;
    n.value[i] = X[i] * f;
    if (factor) (*factor)[i] = f;
  }
  n.backward = [](Tape<T>& tp, Node<T>& node) {
    if (const auto dX = tp.input_node(node, 0).grad_whole())
      write_grad(dX.grad->array(), node.grad.array() * node.template saved<DropoutSaved<T>>().factor.array(), dX.assign);
  };
  return t.commit(n);
}

// Per row of x (width D): mean m, biased variance v, rstd = 1 / sqrt(v + eps), xhat = (x - m) rstd,
// y = xhat * gamma + beta. Backward, per row (dxhat = dy * gamma):
//   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat * xhat)),  dgamma += sum over rows dy * xhat,
//   dbeta += sum over rows dy.
// The forward statistics are computed in double whatever T is (a float row's sum of squares loses digits
// when the mean is large next to the spread); the backward works in T.
template <class T>
Var<T> layer_norm(Var<T> x, Var<T> gamma, Var<T> beta, double eps, Where where) {
  Tape<T>& t = Tape<T>::of("layer_norm", {{"x", x}, {"gamma", gamma}, {"beta", beta}});
  const Shape s = t.node(x).val().shape();
  const Shape sg = t.node(gamma).val().shape(), sb = t.node(beta).val().shape();
  if (s.cols == 0) fail<ShapeError>("layer_norm: x is {}; its rows have no entries to normalise", s);
  if (!is_row_of(sg, s.cols) || !is_row_of(sb, s.cols))
    fail<ShapeError>("layer_norm: gamma is {} and beta is {} but x is {}; both must be rows of {} values ({} or 1x{})",
                     sg, sb, s, s.cols, s.cols, s.cols);
  if (!(eps > 0) || !std::isfinite(eps)) fail<ValueError>("layer_norm: eps must be positive and finite, got {}", eps);
  Node<T>& n = t.record("layer_norm", {x, gamma, beta}, s, where);
  auto& saved = n.template save<LayerNormSaved<T>>();
  saved.xhat.resize(s);
  saved.rstd.resize(Shape::mat(s.flat_rows(), 1));
  normalize_rows(t.node(x).val(), t.node(gamma).val(), t.node(beta).val(), eps, saved.xhat, saved.rstd, n.value);
  n.backward = [](Tape<T>& tp, Node<T>& node) {
    const auto& st = node.template saved<LayerNormSaved<T>>();
    const auto dY = node.grad.flat();  // (rows, D)
    const auto XHat = st.xhat.flat();
    if (const auto dX = tp.input_node(node, 0).grad_whole()) {
      const auto Gam = tp.input_node(node, 1).val().flat().row(0).array();
      auto dx = dX.grad->flat();
      parallel_rows(dY.rows(), dY.cols(), [&](Index first, Index rows) {
        for (Index r = first; r < first + rows; ++r) {
          const auto dxhat = dY.row(r).array() * Gam;
          const T mean_dxhat = dxhat.mean();
          const T mean_dxhat_xhat = (dxhat * XHat.row(r).array()).mean();
          write_grad(dx.row(r).array(), st.rstd[r] * (dxhat - mean_dxhat - XHat.row(r).array() * mean_dxhat_xhat),
                     dX.assign);
        }
      }, 3);
    }
    if (const auto dGamma = tp.input_node(node, 1).grad_whole())
      write_column_sums(*dGamma.grad, dY.array() * XHat.array(), dGamma.assign);
    if (const auto dBeta = tp.input_node(node, 2).grad_whole())
      write_column_sums(*dBeta.grad, dY.array(), dBeta.assign);
  };
  return t.commit(n);
}

#define TAPEGRAD_INSTANTIATE(T)                                           \
  template Var<T> dropout(Var<T>, double, Rng&, Where);                  \
  template Var<T> layer_norm(Var<T>, Var<T>, Var<T>, double, Where);
TAPEGRAD_INSTANTIATE(float)
TAPEGRAD_INSTANTIATE(double)
#undef TAPEGRAD_INSTANTIATE  // each file its own: the library is built several files to a unit

}  // namespace tapegrad
