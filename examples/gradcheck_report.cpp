// Gradient-check report: every primitive op and every layer through gradcheck in float64 (every
// element of every input and parameter, central differences), plus how far each op's float32 forward
// strays from float64. Exits non-zero if any check fails.
//
//   build/examples/gradcheck_report [--seed N] [--eps E]
#include <chrono>
#include <cmath>
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tapegrad/autograd/gradcheck.hpp"
#include "catalogue/op_checks.hpp"
#include "tapegrad/core/rng.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"
#include "catalogue/layer_checks.hpp"
#include "command_line.hpp"

using namespace tapegrad;

namespace {

TensorD random_tensor(const Shape& s, Rng& rng) {
  TensorD t(s);
  for (double& x : t.span()) x = rng.normal();
  return t;
}

struct Row {
  std::string what, name;
  GradcheckReport report;
  std::string f32_gap = "";
};

double max_abs_error(const GradcheckReport& r) {
  double e = 0;
  for (const auto& t : r.tensors) e = std::max(e, t.max_abs_error);
  return e;
}
double max_rel_error(const GradcheckReport& r) {
  double e = 0;
  for (const auto& t : r.tensors) e = std::max(e, t.max_rel_error);
  return e;
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

// Every case through gradcheck, a table of the results; 0 if all pass, 1 (check_failed) if not.
int report(std::uint64_t seed, GradcheckOptions options) {

  const auto start = std::chrono::steady_clock::now();
  fmt::print("tapegrad gradcheck report: float64 central differences, eps {:g}; an entry passes when\n"
             "|analytic - numeric| <= {:g} + {:g} |numeric|. 'f32 gap' is the largest |f32 - f64| / (1 + |f64|)\n"
             "of the op's forward value.\n",
             options.eps, options.atol, options.rtol);
  std::vector<Row> rows;
  Rng rng(seed);
  for (const auto& c : op_checks()) {
    std::vector<GradcheckInput> inputs;
    std::vector<TensorD> values;
    for (std::size_t k = 0; k < c.inputs.size(); ++k) {
      values.push_back(random_tensor(c.inputs[k], rng));
      inputs.push_back({fmt::format("in{}", k), values.back()});
    }
    options.seed = rng.next_u64();
    rows.push_back({c.op, c.name, gradcheck(c.f64, inputs, {}, options), fmt::format("{:.1e}", float_gap(c, values))});
  }
  const std::size_t op_rows = rows.size();
  for (const auto& c : layer_checks(seed)) {
    options.seed = rng.next_u64();
    rows.push_back({c.layer, c.name, gradcheck(c.f, c.inputs, c.module->parameters(), options)});
  }

  Index total = 0, failed = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i == 0 || i == op_rows)
      fmt::print("\n{:<17} {:<62} {:>6} {:>12} {:>12} {:>9}  {}\n", i == 0 ? "op" : "layer", "case", "checks",
                 "max abs err", "max rel err", i == 0 ? "f32 gap" : "", "result");
    const Row& r = rows[i];
    total += r.report.checked;
    failed += r.report.ok() ? 0 : 1;
    fmt::print("{:<17} {:<62} {:>6} {:>12.2e} {:>12.2e} {:>9}  {}\n", r.what, r.name, r.report.checked,
               max_abs_error(r.report), max_rel_error(r.report), r.f32_gap, r.report.ok() ? "ok" : "FAILED");
    if (!r.report.ok()) fmt::print("{}", r.report.str());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("\n{} op cases over {} ops and {} layer cases, {} derivatives checked: {} ({:.2f} s)\n", op_rows,
             op_names().size(), rows.size() - op_rows, total,
             failed == 0 ? "all passed" : fmt::format("{} cases FAILED", failed), seconds);
  return static_cast<int>(failed == 0 ? ExitCode::ok : ExitCode::check_failed);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Gradient check of every tapegrad op and layer in float64 (central differences)"};
  std::uint64_t seed = 1;
  GradcheckOptions options = kStrictGradcheck;
  app.add_option("--seed", seed, "Seed of the random inputs and projections")->capture_default_str();
  app.add_option("--eps", options.eps, "Central-difference step")->capture_default_str()->check(examples::positive);
  if (const auto stop = examples::parse_command_line(app, "gradcheck_report", argc, argv)) return *stop;
  return run_program("gradcheck_report", [&] { return report(seed, options); });
}
