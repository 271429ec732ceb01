// autograd/gradcheck: it catches wrong gradients, says where, restores parameters, and its fast
// mode agrees with the full one.
#include <doctest/doctest.h>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "helpers.hpp"

using namespace tapegrad;
using test::random_tensor;

namespace {

// softmax_rows whose backward rule is missing (no gradient flows): summed with all-ones weights
// the numeric gradient is zero too (softmax rows sum to 1), so only a random projection sees it.
struct SoftmaxWithoutBackward {
  static constexpr const char* name = "softmax_no_backward";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const {
    TensorD& y = out.make(x.shape());
    for (Index r = 0; r < x.shape().flat_rows(); ++r) {
      auto row = x.flat().row(r).array();
      y.flat().row(r).array() = (row - row.maxCoeff()).exp() / (row - row.maxCoeff()).exp().sum();
    }
  }
  static void backward(const Output<double>&, const OpInput<double>&) {}  // forgotten
};
Var<double> softmax_without_backward(Var<double> x, Where where = Where::current()) {
  return apply(SoftmaxWithoutBackward{}, {x}, where);
}

// y = x^2 with a backward rule that forgets the factor 2 (wrong on purpose).
struct WrongSquare {
  static constexpr const char* name = "wrong_square";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const { out.make(x.shape()).array() = x.array().square(); }
  static void backward(const Output<double>& out, const OpInput<double>& x) {
    x.grad.add(out.grad().array() * x.value.array());  // should be 2x
  }
};
Var<double> wrong_square(Var<double> x, Where where = Where::current()) { return apply(WrongSquare{}, {x}, where); }

}  // namespace

TEST_CASE("gradcheck: a missing softmax backward is caught by the random projection") {
  Rng rng(21);
  const auto report =
      gradcheck([](Tape<double>&, std::span<const Var<double>> in) { return softmax_without_backward(in[0]); },
                {{"scores", random_tensor(Shape::mat(3, 4), rng)}});
  CHECK_FALSE(report.ok());
  CHECK(report.failed > 0);
  REQUIRE_FALSE(report.failures.empty());
  CHECK(report.failures[0].tensor == "scores");
  CHECK(report.failures[0].analytic == 0);  // nothing flowed back
  CHECK(report.failures[0].numeric != 0);
}

TEST_CASE("gradcheck: the report names the parameter, the element and both values") {
  Rng rng(22);
  Parameter<double> w("attn.wq", random_tensor(Shape::mat(2, 3), rng));
  Parameter<double>* params[] = {&w};
  const TensorD value_before = w.value;
  w.grad.fill(7.0);  // whatever the caller had accumulated must survive the check
  const auto report = gradcheck(
      [&w](Tape<double>& t, std::span<const Var<double>> in) { return matmul(in[0], wrong_square(t.param(w))); },
      {{"x", random_tensor(Shape::mat(4, 2), rng)}}, params);
  CHECK_FALSE(report.ok());
  REQUIRE(report.tensors.size() == 2);
  CHECK(report.tensors[0].name == "x");
  CHECK(report.tensors[0].failed == 0);  // x's gradient is right
  CHECK(report.tensors[1].name == "attn.wq");
  CHECK(report.tensors[1].failed == 6);  // every element of w is off by a factor 2
  REQUIRE(report.failures.size() == 6);
  const GradcheckEntry& e = report.failures[1];
  CHECK(e.tensor == "attn.wq");
  CHECK(e.index == 1);
  CHECK(e.position == "[0, 1]");
  CHECK(e.numeric == doctest::Approx(2 * e.analytic).epsilon(1e-6));
  CHECK(report.str().find("MISMATCH attn.wq[0, 1]: analytic") != std::string::npos);
  // Parameters come back bit for bit, values and gradients.
  CHECK(w.value == value_before);
  CHECK(w.grad == TensorD(Shape::mat(2, 3), 7.0));
}

TEST_CASE("gradcheck: the report says which entry came closest to its tolerance, and by how much") {
  Rng rng(23);
  // One input's rule is right, the other's wrong: the entry closest to its tolerance (past it) is the
  // wrong rule's, and each tensor's largest share of its tolerance says which one failed.
  const auto report = gradcheck(
      [](Tape<double>&, std::span<const Var<double>> in) { return add(scale(in[0], 1e-9), wrong_square(in[1])); },
      {{"tiny", random_tensor(Shape::mat(2, 2), rng)}, {"wrong", random_tensor(Shape::mat(2, 2), rng)}});
  REQUIRE(report.tensors.size() == 2);
  const GradcheckEntry& closest = report.closest_to_tolerance;
  CHECK(closest.tensor == "wrong");
  CHECK(closest.tolerance == doctest::Approx(report.options.atol + report.options.rtol * std::abs(closest.numeric)));
  CHECK(closest.tolerance_used == doctest::Approx(closest.abs_error / closest.tolerance));
  CHECK(closest.tolerance_used > 1);  // past it: a failure
  CHECK(closest.tolerance_used == report.tensors[1].max_tolerance_used);
  CHECK(report.tensors[0].max_tolerance_used < 1);
  CHECK(report.str().find("closest to its tolerance: wrong[") != std::string::npos);

  // All within: the closest is below 1, and is the largest share over every tensor.
  const auto fine = gradcheck([](Tape<double>&, std::span<const Var<double>> in) { return tanh(mul(in[0], in[1])); },
                              {{"a", random_tensor(Shape::mat(2, 3), rng)}, {"b", random_tensor(Shape::mat(2, 3), rng)}});
  CHECK(fine.ok());
  CHECK(fine.closest_to_tolerance.tolerance_used < 1);
  CHECK(fine.closest_to_tolerance.tolerance_used ==
        std::max(fine.tensors[0].max_tolerance_used, fine.tensors[1].max_tolerance_used));
}

TEST_CASE("gradcheck: fast mode checks random directions and catches the same errors") {
  Rng rng(23);
  GradcheckOptions fast;
  fast.fast = true;
  fast.directions = 4;
  const std::vector<GradcheckInput> inputs = {{"x", random_tensor(Shape::batched(2, 8, 8), rng)}};
  const auto good = gradcheck(
      [](Tape<double>&, std::span<const Var<double>> in) { return softmax_rows(matmul_bt(in[0], in[0])); }, inputs, {},
      fast);
  CHECK_GRADCHECK(good);
  CHECK(good.checked == 4);
  const auto bad =
      gradcheck([](Tape<double>&, std::span<const Var<double>> in) { return wrong_square(in[0]); }, inputs, {}, fast);
  CHECK(bad.failed == 4);
  CHECK(bad.failures[0].position == " along direction 0");
}

TEST_CASE("gradcheck: nothing to check is not a pass") {
  const auto report = gradcheck(
      [](Tape<double>& t, std::span<const Var<double>>) { return sum(t.input(TensorD(Shape::vec(2), 1.0))); }, {});
  CHECK(report.checked == 0);
  CHECK_FALSE(report.ok());
  CHECK(report.str() == "gradcheck FAILED: there was nothing to check: the inputs and parameters hold no elements\n");
  // A 0x0 input says the same, not "0 checked, 0 failed".
  const auto empty = gradcheck([](Tape<double>&, std::span<const Var<double>> in) { return sum(in[0]); },
                               {{"x", TensorD(Shape::mat(0, 0))}});
  CHECK(empty.str().find("nothing to check") != std::string::npos);
}

TEST_CASE("gradcheck: a NaN derivative is the worst error of its tensor, not 0") {
  // y = sum(x * log(x)) at x = -1: the forward is NaN, so both derivatives are.
  const auto report = gradcheck(
      [](Tape<double>&, std::span<const Var<double>> in) { return sum(mul(in[0], log(in[0]))); },
      {{"x", TensorD(Shape::vec(2), {-1.0, -2.0})}});
  CHECK_FALSE(report.ok());
  CHECK(report.failed == 2);
  REQUIRE(report.tensors.size() == 1);
  CHECK(std::isnan(report.tensors[0].max_abs_error));
  CHECK(report.str().find("max abs error nan") != std::string::npos);
  CHECK(report.str().find("max abs error 0.00e+00") == std::string::npos);
}
