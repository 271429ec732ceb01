#include "tapegrad/autograd/gradcheck.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "tapegrad/core/rng.hpp"

namespace tapegrad {
namespace {

std::string position_of(const Shape& s, Index i) {
  const Index c = i % s.cols, r = (i / s.cols) % s.rows, b = i / (s.cols * s.rows);
  if (s.rank == 1) return fmt::format("[{}]", c);
  if (s.rank == 2) return fmt::format("[{}, {}]", r, c);
  return fmt::format("[{}, {}, {}]", b, r, c);
}

// One derivative: analytic against numeric, counted into the tensor's summary and the report.
void compare(GradcheckReport& report, GradcheckTensorSummary& summary, Index index, std::string position,
             double analytic, double numeric) {
  const GradcheckOptions& opts = report.options;
  GradcheckEntry e{.tensor = summary.name,
                   .index = index,
                   .position = std::move(position),
                   .analytic = analytic,
                   .numeric = numeric,
                   .abs_error = std::abs(analytic - numeric)};
  // Below atol, magnitudes are finite-difference noise: dividing by them would report noise as 100%.
  const double scale = std::max({std::abs(analytic), std::abs(numeric), opts.atol});
  e.rel_error = scale > 0 ? e.abs_error / scale : 0;
  e.tolerance = opts.atol + opts.rtol * std::abs(numeric);
  const bool failed = !(e.abs_error <= e.tolerance);  // NaN fails
  e.tolerance_used = std::isnan(e.abs_error) ? INFINITY : e.abs_error / e.tolerance;
  ++summary.checked;
  ++report.checked;
  // std::max would drop a NaN (NaN < x is false): a NaN error stays the maximum, as it is the worst.
  const auto worse = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); };
  summary.max_abs_error = worse(summary.max_abs_error, e.abs_error);
  summary.max_rel_error = worse(summary.max_rel_error, e.rel_error);
  summary.max_tolerance_used = worse(summary.max_tolerance_used, e.tolerance_used);
  if (report.checked == 1 || e.tolerance_used > report.closest_to_tolerance.tolerance_used)
    report.closest_to_tolerance = e;
  if (failed) {
    ++summary.failed;
    ++report.failed;
    if (report.failures.size() < opts.max_failures_listed) report.failures.push_back(std::move(e));
  }
}

}  // namespace

GradcheckReport gradcheck(const GradcheckFn& f, const std::vector<GradcheckInput>& given,
                          std::span<Parameter<double>* const> params, const GradcheckOptions& opts) {
  for (std::size_t k = 0; k < params.size(); ++k)
    if (params[k] == nullptr) fail<ValueError>("gradcheck: parameter {} of {} is a null pointer", k, params.size());
  std::vector<GradcheckInput> inputs = given;  // a copy: perturbed in place
  // The parameters (values and gradients) put back as they were, however gradcheck ends.
  std::vector<Parameter<double>> before;
  for (auto* p : params) before.push_back(*p);
  const detail::AtExit restore{[&] {
    for (std::size_t k = 0; k < params.size(); ++k) *params[k] = before[k];
  }};
  GradcheckReport report;
  report.options = opts;
  Rng rng(opts.seed, 0x67726164);
  Tape<double> tape;
  std::vector<Var<double>> vars;
  const auto forward = [&](bool with_grad) {
    tape.reset();
    tape.set_grad_enabled(with_grad);
    vars.clear();
    for (const auto& in : inputs) vars.push_back(tape.input(in.value));
    Var<double> out = f(tape, vars);
    tape.check(out, "gradcheck", "the function's result");
    return out;
  };

  // The analytic gradients of phi = sum(out * R), R drawn once.
  for (auto* p : params) p->zero_grad();
  Var<double> out = forward(true);
  const Shape s = out.value().shape();
  if (s.numel() == 0) fail<ShapeError>("gradcheck: the function's output is {}, with nothing to check", s);
  TensorD projection(s);
  for (Index i = 0; i < s.numel(); ++i) projection[i] = rng.normal();
  tape.backward(out, projection);
  // The inputs' (the tape is reset for every difference below; the parameters' stay in Parameter::grad,
  // which a recording with gradients off does not touch).
  std::vector<TensorD> analytic;
  for (const auto& v : vars) analytic.push_back(tape.grad(v));

  // (phi(x + eps u) - phi(x - eps u)) / 2 eps, where step(h) sets x to x + h u (the caller puts x back).
  const auto difference = [&](auto&& step) {
    // phi = sum(out * R) at the current inputs and parameters.
    const auto phi = [&] { return (forward(false).value().array() * projection.array()).sum(); };
    step(opts.eps);
    const double plus = phi();
    step(-opts.eps);
    return (plus - phi()) / (2 * opts.eps);
  };
  const auto check_tensor = [&](const std::string& name, TensorD& x, const TensorD& grad) {
    GradcheckTensorSummary summary{name, x.shape()};
    if (opts.fast) {
      for (int d = 0; d < opts.directions; ++d) {
        TensorD u(x.shape());
        for (Index i = 0; i < u.numel(); ++i) u[i] = rng.normal();
        const double norm = std::sqrt(u.array().square().sum());
        if (norm > 0) u.array() /= norm;
        const TensorD original = x;
        const double numeric = difference([&](double h) { x.array() = original.array() + h * u.array(); });
        x = original;
        compare(report, summary, d, fmt::format(" along direction {}", d), (grad.array() * u.array()).sum(), numeric);
      }
    } else {
      for (Index i = 0; i < x.numel(); ++i) {
        const double original = x[i];
        const double numeric = difference([&](double h) { x[i] = original + h; });
        x[i] = original;
        compare(report, summary, i, position_of(x.shape(), i), grad[i], numeric);
      }
    }
    report.tensors.push_back(summary);
  };
  for (std::size_t k = 0; k < inputs.size(); ++k) check_tensor(inputs[k].name, inputs[k].value, analytic[k]);
  for (auto* p : params) check_tensor(p->name, p->value, p->grad);
  return report;
}

std::string GradcheckReport::str() const {
  if (checked == 0) return "gradcheck FAILED: there was nothing to check: the inputs and parameters hold no elements\n";
  std::string s =
      fmt::format("gradcheck {}: {} derivatives checked, {} failed ({} mode, eps {:g}, atol {:g}, rtol {:g})\n",
                  ok() ? "passed" : "FAILED", checked, failed, options.fast ? "fast" : "full", options.eps,
                  options.atol, options.rtol);
  for (const auto& t : tensors)
    s += fmt::format(
        "  {:<16} {:>10}  {:>6} checked  {:>4} failed  max abs error {:.2e}  max rel error {:.2e}  "
        "up to {:.0f}% of the tolerance\n",
        t.name, t.shape, t.checked, t.failed, t.max_abs_error, t.max_rel_error, 100 * t.max_tolerance_used);
  auto line = [](const GradcheckEntry& e) {
    return fmt::format(
        "{}{}: analytic {:.10g}, numeric {:.10g}, abs error {:.2e}, rel error {:.2e}, "
        "{:.0f}% of its tolerance",
        e.tensor, e.position, e.analytic, e.numeric, e.abs_error, e.rel_error, 100 * e.tolerance_used);
  };
  s += fmt::format("  closest to its tolerance: {}\n", line(closest_to_tolerance));
  for (const auto& e : failures) s += fmt::format("  MISMATCH {}\n", line(e));
  if (static_cast<std::size_t>(failed) > failures.size())
    s += fmt::format("  ... and {} more mismatches\n", static_cast<std::size_t>(failed) - failures.size());
  return s;
}

}  // namespace tapegrad
