// autograd/tape: recording, backward, reset, misuse of Vars, no-grad mode, anomaly detection.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "tapegrad/autograd/ops.hpp"
#include "helpers.hpp"

using namespace tapegrad;

TEST_CASE("tape: backward accumulates into parameters, and again on a second backward") {
  Parameter<double> w("w", TensorD(Shape::mat(2, 2), {1, 2, 3, 4}));
  Tape<double> tape;
  Var<double> x = tape.constant(TensorD(Shape::mat(1, 2), {5, 7}));
  Var<double> y = sum(matmul(x, tape.param(w)));  // y = 5 (w00 + w01) + 7 (w10 + w11)
  CHECK(y.value()[0] == 5 * 3 + 7 * 7);
  tape.backward(y);
  CHECK(w.grad == TensorD(Shape::mat(2, 2), {5, 5, 7, 7}));
  tape.backward(y);  // gradients accumulate until zero_grad, as in PyTorch
  CHECK(w.grad == TensorD(Shape::mat(2, 2), {10, 10, 14, 14}));
  w.zero_grad();
  CHECK(w.grad == TensorD(Shape::mat(2, 2)));
}

TEST_CASE("tape: a Var used twice gets both contributions and intermediate gradients are readable") {
  Tape<double> tape;
  Var<double> x = tape.input(TensorD(Shape::vec(3), {1, -2, 3}));
  Var<double> sq = mul(x, x);
  Var<double> y = sum(sq);
  tape.backward(y);
  CHECK(x.grad() == TensorD(Shape::vec(3), {2, -4, 6}));  // d sum(x^2) = 2x
  CHECK(sq.grad() == TensorD(Shape::vec(3), {1, 1, 1}));
  CHECK(tape.size() == 3);
}

TEST_CASE("tape: reset keeps every buffer, so the next step reuses them") {
  Tape<double> tape;
  Parameter<double> w("w", TensorD(Shape::mat(3, 3), 0.5));
  auto step = [&] {
    Var<double> x = tape.constant(TensorD(Shape::mat(4, 3), 1.0));
    Var<double> h = tanh(matmul(x, tape.param(w)));
    tape.backward(sum(h));
    return h;
  };
  Var<double> first = step();
  const double* value_buffer = first.value().data();
  tape.reset();
  Var<double> second = step();
  CHECK(second.index == first.index);
  CHECK(second.value().data() == value_buffer);
}

TEST_CASE("tape: misused Vars are clear errors, not undefined behaviour") {
  Tape<double> tape, other;
  Var<double> a = tape.input(TensorD(Shape::mat(2, 2), 1.0));
  Var<double> b = other.input(TensorD(Shape::mat(2, 2), 1.0));
  CHECK_THROWS_WITH_AS(matmul(a, b), "matmul: b belongs to a different tape than the op's other arguments",
                       UsageError);
  CHECK_THROWS_WITH_AS(add(a, Var<double>{}), "add: b is an empty Var (default-constructed)", UsageError);
  CHECK_THROWS_WITH_AS(relu(Var<double>{}), "relu: x is an empty Var (default-constructed)", UsageError);
  tape.reset();
  CHECK_THROWS_WITH_AS(relu(a), "relu: x was recorded before the last reset() of its tape; record it again",
                       UsageError);
  CHECK_THROWS_WITH_AS(a.value(), "value: the Var was recorded before the last reset() of its tape; record it again",
                       UsageError);
  // A stale Var whose slot has been re-recorded is still caught (the generation differs).
  Var<double> c = tape.input(TensorD(Shape::mat(2, 2), 1.0));
  CHECK(c.index == a.index);
  CHECK_THROWS_AS(relu(a), UsageError);
  CHECK_NOTHROW(relu(c));
}

TEST_CASE("tape: backward refuses what it cannot do, naming the op and the shapes") {
  Tape<double> tape;
  Var<double> x = tape.input(TensorD(Shape::mat(2, 3), 1.0));
  Var<double> y = relu(x);
  CHECK_THROWS_WITH_AS(tape.backward(y),
                       "backward: the loss must hold one element, but it is 2x3; give a seed gradient to start "
                       "from a larger output",
                       ShapeError);
  CHECK_THROWS_WITH_AS(tape.backward(y, TensorD(Shape::mat(3, 2))),
                       doctest::Contains("backward: the seed gradient is 3x2 but the output relu (recorded at "),
                       ShapeError);
  Var<double> k = sum(tape.constant(TensorD(Shape::mat(2, 2), 1.0)));
  CHECK_THROWS_WITH_AS(tape.backward(k), doctest::Contains("depends on no input or parameter that takes a gradient"),
                       UsageError);
  CHECK_THROWS_WITH_AS(x.grad(), doctest::Contains("grad: no gradient has been computed for input"), UsageError);
  tape.backward(y, TensorD(Shape::mat(2, 3), 2.0));
  CHECK(x.grad() == TensorD(Shape::mat(2, 3), 2.0));
  CHECK_THROWS_WITH_AS(tape.constant(TensorD(Shape::vec(1))).grad(),
                       doctest::Contains("takes no gradient (a constant, or recorded with gradients disabled)"),
                       UsageError);
}

TEST_CASE("tape: a failing op leaves the tape as it was") {
  Tape<double> tape;
  Var<double> a = tape.input(TensorD(Shape::mat(4, 8), 1.0));
  Var<double> b = tape.input(TensorD(Shape::mat(6, 8), 1.0));
  const auto before = tape.size();
  CHECK_THROWS_AS(matmul(a, b), ShapeError);
  CHECK_THROWS_AS(cross_entropy(a, Ids(Shape::vec(4), {0, 1, 9, 2})), ValueError);
  CHECK(tape.size() == before);
}

TEST_CASE("tape: no-grad mode computes values, records no graph, and refuses backward") {
  Parameter<double> w("w", TensorD(Shape::mat(2, 2), {1, 0, 0, 1}));
  Tape<double> tape;
  {
    NoGradGuard<double> guard(tape);
    Var<double> x = tape.constant(TensorD(Shape::mat(1, 2), {3, 4}));
    Var<double> y = sum(matmul(x, tape.param(w)));
    CHECK(y.value()[0] == 7);
    CHECK_FALSE(tape.node(y).requires_grad);
    CHECK(tape.node(y).input_count == 0);
    CHECK_THROWS_AS(tape.backward(y), UsageError);
  }
  CHECK(tape.grad_enabled());
  CHECK(w.grad == TensorD(Shape::mat(2, 2)));
}

namespace {

// A user-defined op through the recording interface: y = x^2 with a deliberately broken backward
// that writes NaN, to exercise anomaly detection of gradients.
Var<double> square_with_nan_backward(Var<double> x, Where where = Where::current()) {
  Tape<double>& t = Tape<double>::of("square_nan", {{"x", x}});
  const Shape s = x.shape();
  Node<double>& n = t.record("square_nan", {x}, s, where);
  n.value.array() = t.node(x).val().array().square();
  n.backward = [](Tape<double>& tp, Node<double>& node) {
    if (auto* dx = tp.input(node, 0).grad_sink()) dx->array() += std::numeric_limits<double>::quiet_NaN();
  };
  return t.commit(n);
}

}  // namespace

TEST_CASE("tape: anomaly mode names the first op with a non-finite output and its source line") {
  Tape<double> tape;
  Var<double> x = tape.input(TensorD(Shape::vec(2), {1e300, 1.0}));
  CHECK_NOTHROW(scale(x, 1e10));  // off by default: Inf passes silently
  tape.set_anomaly_detection(true);
  const std::string expected = fmt::format(
      "anomaly: scale (recorded at tests/test_tape.cpp:{}) produced a non-finite value (NaN or Inf) in its 2 output",
      __LINE__ + 1);
  CHECK_THROWS_WITH_AS(scale(x, 1e10), expected.c_str(), ValueError);
}

TEST_CASE("tape: anomaly mode names the backward rule that produced a non-finite gradient") {
  Tape<double> tape;
  tape.set_anomaly_detection(true);
  Var<double> x = tape.input(TensorD(Shape::vec(2), {1.0, 2.0}));
  Var<double> y = sum(square_with_nan_backward(x));
  CHECK_THROWS_WITH_AS(tape.backward(y),
                       doctest::Contains("anomaly: the backward rule of square_nan (recorded at tests/test_tape.cpp:"),
                       ValueError);
}
