#include "tapegrad/autograd/gradcheck.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>
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

class Checker {
 public:
  Checker(const GradcheckFn& f, const std::vector<GradcheckInput>& inputs, std::span<Parameter<double>* const> params,
          const GradcheckOptions& opts)
      : f_(f), inputs_(inputs), params_(params), opts_(opts), rng_(opts.seed, 0x67726164) {
    for (auto* p : params_) params_before_.emplace_back(p->value, p->grad);
  }
  // The parameters' values and gradients put back as they were, however gradcheck ends.
  ~Checker() {
    for (std::size_t k = 0; k < params_.size(); ++k) std::tie(params_[k]->value, params_[k]->grad) = params_before_[k];
  }

  GradcheckReport run() {
    report_.options = opts_;
    // The analytic gradients of phi = sum(out * R), R drawn once.
    for (auto* p : params_) p->zero_grad();
    Var<double> out = forward(true);
    const Shape s = out.value().shape();
    if (s.numel() == 0) fail<ShapeError>("gradcheck: the function's output is {}, with nothing to check", s);
    projection_.resize(s);
    for (Index i = 0; i < s.numel(); ++i) projection_[i] = rng_.normal();
    tape_.backward(out, projection_);
    std::vector<TensorD> analytic;  // inputs, then parameters
    for (const auto& v : vars_) analytic.push_back(tape_.grad(v));
    for (auto* p : params_) analytic.push_back(p->grad);
    for (std::size_t k = 0; k < inputs_.size(); ++k) check_tensor(inputs_[k].name, inputs_[k].value, analytic[k]);
    for (std::size_t k = 0; k < params_.size(); ++k)
      check_tensor(params_[k]->name, params_[k]->value, analytic[inputs_.size() + k]);
    return std::move(report_);
  }

 private:
  Var<double> forward(bool with_grad) {
    tape_.reset();
    tape_.set_grad_enabled(with_grad);
    vars_.clear();
    for (const auto& in : inputs_) vars_.push_back(tape_.input(in.value));
    Var<double> out = f_(tape_, vars_);
    tape_.check(out, "gradcheck", "the function's result");
    return out;
  }

  void check_tensor(const std::string& name, TensorD& x, const TensorD& analytic) {
    GradcheckTensorSummary summary{name, x.shape()};
    if (opts_.fast) {
      for (int d = 0; d < opts_.directions; ++d) {
        TensorD u(x.shape());
        for (Index i = 0; i < u.numel(); ++i) u[i] = rng_.normal();
        const double norm = std::sqrt(u.array().square().sum());
        if (norm > 0) u.array() /= norm;
        const TensorD original = x;
        const double numeric = difference([&](double h) { x.array() = original.array() + h * u.array(); });
        x = original;
        compare(summary, name, d, fmt::format(" along direction {}", d), (analytic.array() * u.array()).sum(), numeric);
      }
    } else {
      for (Index i = 0; i < x.numel(); ++i) {
        const double original = x[i];
        const double numeric = difference([&](double h) { x[i] = original + h; });
        x[i] = original;
        compare(summary, name, i, position_of(x.shape(), i), analytic[i], numeric);
      }
    }
    report_.tensors.push_back(summary);
  }

  // (phi(x + eps u) - phi(x - eps u)) / 2 eps, where step(h) sets x to x + h u (the caller puts x back).
  template <class Step>
  double difference(Step&& step) {
    // phi = sum(out * R) at the current inputs and parameters.
    const auto phi = [&] { return (forward(false).value().array() * projection_.array()).sum(); };
    step(opts_.eps);
    const double plus = phi();
    step(-opts_.eps);
    return (plus - phi()) / (2 * opts_.eps);
  }

  void compare(GradcheckTensorSummary& summary, const std::string& name, Index index, std::string position,
               double analytic, double numeric) {
    GradcheckEntry e{.tensor = name,
                     .index = index,
                     .position = std::move(position),
                     .analytic = analytic,
                     .numeric = numeric,
                     .abs_error = std::abs(analytic - numeric)};
    // Below atol, magnitudes are finite-difference noise: dividing by them would report noise as 100%.
    const double scale = std::max({std::abs(analytic), std::abs(numeric), opts_.atol});
    e.rel_error = scale > 0 ? e.abs_error / scale : 0;
    e.tolerance = opts_.atol + opts_.rtol * std::abs(numeric);
    const bool failed = !(e.abs_error <= e.tolerance);  // NaN fails
    e.tolerance_used = std::isnan(e.abs_error) ? INFINITY : e.abs_error / e.tolerance;
    ++summary.checked;
    ++report_.checked;
    // std::max would drop a NaN (NaN < x is false): a NaN error stays the maximum, as it is the worst.
    const auto worse = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); };
    summary.max_abs_error = worse(summary.max_abs_error, e.abs_error);
    summary.max_rel_error = worse(summary.max_rel_error, e.rel_error);
    summary.max_tolerance_used = worse(summary.max_tolerance_used, e.tolerance_used);
    if (report_.checked == 1 || e.tolerance_used > report_.closest_to_tolerance.tolerance_used)
      report_.closest_to_tolerance = e;
    if (failed) {
      ++summary.failed;
      ++report_.failed;
      if (report_.failures.size() < opts_.max_failures_listed) report_.failures.push_back(std::move(e));
    }
  }

  const GradcheckFn& f_;
  std::vector<GradcheckInput> inputs_;  // a copy: perturbed in place
  std::span<Parameter<double>* const> params_;
  std::vector<std::pair<TensorD, TensorD>> params_before_;  // each parameter's value and gradient
  GradcheckOptions opts_;
  Rng rng_;
  Tape<double> tape_;
  std::vector<Var<double>> vars_;
  TensorD projection_;
  GradcheckReport report_;
};

}  // namespace

GradcheckReport gradcheck(const GradcheckFn& f, const std::vector<GradcheckInput>& inputs,
                          std::span<Parameter<double>* const> params, const GradcheckOptions& options) {
  for (std::size_t k = 0; k < params.size(); ++k)
    if (params[k] == nullptr) fail<ValueError>("gradcheck: parameter {} of {} is a null pointer", k, params.size());
  return Checker(f, inputs, params, options).run();
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
