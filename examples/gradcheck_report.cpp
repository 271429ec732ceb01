// Gradient-check report: every primitive op through gradcheck in float64 (every element of every
// input, central differences), plus how far its float32 forward strays from float64. Exits non-zero
// if any check fails.
//
//   build/examples/gradcheck_report [--seed N] [--eps E]
#include <chrono>
#include <cmath>
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "autograd/gradcheck.hpp"
#include "autograd/op_checks.hpp"
#include "core/rng.hpp"

using namespace tapegrad;

namespace {

TensorD random_tensor(const Shape& s, Rng& rng) {
  TensorD t(s);
  for (double& x : t.span()) x = rng.normal();
  return t;
}

// Largest |f32 - f64| / (1 + |f64|) over the forward outputs.
double float_gap(const OpCheck& c, const std::vector<TensorD>& inputs) {
  Tape<double> t64;
  Tape<float> t32;
  std::vector<Var<double>> in64;
  std::vector<Var<float>> in32;
  for (const auto& x : inputs) {
    in64.push_back(t64.constant(x));
    in32.push_back(t32.constant(x.cast<float>()));
  }
  const TensorD& y64 = c.f64(t64, in64).value();
  const Tensor& y32 = c.f32(t32, in32).value();
  double gap = 0;
  for (Index i = 0; i < y64.numel(); ++i)
    gap = std::max(gap, std::abs(static_cast<double>(y32[i]) - y64[i]) / (1 + std::abs(y64[i])));
  return gap;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Gradient check of every tapegrad op in float64 (central differences)"};
  std::uint64_t seed = 1;
  GradcheckOptions options{.eps = 1e-6, .atol = 1e-7, .rtol = 1e-6};
  app.add_option("--seed", seed, "Seed of the random inputs and projections")->capture_default_str();
  app.add_option("--eps", options.eps, "Central-difference step")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const auto start = std::chrono::steady_clock::now();
  fmt::print("tapegrad gradcheck report: float64 central differences, eps {:g}; an entry passes when\n"
             "|analytic - numeric| <= {:g} + {:g} |numeric|. 'f32 gap' is the largest |f32 - f64| / (1 + |f64|)\n"
             "of the op's forward value.\n\n",
             options.eps, options.atol, options.rtol);
  fmt::print("{:<17} {:<55} {:>6} {:>12} {:>12} {:>9}  {}\n", "op", "case", "checks", "max abs err", "max rel err",
             "f32 gap", "result");
  Rng rng(seed);
  Index total = 0, failed_cases = 0;
  for (const auto& c : op_checks()) {
    std::vector<GradcheckInput> inputs;
    std::vector<TensorD> values;
    for (std::size_t k = 0; k < c.inputs.size(); ++k) {
      values.push_back(random_tensor(c.inputs[k], rng));
      inputs.push_back({fmt::format("in{}", k), values.back()});
    }
    options.seed = rng.next_u64();
    const GradcheckReport report = gradcheck(c.f64, inputs, {}, options);
    double abs_err = 0, rel_err = 0;
    for (const auto& t : report.tensors) {
      abs_err = std::max(abs_err, t.max_abs_error);
      rel_err = std::max(rel_err, t.max_rel_error);
    }
    total += report.checked;
    failed_cases += report.ok() ? 0 : 1;
    fmt::print("{:<17} {:<55} {:>6} {:>12.2e} {:>12.2e} {:>9.1e}  {}\n", c.op, c.name, report.checked, abs_err, rel_err,
               float_gap(c, values), report.ok() ? "ok" : "FAILED");
    if (!report.ok()) fmt::print("{}", report.str());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("\n{} cases over {} ops, {} derivatives checked: {} ({:.2f} s)\n", op_checks().size(), op_names().size(),
             total, failed_cases == 0 ? "all passed" : fmt::format("{} cases FAILED", failed_cases), seconds);
  return failed_cases == 0 ? 0 : 1;
}
