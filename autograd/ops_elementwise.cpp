// Elementwise ops: add, sub, mul and div with b broadcast; scale, relu, tanh, gelu, exp, log, sqrt and
// sigmoid; full reductions; transpose. The unary ops and the reductions are Functions (autograd/function.hpp),
// written as a user's op would be. add, sub, mul and div are not: their backward rules write a gradient
// block by block in four broadcast layouts, across threads, and reduce B's over the broadcast dimensions
// (column sums, a sum over the batch, row sums), which needs the assign-or-add flag the accessor hides.
#include <cmath>
#include <numbers>

#include <unsupported/Eigen/SpecialFunctions>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/parallel.hpp"

namespace tapegrad {
namespace {

// ---- binary ops with b broadcast over a ------------------------------------------------------

enum class Broadcast { same, row, batch, col };
enum class Binary { add, sub, mul, div };

// What add, sub, mul and div keep for their backward rule.
struct BinarySaved {
  Binary kind = Binary::add;
  Broadcast broadcast = Broadcast::same;
};

Broadcast broadcast_of(const char* op, const Shape& a, const Shape& b) {
  if (a == b) return Broadcast::same;
  if (b.rank <= 2 && b.batch == 1 && b.rows == 1 && b.cols == a.cols) return Broadcast::row;
  if (a.rank == 3 && b.rank == 2 && b.rows == a.rows && b.cols == a.cols) return Broadcast::batch;
  if (b.rank == a.rank && b.batch == a.batch && b.rows == a.rows && b.cols == 1) return Broadcast::col;
  Shape col = a;
  col.cols = 1;
  if (a.rank == 3)
    fail<ShapeError>("{}: shapes do not broadcast: a is {}, b is {} (b must be {}, a row of {} values, a "
                     "{}x{} matrix shared by the batch, or a {} column)",
                     op, a, b, a, a.cols, a.rows, a.cols, col);
  if (a.rank == 2)
    fail<ShapeError>("{}: shapes do not broadcast: a is {}, b is {} (b must be {}, a row of {} values, or a {} column)",
                     op, a, b, a, a.cols, col);
  fail<ShapeError>("{}: shapes do not broadcast: a is {}, b is {} (b must be {}, a row of {} values, or a single value)",
                   op, a, b, a, a.cols);
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

// The gradient that reaches B before the broadcast is undone, as array expressions of one block:
// add: dC, sub: -dC, mul: dC A, div: -dC A / B^2. `sink` receives it.
template <class G, class X, class Y, class Sink>
void b_term(Binary kind, const G& dC, const X& A, const Y& B, Sink sink) {
  switch (kind) {
    case Binary::add: sink(dC); break;
    case Binary::sub: sink(-dC); break;
    case Binary::mul: sink(dC * A); break;
    case Binary::div: sink(-dC * A / B.square()); break;
  }
}

// dB (+)= that gradient summed over the dimensions along which B was broadcast. Every broadcast writes
// all of dB, so the first write of a backward pass may assign.
template <class T>
void reduce_into(Binary kind, Broadcast bc, const TensorT<T>& dC, const TensorT<T>& A, const TensorT<T>& B,
                 TensorT<T>& dB, bool assign) {
  const auto dc = dC.flat().array();
  const auto a = A.flat().array();
  switch (bc) {
    case Broadcast::same:
      parallel_rows(dC.shape().flat_rows(), dC.cols(), [&](Index r, Index k) {
        b_term(kind, dC.flat().middleRows(r, k).array(), A.flat().middleRows(r, k).array(),
               B.flat().middleRows(r, k).array(),
               [&](const auto& g) { write_grad(dB.flat().middleRows(r, k).array(), g, assign); });
      });
      break;
    case Broadcast::row:  // every row of dC lands on B's single row: column sums
      b_term(kind, dc, a, B.flat().row(0).array().replicate(dc.rows(), 1),
             [&](const auto& g) { write_column_sums(dB, g, assign); });
      break;
    case Broadcast::batch:  // batch item i lands on all of B: a sum over the batch (zero if it is empty)
      if (A.batch() == 0 && assign) dB.set_zero();
      // In ranges of B's rows over the threads (learned positions' gradient, every step): each element
      // still sums the batch in order, on one thread.
      parallel_rows(B.rows(), B.cols(), [&](Index r, Index k) {
        for (Index i = 0; i < A.batch(); ++i)
          b_term(kind, dC.mat(i).middleRows(r, k).array(), A.mat(i).middleRows(r, k).array(),
                 B.mat().middleRows(r, k).array(),
                 [&](const auto& g) { write_grad(dB.mat().middleRows(r, k).array(), g, assign && i == 0); });
      }, static_cast<double>(std::max<Index>(A.batch(), 1)));
      break;
    case Broadcast::col:  // every column of row r lands on B's row r: row sums
      b_term(kind, dc, a, B.flat().col(0).array().replicate(1, dc.cols()),
             [&](const auto& g) { write_grad(dB.flat().col(0).array(), g.rowwise().sum(), assign); });
      break;
  }
}

// Forward was C = A + B, A - B, A * B or A / B (B broadcast). So now:
//   add: dA += dC,      dB += reduce(dC)
//   sub: dA += dC,      dB -= reduce(dC)
//   mul: dA += dC * B,  dB += reduce(dC * A)
//   div: dA += dC / B,  dB -= reduce(dC * A / B^2)
template <class T>
void binary_backward(Tape<T>& t, Node<T>& n) {
  const auto [kind, bc] = n.template saved<BinarySaved>();
  Node<T>& na = t.input_node(n, 0);
  Node<T>& nb = t.input_node(n, 1);
  const TensorT<T>& dC = n.grad;
  if ((kind == Binary::add || kind == Binary::sub) && bc == Broadcast::same) {
    // Both gradients in one pass over dC (a residual connection's add, twice a block): one parallel region,
    // not two. The same expressions per element as below, in the same order when a and b are one node.
    const auto dA = na.grad_whole();
    const auto dB = nb.grad_whole();
    const bool subtract = kind == Binary::sub;  // a copy: clang 14 cannot capture a structured binding
    parallel_rows(dC.shape().flat_rows(), dC.cols(), [&](Index r, Index k) {
      const auto g = dC.flat().middleRows(r, k).array();
      if (dA) write_grad(dA.grad->flat().middleRows(r, k).array(), g, dA.assign);
      if (dB && !subtract) write_grad(dB.grad->flat().middleRows(r, k).array(), g, dB.assign);
      if (dB && subtract) write_grad(dB.grad->flat().middleRows(r, k).array(), -g, dB.assign);
    }, dA && dB ? 2 : 1);
    return;
  }
  if (const auto dA = na.grad_whole()) {
    if (kind == Binary::mul)
      broadcast_apply(bc, dC, nb.val(), *dA.grad,
                      [assign = dA.assign](auto o, auto g, auto b) { write_grad(o.array(), g.array() * b.array(), assign); });
    else if (kind == Binary::div)
      broadcast_apply(bc, dC, nb.val(), *dA.grad,
                      [assign = dA.assign](auto o, auto g, auto b) { write_grad(o.array(), g.array() / b.array(), assign); });
    else
      parallel_rows(dC.shape().flat_rows(), dC.cols(), [&](Index r, Index k) {
        write_grad(dA.grad->flat().middleRows(r, k).array(), dC.flat().middleRows(r, k).array(), dA.assign);
      });
  }
  if (const auto dB = nb.grad_whole()) reduce_into(kind, bc, dC, na.val(), nb.val(), *dB.grad, dB.assign);
}

template <class T>
Var<T> binary(const char* op, Binary kind, Var<T> a, Var<T> b, Where where) {
  Tape<T>& t = Tape<T>::of(op, {{"a", a}, {"b", b}});
  const Shape sa = t.node(a).val().shape();
  const Broadcast bc = broadcast_of(op, sa, t.node(b).val().shape());
  Node<T>& n = t.record(op, {a, b}, sa, where);
  n.template save<BinarySaved>() = {kind, bc};
  const TensorT<T>& A = t.node(a).val();
  const TensorT<T>& B = t.node(b).val();
  switch (kind) {
    case Binary::add: broadcast_apply(bc, A, B, n.value, [](auto o, auto x, auto y) { o = x + y; }); break;
    case Binary::sub: broadcast_apply(bc, A, B, n.value, [](auto o, auto x, auto y) { o = x - y; }); break;
    case Binary::mul:
      broadcast_apply(bc, A, B, n.value, [](auto o, auto x, auto y) { o = x.cwiseProduct(y); });
      break;
    case Binary::div:
      broadcast_apply(bc, A, B, n.value, [](auto o, auto x, auto y) { o = x.cwiseQuotient(y); });
      break;
  }
  n.backward = &binary_backward<T>;
  return t.commit(n);
}

// ---- unary ops and full reductions, written as Functions (autograd/function.hpp) ---------------

// gelu's erf and exp per element, in elementwise passes' worth (for the split, core/parallel.hpp).
constexpr double kErfCost = 8;

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

// C = s A;  dA += s dC
template <class T>
struct Scale {
  static constexpr const char* name = "scale";
  static constexpr const char* inputs[] = {"x"};
  struct Saved {
    double factor = 1;
  };
  double factor = 1;

  void forward(ForwardContext<T, Saved>& ctx, const TensorT<T>& a) const {
    ctx.output(a.shape()).array() = static_cast<T>(factor) * a.array();
    ctx.saved().factor = factor;
  }
  static void backward(BackwardContext<T, Saved>& ctx, const OpInput<T>& a) {
    a.grad.add(static_cast<T>(ctx.saved().factor) * ctx.grad_output().array());
  }
};

// C = max(A, 0);  dA += dC [A > 0]
template <class T>
struct Relu {
  static constexpr const char* name = "relu";
  static constexpr const char* inputs[] = {"x"};
  static void forward(ForwardContext<T>& ctx, const TensorT<T>& a) {
    ctx.output(a.shape()).array() = a.array().max(T(0));
  }
  static void backward(BackwardContext<T>& ctx, const OpInput<T>& a) {
    a.grad.add((a.value.array() > T(0)).select(ctx.grad_output().array(), T(0)));
  }
};

// C = tanh(A);  dA += dC (1 - C^2)
template <class T>
struct Tanh {
  static constexpr const char* name = "tanh";
  static constexpr const char* inputs[] = {"x"};
  static void forward(ForwardContext<T>& ctx, const TensorT<T>& a) { ctx.output(a.shape()).array() = a.array().tanh(); }
  static void backward(BackwardContext<T>& ctx, const OpInput<T>& a) {
    a.grad.add(ctx.grad_output().array() * (T(1) - ctx.output().array().square()));
  }
};

// y = x Phi(x), elementwise: gelu's forward (y may be x).
template <class T>
void gelu_values(const TensorT<T>& x, TensorT<T>& y) {
  parallel_rows(x.numel(), 1, [&](Index from, Index count) {
    const auto v = x.array().segment(from, count);
    y.array().segment(from, count) = v * normal_cdf(v);
  }, kErfCost);
}

// C = A Phi(A) (Phi: standard normal cdf, PyTorch's exact gelu);  dA += dC (Phi(A) + A phi(A))
template <class T>
struct Gelu {
  static constexpr const char* name = "gelu";
  static constexpr const char* inputs[] = {"x"};
  static void forward(ForwardContext<T>& ctx, const TensorT<T>& a) {
    gelu_values(a, ctx.output(a.shape()));
  }
  static void backward(BackwardContext<T>& ctx, const OpInput<T>& a) {
    a.grad.add_parallel([&](Index from, Index count) {
      const auto x = a.value.array().segment(from, count);
      return ctx.grad_output().array().segment(from, count) * (normal_cdf(x) + x * normal_pdf(x));
    }, kErfCost);
  }
};

// C = e^A;  dA += dC C
template <class T>
struct Exp {
  static constexpr const char* name = "exp";
  static constexpr const char* inputs[] = {"x"};
  static void forward(ForwardContext<T>& ctx, const TensorT<T>& a) { ctx.output(a.shape()).array() = a.array().exp(); }
  static void backward(BackwardContext<T>& ctx, const OpInput<T>& a) {
    a.grad.add(ctx.grad_output().array() * ctx.output().array());
  }
};

// C = log A (NaN for A < 0, -Inf at 0, as std::log);  dA += dC / A
template <class T>
struct Log {
  static constexpr const char* name = "log";
  static constexpr const char* inputs[] = {"x"};
  static void forward(ForwardContext<T>& ctx, const TensorT<T>& a) { ctx.output(a.shape()).array() = a.array().log(); }
  static void backward(BackwardContext<T>& ctx, const OpInput<T>& a) {
    a.grad.add(ctx.grad_output().array() / a.value.array());
  }
};

// C = sqrt(A) (NaN for A < 0);  dA += dC / (2 C)  (Inf at A = 0, where the slope is unbounded)
template <class T>
struct Sqrt {
  static constexpr const char* name = "sqrt";
  static constexpr const char* inputs[] = {"x"};
  static void forward(ForwardContext<T>& ctx, const TensorT<T>& a) { ctx.output(a.shape()).array() = a.array().sqrt(); }
  static void backward(BackwardContext<T>& ctx, const OpInput<T>& a) {
    a.grad.add(ctx.grad_output().array() * T(0.5) / ctx.output().array());
  }
};

// C = 1 / (1 + e^-A);  dA += dC C (1 - C)
template <class T>
struct Sigmoid {
  static constexpr const char* name = "sigmoid";
  static constexpr const char* inputs[] = {"x"};
  // e^-A overflows to Inf for very negative A, giving exactly 0, and underflows to 0 for large A, giving
  // 1: no NaN either way.
  static void forward(ForwardContext<T>& ctx, const TensorT<T>& a) {
    ctx.output(a.shape()).array() = T(1) / (T(1) + (-a.array()).exp());
  }
  static void backward(BackwardContext<T>& ctx, const OpInput<T>& a) {
    const auto C = ctx.output().array();
    a.grad.add(ctx.grad_output().array() * C * (T(1) - C));
  }
};

// sum: C = sum(A), dA += dC;  mean: C = sum(A) / N, dA += dC / N (every element). `Mean` says which.
template <class T, bool Mean>
struct ReduceAll {
  static constexpr const char* name = Mean ? "mean" : "sum";
  static constexpr const char* inputs[] = {"x"};
  static void forward(ForwardContext<T>& ctx, const TensorT<T>& a) {
    if (Mean && a.numel() == 0) fail<ShapeError>("{}: x is {}, which has no elements to average", name, a.shape());
    ctx.output(Shape::scalar())[0] = Mean ? a.array().mean() : a.array().sum();
  }
  static void backward(BackwardContext<T>& ctx, const OpInput<T>& a) {
    const T g = Mean ? ctx.grad_output()[0] / static_cast<T>(a.value.numel()) : ctx.grad_output()[0];
    a.grad.add(Eigen::Array<T, Eigen::Dynamic, 1>::Constant(a.value.numel(), g));
  }
};

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
// Declared with exp, log, sqrt and sigmoid in ops.hpp; a binary op beside add, whose broadcasting it shares.
template <class T>
Var<T> div(Var<T> a, Var<T> b, Where where) {
  return binary("div", Binary::div, a, b, where);
}

template <class T>
Var<T> scale(Var<T> a, double factor, Where where) {
  return apply(Scale<T>{.factor = factor}, {a}, where);
}
template <class T>
Var<T> relu(Var<T> a, Where where) {
  return apply(Relu<T>{}, {a}, where);
}
template <class T>
Var<T> tanh(Var<T> a, Where where) {
  return apply(Tanh<T>{}, {a}, where);
}
template <class T>
Var<T> gelu(Var<T> a, Where where) {
  return apply(Gelu<T>{}, {a}, where);
}
template <class T>
Var<T> exp(Var<T> a, Where where) {
  return apply(Exp<T>{}, {a}, where);
}
template <class T>
Var<T> log(Var<T> a, Where where) {
  return apply(Log<T>{}, {a}, where);
}
template <class T>
Var<T> sqrt(Var<T> a, Where where) {
  return apply(Sqrt<T>{}, {a}, where);
}
template <class T>
Var<T> sigmoid(Var<T> a, Where where) {
  return apply(Sigmoid<T>{}, {a}, where);
}
template <class T>
Var<T> sum(Var<T> a, Where where) {
  return apply(ReduceAll<T, false>{}, {a}, where);
}
template <class T>
Var<T> mean(Var<T> a, Where where) {
  return apply(ReduceAll<T, true>{}, {a}, where);
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
    if (const auto dA = tp.input_node(node, 0).grad_whole())
      for (Index i = 0; i < dA.grad->batch(); ++i) write_grad(dA.grad->mat(i), node.grad.mat(i).transpose(), dA.assign);
  };
  return t.commit(n);
}

#define TAPEGRAD_INSTANTIATE(T)                      \
  template Var<T> add(Var<T>, Var<T>, Where);        \
  template Var<T> sub(Var<T>, Var<T>, Where);        \
  template Var<T> mul(Var<T>, Var<T>, Where);        \
  template Var<T> div(Var<T>, Var<T>, Where);        \
  template Var<T> scale(Var<T>, double, Where);      \
  template Var<T> relu(Var<T>, Where);               \
  template Var<T> tanh(Var<T>, Where);               \
  template Var<T> gelu(Var<T>, Where);               \
  template Var<T> exp(Var<T>, Where);                \
  template Var<T> log(Var<T>, Where);                \
  template Var<T> sqrt(Var<T>, Where);               \
  template Var<T> sigmoid(Var<T>, Where);            \
  template Var<T> sum(Var<T>, Where);                \
  template Var<T> mean(Var<T>, Where);               \
  template Var<T> transpose(Var<T>, Where);
TAPEGRAD_INSTANTIATE(float)
TAPEGRAD_INSTANTIATE(double)
#undef TAPEGRAD_INSTANTIATE  // each file its own: the library is built several files to a unit

}  // namespace tapegrad
