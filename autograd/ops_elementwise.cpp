// Elementwise ops: add, sub, mul and div with one operand broadcast over the other; relu, tanh, gelu, exp, log, sqrt,
// sigmoid and silu, and scale and the other ops of a scalar on one side (the operators), one template; transpose.
#include <numbers>
#include <optional>

#include <unsupported/Eigen/SpecialFunctions>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/kernels.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

// ---- binary ops with one operand broadcast over the other -----------------------------------------

enum class Broadcast { same, row, batch, col };
enum class Binary { add, sub, mul, div };

// How s broadcasts over the full shape f, if it does.
std::optional<Broadcast> broadcast_over(const Shape& f, const Shape& s) {
  if (f == s) return Broadcast::same;
  if (detail::is_row_of(s, f.cols)) return Broadcast::row;
  if (f.rank == 3 && s.rank == 2 && s.rows == f.rows && s.cols == f.cols) return Broadcast::batch;
  if (s.rank == f.rank && s.batch == f.batch && s.rows == f.rows && s.cols == 1) return Broadcast::col;
  return std::nullopt;
}

// How b broadcasts over a or, where only that works, a over b (then `swapped`), as PyTorch's either way
// round: a row of weights or a column of row norms may stand on either side.
std::pair<Broadcast, bool> pairing_of(const char* op, const Shape& a, const Shape& b) {
  if (const auto bc = broadcast_over(a, b)) return {*bc, false};
  if (const auto bc = broadcast_over(b, a)) return {*bc, true};
  const bool b_smaller = b.numel() <= a.numel();  // what the smaller operand may be
  const Shape& f = b_smaller ? a : b;
  const std::string shared = f.rank == 3 ? fmt::format(", a {}x{} matrix shared by the batch", f.rows, f.cols) : "";
  const std::string last =
      f.rank == 1 ? "a single value" : fmt::format("a {} column", Shape{f.rank, f.batch, f.rows, 1});
  fail<ShapeError>("{}: shapes do not broadcast: a is {}, b is {} ({} must be {}, a row of {} values{}, or {})", op, a,
                   b, b_smaller ? "b" : "a", f, f.cols, shared, last);
}

// out (+)= f(A, B) where B is broadcast to A's shape according to `bc`; split over threads by rows (or
// batch items) when large (elementwise: the same values however it is split).
template <class T, class F>
void broadcast_apply(Broadcast bc, const TensorT<T>& A, const TensorT<T>& B, TensorT<T>& out, F f) {
  const Index rows = A.shape().flat_rows(), cols = A.cols();
  switch (bc) {
    case Broadcast::same:
      parallel_rows(rows, cols, [&](Index r, Index k) {
        f(out.flat().middleRows(r, k), A.flat().middleRows(r, k), B.flat().middleRows(r, k));
      });
      break;
    case Broadcast::row:
      parallel_rows(rows, cols, [&](Index r, Index k) {
        for (Index i = r; i < r + k; ++i) f(out.flat().row(i), A.flat().row(i), B.flat().row(0));
      });
      break;
    case Broadcast::batch:
      parallel_for(A.batch(), threads_for_elements(static_cast<double>(A.numel())), [&](Index first, Index last) {
        for (Index i = first; i < last; ++i) f(out.mat(i), A.mat(i), B.mat());
      });
      break;
    case Broadcast::col:
      parallel_rows(rows, cols, [&](Index r, Index k) {
        f(out.flat().middleRows(r, k), A.flat().middleRows(r, k), B.flat().col(0).segment(r, k).replicate(1, cols));
      });
      break;
  }
}

// The gradient that reaches the broadcast operand B before the broadcast is undone, as array expressions
// of one block, A being the full one: add: dC, sub: -dC, mul: dC A, div: -dC A / B^2; when B is a
// (Swapped, for sub and div: C = B - A, B / A), sub: dC, div: dC / A. `sink` receives it.
template <Binary Kind, bool Swapped, class G, class X, class Y, class Sink>
void b_term(const G& dC, const X& A, const Y& B, Sink sink) {
  if constexpr (Kind == Binary::add || (Kind == Binary::sub && Swapped)) sink(dC);
  if constexpr (Kind == Binary::sub && !Swapped) sink(-dC);
  if constexpr (Kind == Binary::mul) sink(dC * A);
  if constexpr (Kind == Binary::div && Swapped) sink(dC / A);
  if constexpr (Kind == Binary::div && !Swapped) sink(-dC * A / B.square());
}

// dB += that gradient summed over the dimensions along which B was broadcast. Every broadcast writes all
// of dB.
template <Binary Kind, bool Swapped, class T>
void reduce_into(Broadcast bc, const TensorT<T>& dC, const TensorT<T>& A, const TensorT<T>& B, const GradWrite<T>& dB) {
  const auto dc = dC.flat().array();
  const auto a = A.flat().array();
  switch (bc) {
    case Broadcast::same:
      parallel_rows(dC.shape().flat_rows(), dC.cols(), [&](Index r, Index k) {
        b_term<Kind, Swapped>(dC.flat().middleRows(r, k).array(), A.flat().middleRows(r, k).array(),
                              B.flat().middleRows(r, k).array(),
                              [&](const auto& g) { dB.add(dB.tensor->flat().middleRows(r, k).array(), g); });
      });
      break;
    case Broadcast::row:  // every row of dC lands on B's single row: column sums
      b_term<Kind, Swapped>(dc, a, B.flat().row(0).array().replicate(dc.rows(), 1),
                            [&](const auto& g) { detail::write_column_sums(dB, g); });
      break;
    case Broadcast::batch:  // batch item i lands on all of B: a sum over the batch (zero if it is empty)
      if (A.batch() == 0 && !dB.accumulate) dB.tensor->set_zero();
      // In ranges of B's rows over the threads (learned positions' gradient, every step): each element
      // still sums the batch in order, on one thread; item 0 is added as dB is, the others always added.
      parallel_rows(
          B.rows(), B.cols(),
          [&](Index r, Index k) {
            for (Index i = 0; i < A.batch(); ++i)
              b_term<Kind, Swapped>(dC.mat(i).middleRows(r, k).array(), A.mat(i).middleRows(r, k).array(),
                                    B.mat().middleRows(r, k).array(), [&](const auto& g) {
                                      write_grad(dB.tensor->mat().middleRows(r, k).array(), g,
                                                 !dB.accumulate && i == 0);
                                    });
          },
          static_cast<double>(std::max<Index>(A.batch(), 1)));
      break;
    case Broadcast::col:  // every column of row r lands on B's row r: row sums
      b_term<Kind, Swapped>(dc, a, B.flat().col(0).array().replicate(1, dc.cols()),
                            [&](const auto& g) { dB.add(dB.tensor->flat().col(0).array(), g.rowwise().sum()); });
      break;
  }
}

constexpr const char* kBinaryNames[] = {"add", "sub", "mul", "div"};

// C = A + B, A - B, A * B or A / B, B broadcast over A (see ops.hpp). Backward:
//   add: dA += dC,      dB += reduce(dC)
//   sub: dA += dC,      dB -= reduce(dC)
//   mul: dA += dC * B,  dB += reduce(dC * A)
//   div: dA += dC / B,  dB -= reduce(dC * A / B^2)
// where reduce() sums over the dimensions along which B was broadcast. With A broadcast over B instead, add
// and mul are the same rules with the operands exchanged, and
//   sub: dB -= dC,  dA += reduce(dC);   div: dB -= dC C / B,  dA += reduce(dC / B).
template <class T, Binary Kind>
struct BinaryOp {
  static constexpr const char* name = kBinaryNames[static_cast<int>(Kind)];
  static constexpr const char* inputs[] = {"a", "b"};

  void forward(Output<T>& out, const TensorT<T>& A, const TensorT<T>& B) const {
    const auto [bc, swapped] = pairing_of(name, A.shape(), B.shape());
    TensorT<T>& C = out.make((swapped ? B : A).shape(), false);
    const auto f = [](auto o, auto x, auto y) {  // x: A's block, y: B's
      if constexpr (Kind == Binary::add) o = x + y;
      if constexpr (Kind == Binary::sub) o = x - y;
      if constexpr (Kind == Binary::mul) o = x.cwiseProduct(y);
      if constexpr (Kind == Binary::div) o = x.cwiseQuotient(y);
    };
    if (swapped)
      broadcast_apply(bc, B, A, C, [&](auto o, auto y, auto x) { f(o, x, y); });
    else
      broadcast_apply(bc, A, B, C, f);
  }

  static void backward(const Output<T>& out, const OpInput<T>& a, const OpInput<T>& b) {
    const auto [bc, swapped] = pairing_of(name, a.value.shape(), b.value.shape());  // as the forward found it
    if (!swapped) return backward_of(bc, out, a, b);
    // a broadcast over b: add and mul commute, so theirs is the rule below with the operands exchanged.
    if constexpr (Kind == Binary::add || Kind == Binary::mul)
      backward_of(bc, out, b, a);
    else
      backward_swapped(bc, out, a, b);
  }

  // b broadcast over a (bc).
  static void backward_of(Broadcast bc, const Output<T>& out, const OpInput<T>& a, const OpInput<T>& b) {
    const TensorT<T>& dC = out.grad();
    const GradWrite<T> dA = detail::pieces(a.grad);
    if constexpr (Kind == Binary::add || Kind == Binary::sub) {
      // dA = dC and, when b has a's shape, dB = +-dC in the same pass over dC (a residual connection's add,
      // twice a block): one parallel region, not two. When a and b are one node, dA (taken first) assigns.
      const GradWrite<T> dB = bc == Broadcast::same ? detail::pieces(b.grad) : GradWrite<T>{};
      if (dA || dB)
        parallel_rows(
            dC.shape().flat_rows(), dC.cols(),
            [&](Index r, Index k) {
              const auto g = dC.flat().middleRows(r, k).array();
              if (dA) dA.add(dA.tensor->flat().middleRows(r, k).array(), g);
              if (dB && Kind == Binary::add) dB.add(dB.tensor->flat().middleRows(r, k).array(), g);
              if (dB && Kind == Binary::sub) dB.add(dB.tensor->flat().middleRows(r, k).array(), -g);
            },
            dA && dB ? 2 : 1);
      if (bc == Broadcast::same) return;
    } else if (dA) {
      broadcast_apply(bc, dC, b.value, *dA.tensor, [&](auto o, auto g, auto y) {
        if constexpr (Kind == Binary::mul)
          dA.add(o.array(), g.array() * y.array());
        else
          dA.add(o.array(), g.array() / y.array());
      });
    }
    if (const GradWrite<T> dB = detail::pieces(b.grad)) reduce_into<Kind, false>(bc, dC, a.value, b.value, dB);
  }

  // sub and div with a broadcast over b: b's gradient, of the output's shape, in element ranges over the
  // threads; a's summed over the broadcast. div's dB is -dC C / B, C = A / B: where the forward overflowed,
  // Inf (NaN where dC is 0), which anomaly mode has reported by then.
  static void backward_swapped(Broadcast bc, const Output<T>& out, const OpInput<T>& a, const OpInput<T>& b) {
    const auto dC = out.grad().array(), C = out.value().array(), B = b.value.array();
    if constexpr (Kind == Binary::sub) b.grad.add([&](Index i, Index n) { return -dC.segment(i, n); });
    if constexpr (Kind == Binary::div)
      b.grad.add([&](Index i, Index n) { return -dC.segment(i, n) * C.segment(i, n) / B.segment(i, n); }, 3);
    if (const GradWrite<T> dA = detail::pieces(a.grad)) reduce_into<Kind, true>(bc, out.grad(), b.value, a.value, dA);
  }
};

// ---- unary ops and transpose ----------------------------------------------------------------

// Standard normal cdf and density, for gelu, over whole arrays: Eigen's erf and exp are vectorised for
// float (a scalar std::erf per element was a third of a small transformer's training step, and slower
// still once activations grow into its slow paths); for double Eigen's erf is std::erf.
template <class A>
auto normal_cdf(const A& x) {
  using T = typename A::Scalar;
  return T(0.5) * (T(1) + (x * T(std::numbers::sqrt2 / 2)).erf());
}
template <class A>
auto normal_pdf(const A& x) {
  using T = typename A::Scalar;
  return (T(-0.5) * x.square()).exp() * T(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
}

// C = f(A), elementwise, and dA += dC f'(A):
//   relu: max(A, 0), dC [A > 0];   tanh: dC (1 - C^2);   exp: e^A, dC C;
//   log: NaN for A < 0, -Inf at 0 (as std::log), dC / A;   sqrt: NaN for A < 0, dC / (2 C) (Inf at A = 0,
//   where the slope is unbounded);   sigmoid: 1 / (1 + e^-A), dC C (1 - C): e^-A overflows to Inf for very
//   negative A, giving exactly 0, and underflows to 0 for large A, giving 1: no NaN either way;
//   gelu: A Phi(A) (Phi: standard normal cdf, PyTorch's exact gelu), dC (Phi(A) + A phi(A));
//   silu: A s(A), s the sigmoid, dC s (1 + A (1 - s)), s computed again from A: one exp an element against
//   keeping a tensor of them.
// And with a number k on one side (the op's `number` in A's type, saved for the backward rule; the
// operators of ops.hpp): add_scalar: A + k, dC;  scale: k A, dC k;  div_scalar: A / k, dC / k;
//   scalar_sub: k - A, -dC;  scalar_div: k / A, -dC k / A^2 (= -dC C / A).
// In element ranges over the threads when large (the same bits however it is split: core/parallel.hpp).
namespace unary {  // UnaryOp's kinds: f(A), then with a number
enum Kind { relu, tanh, exp, log, sqrt, sigmoid, gelu, silu, add_scalar, scale, div_scalar, scalar_sub, scalar_div };
}  // namespace unary
constexpr const char* kUnaryNames[] = {"relu", "tanh",       "exp",   "log",        "sqrt",       "sigmoid",   "gelu",
                                       "silu", "add_scalar", "scale", "div_scalar", "scalar_sub", "scalar_div"};

template <class T, unary::Kind Kind>
struct UnaryOp {
  static constexpr const char* name = kUnaryNames[Kind];
  static constexpr const char* inputs[] = {"x"};
  static constexpr bool kWithNumber = Kind >= unary::add_scalar;
  // An element's work in elementwise passes' worth (for the split): gelu's erf and exp, silu's exp.
  static constexpr double kCost = Kind == unary::gelu ? 8 : Kind == unary::silu ? 4 : 1;
  struct Saved {
    T number = 0;
  };
  double number = 0;

  void forward(Output<T, Saved>& out, const TensorT<T>& x) const {
    TensorT<T>& y = out.make(x.shape(), false);
    const T k = static_cast<T>(number);
    if constexpr (kWithNumber) out.saved().number = k;
    parallel_rows(
        x.numel(), 1,
        [&](Index from, Index count) {
          const auto A = x.array().segment(from, count);
          auto C = y.array().segment(from, count);
          if constexpr (Kind == unary::relu) C = A.max(T(0));
          if constexpr (Kind == unary::tanh) C = A.tanh();
          if constexpr (Kind == unary::exp) C = A.exp();
          if constexpr (Kind == unary::log) C = A.log();
          if constexpr (Kind == unary::sqrt) C = A.sqrt();
          if constexpr (Kind == unary::sigmoid) C = T(1) / (T(1) + (-A).exp());
          if constexpr (Kind == unary::gelu) C = A * normal_cdf(A);
          if constexpr (Kind == unary::silu) C = A * (T(1) / (T(1) + (-A).exp()));
          if constexpr (Kind == unary::add_scalar) C = A + k;
          if constexpr (Kind == unary::scale) C = k * A;
          if constexpr (Kind == unary::div_scalar) C = A / k;
          if constexpr (Kind == unary::scalar_sub) C = k - A;
          if constexpr (Kind == unary::scalar_div) C = k / A;
        },
        kCost);
  }
  static void backward(const Output<T, Saved>& out, const OpInput<T>& x) {
    const T k = kWithNumber ? out.saved().number : T(0);
    x.grad.add(
        [&](Index from, Index count) {
          const auto A = x.value.array().segment(from, count), C = out.value().array().segment(from, count);
          const auto dC = out.grad().array().segment(from, count);
          const auto s = T(1) / (T(1) + (-A).exp());  // silu's sigmoid (an expression: computed where used)
          if constexpr (Kind == unary::relu) return (A > T(0)).select(dC, T(0));
          if constexpr (Kind == unary::tanh) return dC * (T(1) - C.square());
          if constexpr (Kind == unary::exp) return dC * C;
          if constexpr (Kind == unary::log) return dC / A;
          if constexpr (Kind == unary::sqrt) return dC * T(0.5) / C;
          if constexpr (Kind == unary::sigmoid) return dC * C * (T(1) - C);
          if constexpr (Kind == unary::gelu) return dC * (normal_cdf(A) + A * normal_pdf(A));
          if constexpr (Kind == unary::silu) return dC * s * (T(1) + A * (T(1) - s));
          if constexpr (Kind == unary::add_scalar) return dC;
          if constexpr (Kind == unary::scale) return k * dC;
          if constexpr (Kind == unary::div_scalar) return dC / k;
          if constexpr (Kind == unary::scalar_sub) return -dC;
          if constexpr (Kind == unary::scalar_div) return -dC * C / A;
        },
        kCost);
  }
};

// C_i = A_i^T per batch item;  dA_i += dC_i^T
template <class T>
struct Transpose {
  static constexpr const char* name = "transpose";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<T>& out, const TensorT<T>& a) const {
    const Shape s = a.shape();
    if (s.rank == 1) fail<ShapeError>("transpose: x is a vector of {}; transpose needs a 2-D or batched 3-D x", s);
    TensorT<T>& C = out.make({s.rank, s.batch, s.cols, s.rows}, false);  // batch is 1 unless rank 3
    for (Index i = 0; i < s.batch; ++i) C.mat(i) = a.mat(i).transpose();
  }
  static void backward(const Output<T>& out, const OpInput<T>& a) {
    if (const GradWrite<T> dA = detail::pieces(a.grad))
      for (Index i = 0; i < dA.tensor->batch(); ++i) dA.add(dA.tensor->mat(i), out.grad().mat(i).transpose());
  }
};

}  // namespace

// The public functions of this file (ops.hpp declares them), each recording its op: TAPEGRAD_ONE_INPUT and
// TAPEGRAD_TWO_INPUTS (autograd/kernels.hpp) and, as they do, TAPEGRAD_SCALAR(scale), which records
// UnaryOp<T, unary::scale> with the number s.
#define TAPEGRAD_SCALAR(fn)                                       \
  template <class T>                                              \
  Var<T> fn(Var<T> a, double s, Where where) {                    \
    return apply(UnaryOp<T, unary::fn>{.number = s}, {a}, where); \
  }                                                               \
  template Var<float> fn(Var<float>, double, Where);              \
  template Var<double> fn(Var<double>, double, Where);

TAPEGRAD_TWO_INPUTS(add, BinaryOp<T, Binary::add>)
TAPEGRAD_TWO_INPUTS(sub, BinaryOp<T, Binary::sub>)
TAPEGRAD_TWO_INPUTS(mul, BinaryOp<T, Binary::mul>)
TAPEGRAD_TWO_INPUTS(div, BinaryOp<T, Binary::div>)  // (declared in ops.hpp with exp and log)
TAPEGRAD_SCALAR(scale)
TAPEGRAD_ONE_INPUT(relu, UnaryOp<T, unary::relu>)
TAPEGRAD_ONE_INPUT(tanh, UnaryOp<T, unary::tanh>)
TAPEGRAD_ONE_INPUT(gelu, UnaryOp<T, unary::gelu>)
TAPEGRAD_ONE_INPUT(exp, UnaryOp<T, unary::exp>)
TAPEGRAD_ONE_INPUT(log, UnaryOp<T, unary::log>)
TAPEGRAD_ONE_INPUT(sqrt, UnaryOp<T, unary::sqrt>)
TAPEGRAD_ONE_INPUT(sigmoid, UnaryOp<T, unary::sigmoid>)
TAPEGRAD_ONE_INPUT(silu, UnaryOp<T, unary::silu>)
TAPEGRAD_ONE_INPUT(transpose, Transpose<T>)
namespace detail {  // the operators' scalar forms (ops.hpp): a + s, a / s, s - a, s / a
TAPEGRAD_SCALAR(add_scalar)
TAPEGRAD_SCALAR(div_scalar)
TAPEGRAD_SCALAR(scalar_sub)
TAPEGRAD_SCALAR(scalar_div)
}  // namespace detail
#undef TAPEGRAD_SCALAR  // each file its own: the library is built several files to a unit

}  // namespace tapegrad
