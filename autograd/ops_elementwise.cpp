// Elementwise ops with broadcasting of b, unary activations, scale, full reductions, transpose.
#include <cmath>
#include <numbers>

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

// ---- binary ops with b broadcast over a ------------------------------------------------------

enum class Broadcast { same, row, batch };
enum class Binary { add, sub, mul };

// What add, sub and mul keep for their backward rule.
struct BinarySaved {
  Binary kind = Binary::add;
  Broadcast broadcast = Broadcast::same;
};

Broadcast broadcast_of(const char* op, const Shape& a, const Shape& b) {
  if (a == b) return Broadcast::same;
  if (b.rank <= 2 && b.batch == 1 && b.rows == 1 && b.cols == a.cols) return Broadcast::row;
  if (a.rank == 3 && b.rank == 2 && b.rows == a.rows && b.cols == a.cols) return Broadcast::batch;
  if (a.rank == 3)
    fail<ShapeError>("{}: shapes do not broadcast: a is {}, b is {} (b must be {}, a row of {} values, or a "
                     "{}x{} matrix shared by the batch)",
                     op, a, b, a, a.cols, a.rows, a.cols);
  fail<ShapeError>("{}: shapes do not broadcast: a is {}, b is {} (b must be {} or a row of {} values)", op, a,
                   b, a, a.cols);
}

// out (+)= f(A, B) where B is broadcast to A's shape according to `bc`.
template <class T, class F>
void broadcast_apply(Broadcast bc, const TensorT<T>& A, const TensorT<T>& B, TensorT<T>& out, F f) {
  switch (bc) {
    case Broadcast::same: f(out.flat(), A.flat(), B.flat()); break;
    case Broadcast::row:
      for (Index r = 0; r < A.shape().flat_rows(); ++r) f(out.flat().row(r), A.flat().row(r), B.flat().row(0));
      break;
    case Broadcast::batch:
      for (Index i = 0; i < A.batch(); ++i) f(out.mat(i), A.mat(i), B.mat());
      break;
  }
}

// dB (+)= sign * (dC, or dC * A when A is given) summed over the dimensions along which B was
// broadcast; `assign` (the gradient's first write) only for the same-shape case and a plain bias, which
// write all of dB.
template <class T>
void reduce_into(Broadcast bc, const TensorT<T>& dC, const TensorT<T>* A, T sign, TensorT<T>& dB, bool assign) {
  if (bc == Broadcast::same) {
    if (A)
      write_grad(dB.array(), sign * dC.array() * A->array(), assign);
    else
      write_grad(dB.array(), sign * dC.array(), assign);
    return;
  }
  if (bc == Broadcast::row && !A) {  // a bias: the column sums of dC, vectorised
    write_grad(dB.flat().row(0), sign * dC.flat().colwise().sum(), assign);
    return;
  }
  // row: every row of dC lands on B's single row; batch: row r lands on row r mod T of B.
  for (Index r = 0; r < dC.shape().flat_rows(); ++r) {
    auto target = dB.flat().row(bc == Broadcast::row ? 0 : r % dB.rows());
    if (A)
      target.array() += sign * dC.flat().row(r).array() * A->flat().row(r).array();
    else
      target.array() += sign * dC.flat().row(r).array();
  }
}

// Forward was C = A + B, A - B or A * B (B broadcast). So now:
//   add: dA += dC,      dB += reduce(dC)
//   sub: dA += dC,      dB -= reduce(dC)
//   mul: dA += dC * B,  dB += reduce(dC * A)
template <class T>
void binary_backward(Tape<T>& t, Node<T>& n) {
  const auto [kind, bc] = n.template saved<BinarySaved>();
  Node<T>& na = t.input(n, 0);
  Node<T>& nb = t.input(n, 1);
  const TensorT<T>& dC = n.grad;
  if (const auto dA = na.grad_whole()) {
    if (kind == Binary::mul)
      broadcast_apply(bc, dC, nb.val(), *dA.grad,
                      [assign = dA.assign](auto o, auto g, auto b) { write_grad(o.array(), g.array() * b.array(), assign); });
    else
      write_grad(dA.grad->array(), dC.array(), dA.assign);
  }
  const T sign = kind == Binary::sub ? T(-1) : T(1);
  const TensorT<T>* times = kind == Binary::mul ? &na.val() : nullptr;
  if (bc == Broadcast::same || (bc == Broadcast::row && !times)) {  // written whole
    if (const auto dB = nb.grad_whole()) reduce_into(bc, dC, times, sign, *dB.grad, dB.assign);
  } else if (TensorT<T>* dB = nb.grad_sink()) {
    reduce_into(bc, dC, times, sign, *dB, false);
  }
}

template <class T>
Var<T> binary(const char* op, Binary kind, Var<T> a, Var<T> b, Where where) {
  Tape<T>& t = Tape<T>::of(op, {{"a", a}, {"b", b}});
  const Shape sa = t.node(a).val().shape();
  const Broadcast bc = broadcast_of(op, sa, t.node(b).val().shape());
  Node<T>& n = t.record(op, {a, b}, sa, where);
  n.template saved<BinarySaved>() = {kind, bc};
  const TensorT<T>& A = t.node(a).val();
  const TensorT<T>& B = t.node(b).val();
  switch (kind) {
    case Binary::add: broadcast_apply(bc, A, B, n.value, [](auto o, auto x, auto y) { o = x + y; }); break;
    case Binary::sub: broadcast_apply(bc, A, B, n.value, [](auto o, auto x, auto y) { o = x - y; }); break;
    case Binary::mul:
      broadcast_apply(bc, A, B, n.value, [](auto o, auto x, auto y) { o = x.cwiseProduct(y); });
      break;
  }
  n.backward = &binary_backward<T>;
  return t.commit(n);
}

// ---- unary ops ---------------------------------------------------------------------------------

// Records `op` with an output of x's shape; `forward` fills it, `backward` is the rule.
template <class T, class F>
Var<T> unary(const char* op, Var<T> x, Where where, typename Node<T>::BackwardFn backward, F forward) {
  Tape<T>& t = Tape<T>::of(op, {{"x", x}});
  const Shape s = t.node(x).val().shape();
  Node<T>& n = t.record(op, {x}, s, where);
  forward(n, t.node(x).val());
  n.backward = backward;
  return t.commit(n);
}

// Standard normal cdf and density, for gelu.
template <class T>
T normal_cdf(T x) {
  return T(0.5) * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
}
template <class T>
T normal_pdf(T x) {
  return std::exp(T(-0.5) * x * x) * T(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
}

}  // namespace

template <class T>
Var<T> add(Var<T> a, Var<T> b, Where where) {
  return binary("add", Binary::add, a, b, where);
}
template <class T>
Var<T> sub(Var<T> a, Var<T> b, Where where) {
  return binary("sub", Binary::sub, a, b, where);
}
template <class T>
Var<T> mul(Var<T> a, Var<T> b, Where where) {
  return binary("mul", Binary::mul, a, b, where);
}

namespace {
struct ScaleSaved {
  double factor = 1;
};
}  // namespace

// C = s A;  dA += s dC
template <class T>
Var<T> scale(Var<T> a, double factor, Where where) {
  return unary(
      "scale", a, where,
      [](Tape<T>& t, Node<T>& n) {
        const T s = static_cast<T>(n.template saved<ScaleSaved>().factor);
        if (const auto dA = t.input(n, 0).grad_whole()) write_grad(dA.grad->array(), s * n.grad.array(), dA.assign);
      },
      [factor](Node<T>& n, const TensorT<T>& A) {
        n.template saved<ScaleSaved>().factor = factor;
        n.value.array() = static_cast<T>(factor) * A.array();
      });
}

// C = max(A, 0);  dA += dC [A > 0]
template <class T>
Var<T> relu(Var<T> a, Where where) {
  return unary(
      "relu", a, where,
      [](Tape<T>& t, Node<T>& n) {
        Node<T>& in = t.input(n, 0);
        if (const auto dA = in.grad_whole())
          write_grad(dA.grad->array(), (in.val().array() > T(0)).select(n.grad.array(), T(0)), dA.assign);
      },
      [](Node<T>& n, const TensorT<T>& A) { n.value.array() = A.array().max(T(0)); });
}

// C = tanh(A);  dA += dC (1 - C^2)
template <class T>
Var<T> tanh(Var<T> a, Where where) {
  return unary(
      "tanh", a, where,
      [](Tape<T>& t, Node<T>& n) {
        if (const auto dA = t.input(n, 0).grad_whole())
          write_grad(dA.grad->array(), n.grad.array() * (T(1) - n.value.array().square()), dA.assign);
      },
      [](Node<T>& n, const TensorT<T>& A) { n.value.array() = A.array().tanh(); });
}

// C = A Phi(A) (Phi: standard normal cdf, PyTorch's exact gelu);  dA += dC (Phi(A) + A phi(A))
template <class T>
Var<T> gelu(Var<T> a, Where where) {
  return unary(
      "gelu", a, where,
      [](Tape<T>& t, Node<T>& n) {
        Node<T>& in = t.input(n, 0);
        if (const auto dA = in.grad_whole()) {
          auto x = in.val().array();
          write_grad(dA.grad->array(), n.grad.array() * x.unaryExpr([](T v) { return normal_cdf(v) + v * normal_pdf(v); }),
                     dA.assign);
        }
      },
      [](Node<T>& n, const TensorT<T>& A) {
        n.value.array() = A.array().unaryExpr([](T v) { return v * normal_cdf(v); });
      });
}

namespace {
// sum: C = sum(A), dA += dC;  mean: C = sum(A) / N, dA += dC / N (every element). `Mean` says which.
template <class T, bool Mean>
void reduce_all_backward(Tape<T>& t, Node<T>& n) {
  Node<T>& in = t.input(n, 0);
  if (const auto dA = in.grad_whole()) {
    const T g = Mean ? n.grad[0] / static_cast<T>(in.val().numel()) : n.grad[0];
    if (dA.assign)
      dA.grad->fill(g);
    else
      dA.grad->array() += g;
  }
}

template <class T, bool Mean>
Var<T> reduce_all(const char* op, Var<T> a, Where where) {
  Tape<T>& t = Tape<T>::of(op, {{"x", a}});
  const Shape s = t.node(a).val().shape();
  if (Mean && s.numel() == 0) fail<ShapeError>("{}: x is {}, which has no elements to average", op, s);
  Node<T>& n = t.record(op, {a}, Shape::scalar(), where);
  const auto A = t.node(a).val().array();
  n.value[0] = Mean ? A.mean() : A.sum();
  n.backward = &reduce_all_backward<T, Mean>;
  return t.commit(n);
}
}  // namespace

template <class T>
Var<T> sum(Var<T> a, Where where) {
  return reduce_all<T, false>("sum", a, where);
}
template <class T>
Var<T> mean(Var<T> a, Where where) {
  return reduce_all<T, true>("mean", a, where);
}

// C_i = A_i^T per batch item;  dA_i += dC_i^T
template <class T>
Var<T> transpose(Var<T> a, Where where) {
  Tape<T>& t = Tape<T>::of("transpose", {{"x", a}});
  const Shape s = t.node(a).val().shape();
  if (s.rank == 1) fail<ShapeError>("transpose: x is a vector of {}; transpose needs a 2-D or batched 3-D x", s);
  const Shape out = s.rank == 3 ? Shape::batched(s.batch, s.cols, s.rows) : Shape::mat(s.cols, s.rows);
  Node<T>& n = t.record("transpose", {a}, out, where);
  const TensorT<T>& A = t.node(a).val();
  for (Index i = 0; i < s.batch; ++i) n.value.mat(i) = A.mat(i).transpose();
  n.backward = [](Tape<T>& tp, Node<T>& node) {
    if (const auto dA = tp.input(node, 0).grad_whole())
      for (Index i = 0; i < dA.grad->batch(); ++i) write_grad(dA.grad->mat(i), node.grad.mat(i).transpose(), dA.assign);
  };
  return t.commit(n);
}

#define TAPEGRAD_INSTANTIATE(T)                      \
  template Var<T> add(Var<T>, Var<T>, Where);        \
  template Var<T> sub(Var<T>, Var<T>, Where);        \
  template Var<T> mul(Var<T>, Var<T>, Where);        \
  template Var<T> scale(Var<T>, double, Where);      \
  template Var<T> relu(Var<T>, Where);               \
  template Var<T> tanh(Var<T>, Where);               \
  template Var<T> gelu(Var<T>, Where);               \
  template Var<T> sum(Var<T>, Where);                \
  template Var<T> mean(Var<T>, Where);               \
  template Var<T> transpose(Var<T>, Where);
TAPEGRAD_INSTANTIATE(float)
TAPEGRAD_INSTANTIATE(double)

}  // namespace tapegrad
