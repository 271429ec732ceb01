// autograd/ops: forward values (against naive loops and hand-computed numbers) and every shape or
// value error, checked for its message.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "tapegrad/autograd/ops.hpp"
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
      // Above the small-product limit (64^3 multiply-adds): Eigen's GEMM even where libxsmm is built in.
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
}

TEST_CASE("ops: shape errors of the elementwise ops say which shapes would broadcast") {
  Tape<double> t;
  auto v = [&](Shape s) { return t.constant(TensorD(s)); };
  CHECK_THROWS_WITH_AS(add(v(Shape::batched(2, 4, 8)), v(Shape::mat(3, 8))),
                       "add: shapes do not broadcast: a is 2x4x8, b is 3x8 (b must be 2x4x8, a row of 8 values, or a "
                       "4x8 matrix shared by the batch)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(sub(v(Shape::mat(4, 8)), v(Shape::mat(4, 7))),
                       "sub: shapes do not broadcast: a is 4x8, b is 4x7 (b must be 4x8 or a row of 8 values)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(mul(v(Shape::mat(4, 8)), v(Shape::vec(4))),
                       "mul: shapes do not broadcast: a is 4x8, b is 4 (b must be 4x8 or a row of 8 values)", ShapeError);
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
  CHECK_THROWS_WITH_AS(concat_cols<double>({}), "concat_cols: no parts to concatenate", ShapeError);
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
