// Every op passes gradcheck in float64, including masks, broadcasting and batched shapes; the float32
// forward matches the float64 one within float precision. The cases are tests/catalogue/op_checks.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "catalogue/op_checks.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "helpers.hpp"

using namespace tapegrad;
using test::random_tensor;

TEST_CASE("gradcheck: the catalogue covers every op that autograd/ops.hpp declares") {
  for (const auto& op : op_names()) {
    CAPTURE(op);
    const auto covered = std::count_if(op_checks().begin(), op_checks().end(), [&](const OpCheck& c) { return c.op == op; });
    CHECK(covered >= 1);
  }
  for (const auto& c : op_checks()) {
    CAPTURE(c.name);
    CHECK(std::find(op_names().begin(), op_names().end(), c.op) != op_names().end());
  }
}

TEST_CASE("gradcheck: op_names() is exactly the list of ops that autograd/ops.hpp declares") {
  // Read from the header itself, so that a new op without a catalogue entry fails here.
  std::ifstream in(std::string(TAPEGRAD_TEST_DATA) + "/../../autograd/ops.hpp");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string header = text.str();
  std::set<std::string> declared;
  const std::regex declaration(R"(Var<T> (\w+)\()");
  for (auto it = std::sregex_iterator(header.begin(), header.end(), declaration); it != std::sregex_iterator(); ++it)
    declared.insert((*it)[1].str());
  const std::set<std::string> listed(op_names().begin(), op_names().end());
  CHECK(declared.size() >= 30);  // the pattern does find the declarations
  CHECK(listed.size() == op_names().size());  // no name twice
  for (const auto& name : declared) {
    CAPTURE(name);
    CHECK(listed.count(name) == 1);
  }
  for (const auto& name : listed) {
    CAPTURE(name);
    CHECK(declared.count(name) == 1);
  }
}

TEST_CASE("gradcheck: every op, every element of every input, float64") {
  Rng rng(11);
  for (const auto& c : op_checks()) {
    CAPTURE(c.name);
    std::vector<GradcheckInput> inputs;
    for (std::size_t k = 0; k < c.inputs.size(); ++k)
      inputs.push_back({fmt::format("in{}", k), random_tensor(c.inputs[k], rng)});
    const GradcheckReport report = gradcheck(c.f64, inputs, {}, kStrictGradcheck);
    CHECK_GRADCHECK(report);
    CHECK(report.checked == [&] {
      Index n = 0;
      for (const auto& s : c.inputs) n += s.numel();
      return n;
    }());
  }
}

TEST_CASE("gradcheck: cross_entropy with every row ignored has zero loss and zero gradient") {
  Rng rng(12);
  const Ids all_ignored(Shape::vec(3), {kIgnoreLabel, kIgnoreLabel, kIgnoreLabel});
  const GradcheckReport report = gradcheck(
      [&](Tape<double>&, std::span<const Var<double>> in) { return cross_entropy(in[0], all_ignored); },
      {{"logits", random_tensor(Shape::mat(3, 4), rng)}}, {}, kStrictGradcheck);
  CHECK_GRADCHECK(report);
  CHECK(report.tensors[0].max_abs_error == 0);
}

TEST_CASE("ops: the float32 forward of every op matches float64 within float precision") {
  Rng rng(13);
  for (const auto& c : op_checks()) {
    CAPTURE(c.name);
    Tape<double> t64;
    Tape<float> t32;
    std::vector<Var<double>> in64;
    std::vector<Var<float>> in32;
    for (const Shape& s : c.inputs) {
      const TensorD x = random_tensor(s, rng);
      in64.push_back(t64.constant(x));
      in32.push_back(t32.constant(x.cast<float>()));
    }
    const TensorD& y64 = c.f64(t64, in64).value();
    const Tensor& y32 = c.f32(t32, in32).value();
    // float carries 24 bits (6e-8); a few roundings per element stay far inside 1e-5.
    CHECK_TENSOR_NEAR(y32, y64, 1e-5, 1e-5);
  }
}
