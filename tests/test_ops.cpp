// autograd/ops: forward values (against naive loops and hand-computed numbers) and every shape or
// value error, checked for its message.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/parallel.hpp"
#include "helpers.hpp"

using namespace tapegrad;
using test::random_tensor;

namespace {

// C = op(A) op(B) by a triple loop, independent of Eigen's products. transpose_a / transpose_b say
// how the operands are read; a 2-D b is shared by every batch item of a.
TensorD naive_product(const TensorD& A, const TensorD& B, bool transpose_a, bool transpose_b) {
  const Index batch = A.batch();
  const Index m = transpose_a ? A.cols() : A.rows(), k = transpose_a ? A.rows() : A.cols();
  const Index n = transpose_b ? B.rows() : B.cols();
  TensorD C(A.rank() == 3 ? Shape::batched(batch, m, n) : Shape::mat(m, n));
  for (Index b = 0; b < batch; ++b)
    for (Index i = 0; i < m; ++i)
      for (Index j = 0; j < n; ++j) {
        double s = 0;
        const Index bb = B.rank() == 3 ? b : 0;
        for (Index p = 0; p < k; ++p)
          s += (transpose_a ? A.at(b, p, i) : A.at(b, i, p)) * (transpose_b ? B.at(bb, j, p) : B.at(bb, p, j));
        C.at(b, i, j) = s;
      }
  return C;
}

}  // namespace

TEST_CASE("ops: matmul, matmul_bt and matmul_at match a naive triple loop in every layout") {
  Rng rng(1);
  Tape<double> t;
  struct Layout {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Layout> layouts = {
      {Shape::mat(3, 4), Shape::mat(4, 5), false, false},          {Shape::mat(3, 4), Shape::mat(5, 4), false, true},
      {Shape::mat(4, 3), Shape::mat(4, 5), true, false},           {Shape::batched(2, 3, 4), Shape::batched(2, 4, 5), false, false},
      {Shape::batched(2, 3, 4), Shape::batched(2, 5, 4), false, true}, {Shape::batched(2, 4, 3), Shape::batched(2, 4, 5), true, false},
      {Shape::batched(2, 3, 4), Shape::mat(4, 5), false, false},    {Shape::batched(2, 3, 4), Shape::mat(5, 4), false, true},
      // Several blocks of libxsmm's grid (autograd/gemm.cpp), several panels of Eigen's GEMM.
      {Shape::mat(70, 80), Shape::mat(80, 60), false, false},       {Shape::batched(2, 70, 80), Shape::batched(2, 60, 80), false, true},
      {Shape::batched(2, 80, 70), Shape::batched(2, 80, 60), true, false},
  };
  for (const auto& l : layouts) {
    CAPTURE(l.a);
    CAPTURE(l.b);
    const TensorD A = random_tensor(l.a, rng), B = random_tensor(l.b, rng);
    Var<double> a = t.constant(A), b = t.constant(B);
    Var<double> c = l.ta ? matmul_at(a, b) : l.tb ? matmul_bt(a, b) : matmul(a, b);
    CHECK_TENSOR_NEAR(c.value(), naive_product(A, B, l.ta, l.tb), 1e-13, 1e-13);
  }
}

TEST_CASE("ops: add, sub and mul broadcast a row over all rows and a matrix over the batch") {
  Tape<double> t;
  Var<double> a = t.constant(TensorD(Shape::batched(2, 2, 2), {1, 2, 3, 4, 5, 6, 7, 8}));
  Var<double> row = t.constant(TensorD(Shape::vec(2), {10, 20}));
  Var<double> row2 = t.constant(TensorD(Shape::mat(1, 2), {10, 20}));
  Var<double> m = t.constant(TensorD(Shape::mat(2, 2), {1, 0, 0, 2}));
  CHECK(add(a, row).value() == TensorD(Shape::batched(2, 2, 2), {11, 22, 13, 24, 15, 26, 17, 28}));
  CHECK(add(a, row2).value() == add(a, row).value());
  CHECK(sub(a, row).value() == TensorD(Shape::batched(2, 2, 2), {-9, -18, -7, -16, -5, -14, -3, -12}));
  CHECK(mul(a, m).value() == TensorD(Shape::batched(2, 2, 2), {1, 0, 0, 8, 5, 0, 0, 16}));
  CHECK(mul(a, a).value() == TensorD(Shape::batched(2, 2, 2), {1, 4, 9, 16, 25, 36, 49, 64}));
}

TEST_CASE("ops: activations, scale, reductions and transpose give the textbook values") {
  Tape<double> t;
  Var<double> x = t.constant(TensorD(Shape::mat(1, 3), {-1, 0, 1}));
  CHECK(relu(x).value() == TensorD(Shape::mat(1, 3), {0, 0, 1}));
  CHECK(scale(x, -2.5).value() == TensorD(Shape::mat(1, 3), {2.5, 0, -2.5}));
  CHECK(tanh(x).value()[2] == doctest::Approx(std::tanh(1.0)).epsilon(1e-15));
  // gelu(x) = x Phi(x): Phi(1) = 0.841344746068543, Phi(-1) = 0.158655253931457
  CHECK(gelu(x).value()[0] == doctest::Approx(-0.158655253931457).epsilon(1e-13));
  CHECK(gelu(x).value()[1] == 0);
  CHECK(gelu(x).value()[2] == doctest::Approx(0.841344746068543).epsilon(1e-13));
  CHECK(sum(x).value() == TensorD(Shape::scalar(), {0}));
  CHECK(mean(t.constant(TensorD(Shape::vec(4), {1, 2, 3, 6}))).value()[0] == 3);
  Var<double> m = t.constant(TensorD(Shape::batched(2, 1, 2), {1, 2, 3, 4}));
  CHECK(transpose(m).value() == TensorD(Shape::batched(2, 2, 1), {1, 2, 3, 4}));
  CHECK(transpose(t.constant(TensorD(Shape::mat(2, 3), {1, 2, 3, 4, 5, 6}))).value() ==
        TensorD(Shape::mat(3, 2), {1, 4, 2, 5, 3, 6}));
}

TEST_CASE("ops: softmax_rows normalises rows, zeroes blocked entries and fully blocked rows") {
  Tape<double> t;
  Var<double> x = t.constant(TensorD(Shape::mat(2, 2), {0, std::log(2.0), 5, 5}));
  const TensorD& y = softmax_rows(x).value();
  CHECK(y[0] == doctest::Approx(1.0 / 3).epsilon(1e-15));
  CHECK(y[1] == doctest::Approx(2.0 / 3).epsilon(1e-15));
  CHECK(y[2] == 0.5);

  // Large scores must not overflow: the row maximum is subtracted first.
  CHECK(all_finite(softmax_rows(t.constant(TensorD(Shape::mat(1, 2), {1000, 1001}))).value()));

  Rng rng(2);
  Var<double> s = t.constant(random_tensor(Shape::batched(2, 3, 3), rng, 3.0));
  Mask causal(Shape::mat(3, 3), {0, 1, 1, 0, 0, 1, 0, 0, 0});
  const TensorD& p = softmax_rows(s, &causal).value();
  for (Index b = 0; b < 2; ++b)
    for (Index r = 0; r < 3; ++r) {
      CHECK(p.mat(b).row(r).sum() == doctest::Approx(1.0).epsilon(1e-14));
      for (Index c = r + 1; c < 3; ++c) CHECK(p.at(b, r, c) == 0.0);
    }
  CHECK(p.at(1, 0, 0) == 1.0);  // only itself visible

  Mask full(Shape::batched(2, 3, 3), 0);
  for (Index c = 0; c < 3; ++c) full.at(1, 2, c) = 1;  // row 2 of item 1 blocked entirely
  const TensorD& q = softmax_rows(s, &full).value();
  CHECK(q.mat(1).row(2).isZero(0.0));
  CHECK(q.mat(0).row(2).sum() == doctest::Approx(1.0).epsilon(1e-14));
}

TEST_CASE("ops: softmax_rows never hides a NaN or Inf, masked or not") {
  // A NaN row is not a fully blocked row: with or without a mask, its open outputs are NaN.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const TensorD& x : {TensorD(Shape::mat(1, 3), {nan, nan, nan}), TensorD(Shape::mat(1, 3), {1, nan, 2}),
                           TensorD(Shape::mat(1, 3), {inf, 1, 2})}) {
    CAPTURE(x[0]);
    CAPTURE(x[1]);
    Tape<double> t;
    const Mask none(Shape::mat(1, 3)), last(Shape::mat(1, 3), {0, 0, 1}), all(Shape::mat(1, 3), {1, 1, 1});
    CHECK_FALSE(all_finite(softmax_rows(t.constant(x)).value()));
    CHECK_FALSE(all_finite(softmax_rows(t.constant(x), &none).value()));
    const TensorD& masked = softmax_rows(t.constant(x), &last, 0.5).value();
    CHECK(std::isnan(masked[0]));
    CHECK(masked[2] == 0.0);  // blocked stays exactly 0
    CHECK(softmax_rows(t.constant(x), &all).value().array().isZero(0.0));  // fully blocked: zeros, whatever it held
  }
}

// A masked row as softmax_rows computed it before it skipped blocked tails: the exponentials of the whole
// row in one Eigen pass, the blocked ones set to 0, the whole row's sum, a division.
template <class T>
TensorT<T> whole_row_softmax(const TensorT<T>& x, const Mask& mask, T k) {
  TensorT<T> y(x.shape());
  for (Index r = 0; r < x.shape().flat_rows(); ++r) {
    const T* xr = x.data() + r * x.cols();
    const std::uint8_t* blocked = mask.data() + (r % mask.rows()) * x.cols();
    ArrayMap<T> Y(y.data() + r * x.cols(), x.cols());
    T top = -std::numeric_limits<T>::infinity();
    for (Index c = 0; c < x.cols(); ++c)
      if (!blocked[c]) top = std::max(top, k * xr[c]);
    if (top == -std::numeric_limits<T>::infinity()) {
      Y.setZero();
      continue;
    }
    Y = (k * ConstArrayMap<T>(xr, x.cols()) - top).exp();
    for (Index c = 0; c < x.cols(); ++c)
      if (blocked[c]) Y[c] = 0;
    Y /= Y.sum();
  }
  return y;
}

TEST_CASE_TEMPLATE("ops: softmax_rows skips a row's blocked tail and changes no bit of it", T, float, double) {
  // Past a row's last open key no exponential is taken; those taken fall in the same vector packets as
  // a pass over the whole row (Eigen's vector and scalar exp differ in the last bit), so every value is
  // the whole row's. Rows of 150 (not whole packets), causal with key padding, one fully blocked row.
  // A NaN or Inf where the mask blocks (a padded key's garbage) reaches no output.
  Rng rng(47);
  const Index tq = 150;
  TensorT<T> x = random_tensor<T>(Shape::batched(2, tq, tq), rng, 3.0);
  x.at(0, 10, 11) = std::numeric_limits<T>::quiet_NaN();
  x.at(1, 20, 149) = std::numeric_limits<T>::infinity();
  Mask mask(Shape::mat(tq, tq));
  for (Index r = 0; r < tq; ++r)
    for (Index c = 0; c < tq; ++c) mask.at(r, c) = c > r || c >= tq - 7 || r == 3;
  Tape<T> t;
  const TensorT<T>& y = softmax_rows(t.constant(x), &mask, 0.4).value();
  CHECK(all_finite(y));
  CHECK(y == whole_row_softmax<T>(x, mask, T(0.4)));
}

TEST_CASE("ops: softmax_rows with a fused scale equals scale then softmax, forward and backward") {
  Rng rng(33);
  const TensorD x = random_tensor(Shape::batched(2, 5, 5), rng, 2.0);
  const TensorD seed = random_tensor(Shape::batched(2, 5, 5), rng);
  Mask causal(Shape::mat(5, 5));
  for (Index r = 0; r < 5; ++r)
    for (Index c = r + 1; c < 5; ++c) causal.at(r, c) = 1;
  for (const Mask* mask : {static_cast<const Mask*>(nullptr), static_cast<const Mask*>(&causal)}) {
    Tape<double> t1, t2;
    Var<double> a = t1.input(x), b = t2.input(x);
    Var<double> fused = softmax_rows(a, mask, 0.3);
    Var<double> composed = softmax_rows(scale(b, 0.3), mask);
    // The same maths; the compiler may fuse s x - s max(x) into one multiply-add, so equal to rounding.
    CHECK_TENSOR_NEAR(fused.value(), composed.value(), 1e-16, 1e-14);
    t1.backward(fused, seed);
    t2.backward(composed, seed);
    CHECK_TENSOR_NEAR(a.grad(), b.grad(), 1e-15, 1e-13);  // the same up to the order of one product
  }
  Tape<double> t;
  CHECK_THROWS_WITH_AS(softmax_rows(t.constant(x), nullptr, -1.0), "softmax_rows: the scale must be positive and finite, got -1",
                       ValueError);
}

TEST_CASE("ops: log_softmax_rows is the log of softmax_rows, stable for large scores") {
  Tape<double> t;
  Rng rng(3);
  Var<double> x = t.constant(random_tensor(Shape::mat(3, 4), rng, 2.0));
  TensorD expected = softmax_rows(x).value();
  expected.array() = expected.array().log();
  CHECK_TENSOR_NEAR(log_softmax_rows(x).value(), expected, 1e-14, 1e-13);
  const TensorD& big = log_softmax_rows(t.constant(TensorD(Shape::mat(1, 2), {1000, 1000}))).value();
  CHECK(big[0] == doctest::Approx(-std::log(2.0)).epsilon(1e-15));
}

TEST_CASE("ops: cross_entropy is the mean over labelled rows of -log p(target)") {
  Tape<double> t;
  // Row 0: uniform over 2 classes -> log 2. Row 1: ignored. Row 2: logits (0, ln 3) target 1 -> -log(3/4).
  Var<double> logits = t.constant(TensorD(Shape::mat(3, 2), {0, 0, 7, -7, 0, std::log(3.0)}));
  Ids targets(Shape::vec(3), {0, kIgnoreLabel, 1});
  const double expected = (std::log(2.0) - std::log(0.75)) / 2;
  CHECK(cross_entropy(logits, targets).value()[0] == doctest::Approx(expected).epsilon(1e-15));
  // Batched logits take (B, T) targets; a custom ignore label works; all ignored gives 0.
  Var<double> batched = t.constant(TensorD(Shape::batched(1, 3, 2), {0, 0, 7, -7, 0, std::log(3.0)}));
  CHECK(cross_entropy(batched, Ids(Shape::mat(1, 3), {0, -1, 1}), -1).value()[0] ==
        doctest::Approx(expected).epsilon(1e-15));
  CHECK(cross_entropy(logits, Ids(Shape::vec(3), {-100, -100, -100})).value()[0] == 0);
  // A confidently wrong row: exp(x[t] - max) underflows in float, yet the loss is exact (300).
  Tape<float> tf;
  Var<float> sure = tf.constant(Tensor(Shape::mat(1, 2), {300.0f, 0.0f}));
  CHECK(cross_entropy(sure, Ids(Shape::vec(1), {1})).value()[0] == doctest::Approx(300.0).epsilon(1e-6));
}

TEST_CASE("ops: a batch whose every target is ignored gives a zero gradient, also after a labelled batch") {
  // Before: the rule took the logits' gradient for writing and returned without writing it, so an
  // intermediate's buffer kept the last pass's values and passed them on as this pass's gradient.
  Tape<double> tape;
  const TensorD x(Shape::mat(2, 3), {1, 2, 3, 4, 5, 6});
  for (int pass = 0; pass < 2; ++pass) {
    tape.reset();
    Var<double> xv = tape.input(x);
    Var<double> logits = scale(xv, 2.0);  // an intermediate: its gradient buffer is reused pass to pass
    const Ids targets(Shape::vec(2), pass == 0 ? std::vector<std::int32_t>{0, 2}
                                               : std::vector<std::int32_t>{kIgnoreLabel, kIgnoreLabel});
    Var<double> loss = cross_entropy(logits, targets);
    tape.backward(loss);
    if (pass == 1) {
      CHECK(loss.value()[0] == 0);
      CHECK(xv.grad() == TensorD(Shape::mat(2, 3)));
    }
  }
}

TEST_CASE("ops: the operators on Var are the named ops, bit for bit, and record the caller's line") {
  Rng rng(71);
  Tape<float> t;
  const Tensor av = random_tensor<float>(Shape::batched(2, 3, 4), rng), bv = random_tensor<float>(Shape::vec(4), rng);
  Var<float> a = t.input(av), b = t.input(bv);
  CHECK((a + b).value() == add(a, b).value());  // b a row broadcast over a, as add takes it
  CHECK((a - b).value() == sub(a, b).value());
  CHECK((a * b).value() == mul(a, b).value());
  CHECK((a / b).value() == div(a, b).value());
  CHECK((-a).value() == scale(a, -1).value());
  CHECK((a * 3).value() == scale(a, 3).value());
  CHECK((3 * a).value() == scale(a, 3).value());
  // A number on either side, in a's type: the same values as the arithmetic on each element.
  const Tensor plus = (a + 0.5).value(), plus_left = (0.5 + a).value(), minus = (a - 0.5).value(),
               minus_left = (0.5 - a).value(), over = (a / 3).value(), under = (3.0f / a).value();
  for (Index i = 0; i < av.numel(); ++i) {
    CHECK(plus[i] == av[i] + 0.5f);
    CHECK(plus_left[i] == 0.5f + av[i]);
    CHECK(minus[i] == av[i] - 0.5f);
    CHECK(minus_left[i] == 0.5f - av[i]);
    CHECK(over[i] == av[i] / 3.0f);
    CHECK(under[i] == 3.0f / av[i]);
  }
  // SwiGLU's gate as every paper writes it.
  Var<float> gate = a * sigmoid(a) * a;
  CHECK(gate.value() == mul(mul(a, sigmoid(a)), a).value());
  // The line recorded is the expression's, as for a named op.
  t.set_anomaly_detection(true);
  Var<float> zero = t.input(Tensor(Shape::vec(2), {0.0f, 1.0f}));
  const int line = __LINE__ + 1;
  const auto divide = [&] { return 1 / zero; };
  CHECK_THROWS_WITH_AS(divide(), fmt::format("anomaly: scalar_div (recorded at tests/test_ops.cpp:{}) produced a "
                                             "non-finite value (NaN or Inf) in its 2 output",
                                             line)
                                     .c_str(),
                       NonFiniteError);
  CHECK_THROWS_WITH_AS(a + t.input(Tensor(Shape::mat(3, 4))) * zero,
                       "mul: shapes do not broadcast: a is 3x4, b is 2 (b must be 3x4, a row of 4 values, or a 3x1 "
                       "column)",
                       ShapeError);
}

TEST_CASE("ops: a Parameter on the right of an operator is read on the left operand's tape, as tape.param") {
  Rng rng(72);
  Parameter<double> gain("norm.gain", random_tensor<double>(Shape::vec(4), rng));
  const TensorD xv = random_tensor<double>(Shape::batched(2, 3, 4), rng);
  const auto loss_of = [&](bool as_operand, Tape<double>& t) {
    Var<double> x = t.input(xv);
    Var<double> y =
        as_operand ? x * gain / gain + gain - gain : x * t.param(gain) / t.param(gain) + t.param(gain) - t.param(gain);
    return sum(y * y);
  };
  Tape<double> named, operand;
  gain.zero_grad();
  Var<double> expected = loss_of(false, named);
  named.backward(expected);
  const TensorD by_param = gain.grad;
  gain.zero_grad();
  Var<double> loss = loss_of(true, operand);
  CHECK(loss.value() == expected.value());
  operand.backward(loss);
  CHECK(gain.grad == by_param);                    // the gradient reaches the parameter, bit for bit
  REQUIRE(operand.parameters_read().size() == 4);  // a read per use, as tape.param records it
  CHECK(operand.parameters_read()[0] == &gain);
  // The left operand decides the tape: a Var on none is refused as the named op refuses it.
  CHECK_THROWS_WITH(Var<double>{} * gain, "mul: a is an empty Var (default-constructed)");
  // The parameter's node records the caller's line, as tape.param does.
  Tape<double> t;
  const int line = __LINE__ + 1;
  Var<double> y = t.input(xv) + gain;
  CHECK(Tape<double>::describe(t.node_at(1)) == fmt::format("parameter 'norm.gain' (read at tests/test_ops.cpp:{})", line));
  CHECK(Tape<double>::describe(t.node_at(2)) == fmt::format("add (recorded at tests/test_ops.cpp:{})", line));
  // A refused left operand leaves the tape as it was: the parameter is read once the operand is checked.
  t.reset();
  CHECK_THROWS_WITH(y / gain, "div: a was recorded before the last reset() of its tape; record it again");
  CHECK(t.size() == 0);
  CHECK(t.parameters_read().empty());
}

TEST_CASE("ops: mse, slice_cols, concat_cols and gather_rows") {
  Tape<double> t;
  Var<double> a = t.constant(TensorD(Shape::mat(1, 2), {1, 2}));
  Var<double> b = t.constant(TensorD(Shape::mat(1, 2), {3, 5}));
  CHECK(mse(a, b).value()[0] == (4.0 + 9.0) / 2);

  Var<double> x = t.constant(TensorD(Shape::batched(2, 1, 4), {1, 2, 3, 4, 5, 6, 7, 8}));
  Var<double> left = slice_cols(x, 0, 1), right = slice_cols(x, 1, 3);
  CHECK(right.value() == TensorD(Shape::batched(2, 1, 3), {2, 3, 4, 6, 7, 8}));
  const std::vector<Var<double>> parts = {right, left};
  CHECK(concat_cols<double>(parts).value() == TensorD(Shape::batched(2, 1, 4), {2, 3, 4, 1, 6, 7, 8, 5}));

  Var<double> table = t.constant(TensorD(Shape::mat(3, 2), {0, 1, 10, 11, 20, 21}));
  CHECK(gather_rows(table, Ids(Shape::vec(3), {2, 0, 2})).value() == TensorD(Shape::mat(3, 2), {20, 21, 0, 1, 20, 21}));
  CHECK(gather_rows(table, Ids(Shape::mat(2, 1), {1, 1})).value() == TensorD(Shape::batched(2, 1, 2), {10, 11, 10, 11}));
}

TEST_CASE("ops: shape errors of the products name both operands") {
  Tape<double> t;
  auto v = [&](Shape s) { return t.constant(TensorD(s)); };
  CHECK_THROWS_WITH_AS(matmul(v(Shape::mat(4, 8)), v(Shape::mat(6, 8))),
                       "matmul: inner dimensions differ: a is 4x8, b is 6x8", ShapeError);
  CHECK_THROWS_WITH_AS(matmul_bt(v(Shape::mat(4, 8)), v(Shape::mat(6, 5))),
                       "matmul_bt: inner dimensions differ: a is 4x8, b is 6x5 (a b^T pairs the columns of a with the "
                       "columns of b)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(matmul_at(v(Shape::mat(4, 8)), v(Shape::mat(5, 3))),
                       "matmul_at: inner dimensions differ: a is 4x8, b is 5x3 (a^T b pairs the rows of a with the "
                       "rows of b)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(matmul(v(Shape::vec(8)), v(Shape::mat(8, 3))),
                       "matmul: a is 8 and b is 8x3; both must be matrices (2-D) or batches of matrices (3-D)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(matmul(v(Shape::mat(4, 8)), v(Shape::batched(2, 8, 3))),
                       "matmul: a is 4x8 (one matrix) but b is 2x8x3 (a batch); put the batched operand first",
                       ShapeError);
  CHECK_THROWS_WITH_AS(matmul(v(Shape::batched(2, 4, 8)), v(Shape::batched(3, 8, 5))),
                       "matmul: batch sizes differ: a is 2x4x8, b is 3x8x5", ShapeError);
  CHECK_THROWS_WITH_AS(matmul_at(v(Shape::batched(2, 4, 8)), v(Shape::mat(4, 3))),
                       "matmul_at: a is 2x4x8 (a batch) and b is 4x3 (one matrix); a^T b needs both batched or both 2-D",
                       ShapeError);
  CHECK_THROWS_WITH_AS(affine(v(Shape::batched(2, 4, 8)), v(Shape::mat(6, 3)), v(Shape::vec(3))),
                       "affine: inner dimensions differ: x is 2x4x8, w is 6x3", ShapeError);
  CHECK_THROWS_WITH_AS(affine(v(Shape::mat(4, 8)), v(Shape::batched(2, 8, 3)), v(Shape::vec(3))),
                       "affine: x is 4x8 and w is 2x8x3; x must be a matrix or a batch of matrices and w a matrix",
                       ShapeError);
  CHECK_THROWS_WITH_AS(affine(v(Shape::vec(8)), v(Shape::mat(8, 3)), v(Shape::vec(3))),
                       "affine: x is 8 and w is 8x3; x must be a matrix or a batch of matrices and w a matrix", ShapeError);
  CHECK_THROWS_WITH_AS(affine(v(Shape::mat(4, 8)), v(Shape::mat(8, 3)), v(Shape::vec(4))),
                       "affine: b is 4 but x w has 3 columns; b must be a row of 3 values (3 or 1x3)", ShapeError);
  CHECK_THROWS_WITH_AS(affine(v(Shape::mat(4, 8)), v(Shape::mat(8, 3)), v(Shape::mat(4, 3))),
                       "affine: b is 4x3 but x w has 3 columns; b must be a row of 3 values (3 or 1x3)", ShapeError);
  const Var<double> x = v(Shape::mat(4, 8)), w = v(Shape::mat(8, 3)), bad_b = v(Shape::vec(4));
  const std::size_t before = t.size();
  CHECK_THROWS_AS(affine(x, w, bad_b), ShapeError);
  CHECK(t.size() == before);  // a refused op records nothing
  Tape<double> other;  // a weight from another tape is refused by name, before any shape is read
  const Var<double> foreign_w = other.constant(TensorD(Shape::mat(8, 3)));
  CHECK_THROWS_AS(affine(x, foreign_w, v(Shape::vec(3))), UsageError);
  try {
    affine(x, foreign_w, v(Shape::vec(3)));
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).starts_with("affine: w "));
  }
}

TEST_CASE("ops: the broadcast operand may stand on either side, with the bits of the mirrored form") {
  // add and mul commute bit for bit, a - b is -(b - a) exactly and a / b is each element's quotient: so a row,
  // a batch-shared matrix or a column on the left gives the values, and the gradients, of the form with it
  // on the right.
  Rng rng(3);
  const std::pair<Shape, Shape> cases[] = {{Shape::vec(4), Shape::batched(2, 3, 4)},
                                           {Shape::mat(3, 4), Shape::batched(2, 3, 4)},
                                           {Shape::batched(2, 3, 1), Shape::batched(2, 3, 4)},
                                           {Shape::mat(3, 1), Shape::mat(3, 4)}};
  for (const auto& shapes : cases) {
    const Shape small = shapes.first, full = shapes.second;  // (not a structured binding: clang 14's lambdas)
    CAPTURE(small);
    const TensorD s = random_tensor<double>(small, rng), f = random_tensor<double>(full, rng);
    // Each pair: the op with the small operand on the left, and its mirrored form; their values, and the
    // gradients of both inputs of sum(op * w), bit for bit.
    const TensorD w = random_tensor<double>(full, rng);
    auto both = [&](auto left, auto mirrored) {
      Tape<double> t;
      Var<double> ls = t.input(s), lf = t.input(f), ms = t.input(s), mf = t.input(f);
      Var<double> l = left(ls, lf), m = mirrored(ms, mf);
      CHECK(l.value().shape() == full);
      CHECK(l.value() == m.value());
      t.backward(add(sum(mul(l, t.constant(w))), sum(mul(m, t.constant(w)))));
      CHECK(ls.grad() == ms.grad());
      CHECK(lf.grad() == mf.grad());
    };
    both([](auto a, auto b) { return add(a, b); }, [](auto a, auto b) { return add(b, a); });
    both([](auto a, auto b) { return mul(a, b); }, [](auto a, auto b) { return mul(b, a); });
    both([](auto a, auto b) { return sub(a, b); }, [](auto a, auto b) { return scale(sub(b, a), -1.0); });
    // s / f has no mirrored op: its values are each element's quotient, s spread to f's shape first (0 + s,
    // exact); its gradients are the catalogue's gradchecks.
    Tape<double> t;
    const TensorD q = div(t.constant(s), t.constant(f)).value();
    const TensorD spread = add(t.constant(TensorD(full)), t.constant(s)).value();
    REQUIRE(q.shape() == full);
    for (Index i = 0; i < q.numel(); ++i) CHECK(q[i] == spread[i] / f[i]);
  }
}

TEST_CASE("ops: shape errors of the elementwise ops say which shapes would broadcast") {
  Tape<double> t;
  auto v = [&](Shape s) { return t.constant(TensorD(s)); };
  CHECK_THROWS_WITH_AS(add(v(Shape::batched(2, 4, 8)), v(Shape::mat(3, 8))),
                       "add: shapes do not broadcast: a is 2x4x8, b is 3x8 (b must be 2x4x8, a row of 8 values, a "
                       "4x8 matrix shared by the batch, or a 2x4x1 column)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(sub(v(Shape::mat(4, 8)), v(Shape::mat(4, 7))),
                       "sub: shapes do not broadcast: a is 4x8, b is 4x7 (b must be 4x8, a row of 8 values, or a 4x1 column)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(mul(v(Shape::mat(4, 8)), v(Shape::vec(4))),
                       "mul: shapes do not broadcast: a is 4x8, b is 4 (b must be 4x8, a row of 8 values, or a 4x1 column)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(div(v(Shape::batched(2, 4, 8)), v(Shape::batched(2, 1, 8))),
                       "div: shapes do not broadcast: a is 2x4x8, b is 2x1x8 (b must be 2x4x8, a row of 8 values, a "
                       "4x8 matrix shared by the batch, or a 2x4x1 column)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(add(v(Shape::vec(8)), v(Shape::vec(3))),
                       "add: shapes do not broadcast: a is 8, b is 3 (b must be 8, a row of 8 values, or a single value)",
                       ShapeError);
  // When a is the smaller operand, the message says what a may be.
  CHECK_THROWS_WITH_AS(mul(v(Shape::vec(3)), v(Shape::batched(2, 4, 8))),
                       "mul: shapes do not broadcast: a is 3, b is 2x4x8 (a must be 2x4x8, a row of 8 values, a 4x8 "
                       "matrix shared by the batch, or a 2x4x1 column)",
                       ShapeError);
  // A column needs a's leading dimensions, in a's rank.
  CHECK_THROWS_AS(add(v(Shape::batched(2, 4, 8)), v(Shape::mat(8, 1))), ShapeError);
  CHECK_THROWS_AS(mul(v(Shape::mat(4, 8)), v(Shape::mat(3, 1))), ShapeError);
  CHECK_THROWS_WITH_AS(transpose(v(Shape::vec(5))),
                       "transpose: x is a vector of 5; transpose needs a 2-D or batched 3-D x", ShapeError);
  CHECK_THROWS_WITH_AS(mean(v(Shape::mat(0, 3))), "mean: x is 0x3, which has no elements to average", ShapeError);
  CHECK_THROWS_WITH_AS(mse(v(Shape::mat(4, 3)), v(Shape::mat(4, 2))),
                       "mse: a is 4x3 but b is 4x2; they must have the same shape", ShapeError);
  CHECK_THROWS_WITH_AS(mse(v(Shape::mat(0, 2)), v(Shape::mat(0, 2))),
                       "mse: a and b are 0x2, with no elements to average", ShapeError);
}

TEST_CASE("ops: softmax, loss and indexing errors name the shapes, ids and targets") {
  Tape<double> t;
  auto v = [&](Shape s) { return t.constant(TensorD(s)); };
  Mask m(Shape::mat(3, 3));
  CHECK_THROWS_WITH_AS(softmax_rows(v(Shape::batched(2, 4, 4)), &m),
                       "softmax_rows: the mask is 3x3 but x is 2x4x4; the mask must be 4x4 (shared by the batch) or "
                       "2x4x4",
                       ShapeError);
  CHECK_THROWS_WITH_AS(log_softmax_rows(v(Shape::mat(4, 0))),
                       "log_softmax_rows: x is 4x0; its rows have no entries to normalise", ShapeError);
  CHECK_THROWS_WITH_AS(cross_entropy(v(Shape::vec(5)), Ids(Shape::vec(1))),
                       "cross_entropy: logits are a vector of 5; they must be (rows, classes) or (batch, rows, classes)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(cross_entropy(v(Shape::mat(4, 0)), Ids(Shape::vec(4))),
                       "cross_entropy: logits are 4x0, with no classes", ShapeError);
  CHECK_THROWS_WITH_AS(cross_entropy(v(Shape::batched(2, 4, 5)), Ids(Shape::vec(12))),
                       "cross_entropy: targets are 12 but logits are 2x4x5; give one target per row: 2x4", ShapeError);
  CHECK_THROWS_WITH_AS(cross_entropy(v(Shape::mat(4, 5)), Ids(Shape::vec(4), {0, 1, 2, 7})),
                       "cross_entropy: target 7 at row 3 is outside [0, 5) and is not the ignore label -100",
                       ValueError);
  CHECK_THROWS_WITH_AS(slice_cols(v(Shape::batched(2, 4, 8)), 4, 8),
                       "slice_cols: columns [4, 12) are outside x, which is 2x4x8 (8 columns)", ShapeError);
  // Sizes near the limits are refused before any arithmetic on them could overflow (UBSan checks it).
  constexpr Index kMax = std::numeric_limits<Index>::max();
  CHECK_THROWS_WITH_AS(slice_cols(v(Shape::batched(2, 4, 8)), 2, kMax),
                       "slice_cols: columns [2, 2 + 9223372036854775807) are outside x, which is 2x4x8 (8 columns)",
                       ShapeError);
  CHECK_THROWS_AS(slice_cols(v(Shape::batched(2, 4, 8)), kMax, 1), ShapeError);
  CHECK_THROWS_WITH_AS(concat_cols<double>({}), "concat_cols: no inputs were given", UsageError);
  const std::vector<Var<double>> parts = {v(Shape::batched(2, 5, 3)), v(Shape::batched(2, 4, 3))};
  CHECK_THROWS_WITH_AS(concat_cols<double>(parts),
                       "concat_cols: part 1 is 2x4x3 but part 0 is 2x5x3; parts must share batch and rows", ShapeError);
  CHECK_THROWS_WITH_AS(gather_rows(v(Shape::batched(1, 4, 3)), Ids(Shape::vec(2))),
                       "gather_rows: the table must be 2-D (rows, cols), but it is 1x4x3", ShapeError);
  CHECK_THROWS_WITH_AS(gather_rows(v(Shape::mat(10, 3)), Ids(Shape::batched(1, 1, 2))),
                       "gather_rows: ids are 1x1x2; they must be (N) or (batch, rows)", ShapeError);
  CHECK_THROWS_WITH_AS(gather_rows(v(Shape::mat(10, 3)), Ids(Shape::vec(6), {0, 1, 2, 3, 4, 12})),
                       "gather_rows: id 12 at position 5 is outside the table's 10 rows", ValueError);
}

// ---- reshape, pick_positions, row reductions, exp/log/sqrt/sigmoid/div, dropout, layer_norm ---------------

TEST_CASE("ops: a column (.., 1) broadcasts over the columns in add, sub, mul and div, forward and backward") {
  Tape<double> t;
  Var<double> a = t.input(TensorD(Shape::mat(2, 2), {1, 2, 3, 4}));
  Var<double> col = t.input(TensorD(Shape::mat(2, 1), {10, 20}));
  CHECK(add(a, col).value() == TensorD(Shape::mat(2, 2), {11, 12, 23, 24}));
  CHECK(sub(a, col).value() == TensorD(Shape::mat(2, 2), {-9, -8, -17, -16}));
  CHECK(mul(a, col).value() == TensorD(Shape::mat(2, 2), {10, 20, 60, 80}));
  Var<double> q = div(a, col);
  CHECK(q.value() == TensorD(Shape::mat(2, 2), {1.0 / 10, 2.0 / 10, 3.0 / 20, 4.0 / 20}));
  // d/dA (A / b) = 1 / b;  d/db sum_j A_j / b = -sum_j A_j / b^2
  t.backward(sum(q));
  CHECK_TENSOR_NEAR(a.grad(), TensorD(Shape::mat(2, 2), {0.1, 0.1, 0.05, 0.05}), 1e-17, 1e-15);
  CHECK_TENSOR_NEAR(col.grad(), TensorD(Shape::mat(2, 1), {-3.0 / 100, -7.0 / 400}), 1e-17, 1e-15);

  Tape<double> tb;
  Var<double> x = tb.constant(TensorD(Shape::batched(2, 1, 2), {1, 2, 3, 4}));
  Var<double> c = tb.constant(TensorD(Shape::batched(2, 1, 1), {2, -1}));
  CHECK(mul(x, c).value() == TensorD(Shape::batched(2, 1, 2), {2, 4, -3, -4}));
  CHECK(div(x, c).value() == TensorD(Shape::batched(2, 1, 2), {0.5, 1, -3, -4}));
  CHECK(div(x, x).value() == TensorD(Shape::batched(2, 1, 2), 1.0));
}

TEST_CASE("ops: reshape keeps the elements in order, pick_positions takes one row per batch item") {
  Tape<double> t;
  Var<double> x = t.input(TensorD(Shape::batched(2, 3, 2), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  Var<double> flat = reshape(x, Shape::mat(6, 2));
  CHECK(flat.value() == TensorD(Shape::mat(6, 2), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  CHECK(reshape(flat, Shape::vec(12)).shape() == Shape::vec(12));
  Var<double> picked = pick_positions(x, Ids(Shape::vec(2), {2, 0}));  // (2, 2)
  CHECK(picked.value() == TensorD(Shape::mat(2, 2), {4, 5, 6, 7}));
  // dX: the flat seed through reshape, plus the picked rows' seed at their positions
  t.backward(add(sum(mul(flat, flat)), sum(scale(picked, 10))));
  TensorD expected(Shape::batched(2, 3, 2));
  for (Index i = 0; i < 12; ++i) expected[i] = 2.0 * static_cast<double>(i);
  expected.at(0, 2, 0) += 10;
  expected.at(0, 2, 1) += 10;
  expected.at(1, 0, 0) += 10;
  expected.at(1, 0, 1) += 10;
  CHECK(x.grad() == expected);
}

TEST_CASE("ops: row_sum, row_mean and row_max reduce the last axis to width 1") {
  Tape<double> t;
  Var<double> x = t.constant(TensorD(Shape::batched(2, 2, 3), {1, 2, 3, -1, -5, -3, 0, 0, 6, 7, 7, 7}));
  CHECK(row_sum(x).value() == TensorD(Shape::batched(2, 2, 1), {6, -9, 6, 21}));
  CHECK(row_mean(x).value() == TensorD(Shape::batched(2, 2, 1), {2, -3, 2, 7}));
  CHECK(row_max(x).value() == TensorD(Shape::batched(2, 2, 1), {3, -1, 6, 7}));
  CHECK(row_sum(t.constant(TensorD(Shape::vec(3), {1, 2, 4}))).value() == TensorD(Shape::vec(1), {7}));
}

TEST_CASE("ops: row_max sends the gradient to the first of tied maxima, and does not hide a NaN") {
  Tape<double> t;
  Var<double> x = t.input(TensorD(Shape::mat(3, 4), {1, 3, 3, 2, 5, 5, 5, 5, -2, -1, -1, -7}));
  Var<double> m = row_max(x);
  CHECK(m.value() == TensorD(Shape::mat(3, 1), {3, 5, -1}));
  t.backward(m, TensorD(Shape::mat(3, 1), {1, 2, 3}));
  CHECK(x.grad() == TensorD(Shape::mat(3, 4), {0, 1, 0, 0, 2, 0, 0, 0, 0, 3, 0, 0}));

  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tape<double> tn;
  for (const TensorD& row : {TensorD(Shape::mat(1, 3), {1, nan, 5}), TensorD(Shape::mat(1, 3), {nan, 1, 5}),
                             TensorD(Shape::mat(1, 3), {1, 5, nan})}) {
    CHECK(std::isnan(row_max(tn.constant(row)).value()[0]));
  }
}

TEST_CASE("ops: exp, log, sqrt and sigmoid give the textbook values and derivatives") {
  Tape<double> t;
  Var<double> x = t.input(TensorD(Shape::vec(3), {0.25, 1, 4}));
  CHECK_TENSOR_NEAR(exp(x).value(), TensorD(Shape::vec(3), {std::exp(0.25), std::exp(1.0), std::exp(4.0)}), 0, 1e-15);
  CHECK(log(x).value() == TensorD(Shape::vec(3), {std::log(0.25), 0, std::log(4.0)}));
  CHECK(sqrt(x).value() == TensorD(Shape::vec(3), {0.5, 1, 2}));
  CHECK(sigmoid(t.constant(TensorD(Shape::vec(1), {0}))).value()[0] == 0.5);
  // Saturated sigmoid: exactly 0 and 1, never NaN.
  CHECK(sigmoid(t.constant(TensorD(Shape::vec(2), {-1000, 1000}))).value() == TensorD(Shape::vec(2), {0, 1}));
  // d/dx (log x + sqrt x + sigmoid x) = 1/x + 1/(2 sqrt x) + s (1 - s)
  t.backward(sum(add(add(log(x), sqrt(x)), sigmoid(x))));
  TensorD expected(Shape::vec(3));
  for (Index i = 0; i < 3; ++i) {
    const double v = x.value()[i], s = 1 / (1 + std::exp(-v));
    expected[i] = 1 / v + 0.5 / std::sqrt(v) + s * (1 - s);
  }
  CHECK_TENSOR_NEAR(x.grad(), expected, 1e-15, 1e-14);
}

TEST_CASE("ops: silu is x sigmoid(x), its derivative s (1 + x (1 - s)), saturating without NaN") {
  Tape<double> t;
  Var<double> x = t.input(TensorD(Shape::vec(4), {-3, 0, 0.5, 2}));
  Var<double> y = silu(x);
  TensorD expected(Shape::vec(4)), slope(Shape::vec(4));
  for (Index i = 0; i < 4; ++i) {
    const double v = x.value()[i], s = 1 / (1 + std::exp(-v));
    expected[i] = v * s;
    slope[i] = s * (1 + v * (1 - s));
  }
  CHECK_TENSOR_NEAR(y.value(), expected, 1e-15, 1e-15);
  CHECK_TENSOR_NEAR(y.value(), (x * sigmoid(x)).value(), 1e-15, 1e-15);
  t.backward(sum(y));
  CHECK_TENSOR_NEAR(x.grad(), slope, 1e-15, 1e-15);
  Tape<float> tf;
  CHECK(silu(tf.constant(Tensor(Shape::vec(2), {-1000.0f, 1000.0f}))).value() == Tensor(Shape::vec(2), {-0.0f, 1000.0f}));
}

TEST_CASE("ops: log of 0 is -Inf and of a negative NaN, which anomaly detection reports") {
  Tape<double> t;
  Var<double> x = t.input(TensorD(Shape::vec(3), {0, -1, 1}));
  const TensorD& y = log(x).value();
  CHECK(y[0] == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(y[1]));
  CHECK(y[2] == 0);
  CHECK(std::isnan(sqrt(x).value()[1]));
  t.set_anomaly_detection(true);
  const auto before = t.size();
  const std::string expected = fmt::format(
      "anomaly: log (recorded at tests/test_ops.cpp:{}) produced a non-finite value (NaN or Inf) in its 3 output",
      __LINE__ + 1);
  CHECK_THROWS_WITH_AS(log(x), expected.c_str(), NonFiniteError);
  CHECK(t.size() == before);
  CHECK_THROWS_AS(log(t.input(TensorD(Shape::vec(1), {0}))), NonFiniteError);
  CHECK_NOTHROW(log(t.input(TensorD(Shape::vec(1), {1e-300}))));
}

TEST_CASE("ops: dropout draws one uniform per element in row-major order, dropped iff u < p") {
  const double p = 0.3;
  const Index n = 100000;
  Tape<double> t;
  Var<double> x = t.input(TensorD(Shape::mat(100, n / 100), 1.0));
  Rng rng(21, 4);
  Var<double> y = dropout(x, p, rng);
  // The same generator, drawn by hand, predicts every element.
  Rng replay(21, 4);
  Index kept = 0, mismatched = 0;
  for (Index i = 0; i < n; ++i) {
    const bool dropped = replay.uniform() < p;
    kept += dropped ? 0 : 1;
    if (y.value()[i] != (dropped ? 0.0 : 1 / (1 - p))) ++mismatched;
  }
  CHECK(mismatched == 0);
  CHECK(rng.state() == replay.state());  // exactly n draws
  // Kept ~ Binomial(n, 0.7): mean 70000, standard deviation 145; 5 deviations is 725.
  CHECK(std::abs(static_cast<double>(kept) - 0.7 * n) <= 725.0);
  // dX = dC * mask / (1 - p): the gradient of sum(y) is y itself here (x = 1).
  t.backward(sum(y));
  CHECK(x.grad() == y.value());

  // Same seed, same mask, in float too and with gradients off; another stream, another mask.
  Tape<float> tf;
  Rng again(21, 4);
  {
    NoGradGuard<float> no_grad(tf);
    const Tensor& yf = dropout(tf.constant(Tensor(Shape::mat(100, n / 100), 1.0f)), p, again).value();
    Index same = 0;
    for (Index i = 0; i < n; ++i) same += (yf[i] == 0.0f) == (y.value()[i] == 0.0) ? 1 : 0;
    CHECK(same == n);
  }
  Rng other(21, 5);
  CHECK(dropout(x, p, other).value() != y.value());
}

TEST_CASE("ops: dropout with p = 0 returns x itself and draws nothing") {
  Tape<double> t;
  Var<double> x = t.input(TensorD(Shape::mat(2, 3), 2.0));
  Rng rng(3);
  const Rng::State state = rng.state();
  const auto before = t.size();
  Var<double> y = dropout(x, 0.0, rng);
  CHECK(std::size_t{y.index} == std::size_t{x.index});
  CHECK(t.size() == before);
  CHECK(rng.state() == state);
}

TEST_CASE("ops: layer_norm rows have mean 0 and variance v / (v + eps) with gamma 1, beta 0") {
  Rng rng(44);
  TensorD x = random_tensor(Shape::batched(3, 4, 16), rng, 5.0);
  for (Index i = 0; i < x.numel(); ++i) x[i] += 3.0 + static_cast<double>(i / 16);  // a different offset per row
  const double eps = 1e-5;
  Tape<double> t;
  const TensorD& y = layer_norm(t.constant(x), t.constant(TensorD(Shape::vec(16), 1.0)),
                                t.constant(TensorD(Shape::vec(16), 0.0)), eps)
                         .value();
  for (Index r = 0; r < x.shape().flat_rows(); ++r) {
    CAPTURE(r);
    const auto xr = std::as_const(x).flat().row(r).array();
    const auto yr = y.flat().row(r).array();
    const double v = (xr - xr.mean()).square().mean();
    CHECK(std::abs(yr.mean()) <= 1e-15);
    CHECK((yr - yr.mean()).square().mean() == doctest::Approx(v / (v + eps)).epsilon(1e-14));
  }
  // float rows far from 0: the statistics are computed in double, so the spread survives the offset.
  Tape<float> tf;
  Tensor xf(Shape::mat(4, 64));
  for (Index i = 0; i < xf.numel(); ++i) xf[i] = static_cast<float>(1000.0 + rng.normal());
  const Tensor& yf = layer_norm(tf.constant(xf), tf.constant(Tensor(Shape::mat(1, 64), 1.0f)),
                                tf.constant(Tensor(Shape::mat(1, 64), 0.0f)))
                         .value();
  for (Index r = 0; r < 4; ++r) {
    CAPTURE(r);
    const Eigen::ArrayXd yr = yf.flat().row(r).cast<double>().array().transpose();
    CHECK(std::abs(yr.mean()) <= 1e-6);
    CHECK(std::abs((yr - yr.mean()).square().mean() - 1) <= 1e-4);
  }
}

TEST_CASE("ops: row_sum over rows of no entries is a column of zeros, not refused as row_mean and row_max are") {
  Tape<double> t;
  CHECK(row_sum(t.input(TensorD(Shape::mat(0, 0)))).shape() == Shape::mat(0, 1));
  CHECK(row_sum(t.input(TensorD(Shape::mat(3, 0)))).value().array().isZero());
}

TEST_CASE("ops: shape, position, p and eps errors of the new ops name what is wrong and leave the tape as it was") {
  Tape<double> t;
  auto v = [&](Shape s) { return t.input(TensorD(s, 1.0)); };
  Var<double> x3 = v(Shape::batched(2, 4, 5)), x2 = v(Shape::mat(4, 5)), empty_rows = v(Shape::mat(4, 0));
  Var<double> row5 = v(Shape::vec(5)), row6 = v(Shape::vec(6)), tall = v(Shape::mat(2, 5)), narrow = v(Shape::mat(4, 2));
  const Var<double> no_rows = v(Shape::mat(0, 0));
  Rng rng(9);
  const Rng::State rng_state = rng.state();
  const auto before = t.size();
  CHECK_THROWS_WITH_AS(reshape(x3, Shape::mat(5, 5)), "reshape: x is 2x4x5 (40 elements) but the new shape 5x5 holds 25",
                       ShapeError);
  CHECK_THROWS_WITH_AS(reshape(x3, Shape{2, 2, 4, 5}), "reshape: the new shape is invalid (rank 2, batch 2, rows 4, cols 5)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(pick_positions(x2, Ids(Shape::vec(4))),
                       "pick_positions: x is 4x5; it must be batched (batch, positions, cols)", ShapeError);
  CHECK_THROWS_WITH_AS(pick_positions(x3, Ids(Shape::vec(3))),
                       "pick_positions: positions are 3 but x is 2x4x5; give one position per batch item: 2", ShapeError);
  CHECK_THROWS_WITH_AS(pick_positions(x3, Ids(Shape::mat(2, 1))),
                       "pick_positions: positions are 2x1 but x is 2x4x5; give one position per batch item: 2", ShapeError);
  CHECK_THROWS_WITH_AS(pick_positions(x3, Ids(Shape::vec(2), {3, 4})),
                       "pick_positions: position 4 of batch item 1 is outside [0, 4): x is 2x4x5", ValueError);
  CHECK_THROWS_WITH_AS(pick_positions(x3, Ids(Shape::vec(2), {-1, 0})),
                       "pick_positions: position -1 of batch item 0 is outside [0, 4): x is 2x4x5", ValueError);
  CHECK_THROWS_WITH_AS(row_mean(empty_rows), "row_mean: x is 4x0; its rows have no entries to average", ShapeError);
  CHECK_THROWS_WITH_AS(row_max(empty_rows), "row_max: x is 4x0; its rows have no entries to take a maximum of",
                       ShapeError);
  // No rows of no entries either: refused as layer_norm and cross_entropy refuse them (until 1.0, these three
  // returned an empty result for a 0x0 x).
  CHECK_THROWS_WITH_AS(row_mean(no_rows), "row_mean: x is 0x0; its rows have no entries to average", ShapeError);
  CHECK_THROWS_WITH_AS(row_max(no_rows), "row_max: x is 0x0; its rows have no entries to take a maximum of", ShapeError);
  CHECK_THROWS_WITH_AS(log_softmax_rows(no_rows), "log_softmax_rows: x is 0x0; its rows have no entries to normalise",
                       ShapeError);
  CHECK_THROWS_WITH_AS(div(x2, narrow),
                       "div: shapes do not broadcast: a is 4x5, b is 4x2 (b must be 4x5, a row of 5 values, or a 4x1 "
                       "column)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(dropout(x2, 1.0, rng), "dropout: the drop probability p must be in [0, 1), got 1", ValueError);
  CHECK_THROWS_WITH_AS(dropout(x2, -0.1, rng), "dropout: the drop probability p must be in [0, 1), got -0.1", ValueError);
  CHECK_THROWS_AS(dropout(x2, std::numeric_limits<double>::quiet_NaN(), rng), ValueError);
  CHECK(rng.state() == rng_state);  // a refused dropout draws nothing
  CHECK_THROWS_WITH_AS(layer_norm(x3, row6, row5),
                       "layer_norm: gamma is 6 and beta is 5 but x is 2x4x5; both must be rows of 5 values (5 or 1x5)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(layer_norm(x3, row5, tall),
                       "layer_norm: gamma is 5 and beta is 2x5 but x is 2x4x5; both must be rows of 5 values (5 or 1x5)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(layer_norm(empty_rows, row5, row5), "layer_norm: x is 4x0; its rows have no entries to normalise",
                       ShapeError);
  CHECK_THROWS_WITH_AS(layer_norm(x3, row5, row5, 0.0), "layer_norm: eps must be positive and finite, got 0", ValueError);
  CHECK_THROWS_WITH_AS(layer_norm(x3, row5, row5, -1e-5), "layer_norm: eps must be positive and finite, got -1e-05",
                       ValueError);
  CHECK_THROWS_AS(layer_norm(x3, row5, row5, std::numeric_limits<double>::infinity()), ValueError);
  CHECK(t.size() == before);
}
