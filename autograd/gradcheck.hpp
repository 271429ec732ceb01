#pragma once
// gradcheck: compares the gradients the tape computes with central finite differences, in float64.
//
// The function under test maps named inputs (and any parameters it reads through tape.param) to an
// output of any shape. The output is reduced to a scalar with a fixed random projection,
// phi = sum(out * R) with R ~ N(0, 1): an all-ones projection would hide, for example, a missing
// softmax backward (softmax rows sum to 1, so sum(softmax(x)) has zero gradient whatever the rule).
//
// Every element of every input and parameter is perturbed by +-eps (or, in fast mode, every tensor
// along a few random directions) and (phi(x + eps) - phi(x - eps)) / 2 eps is compared with the
// analytic d phi / dx. Parameters are restored bit for bit, their gradients too.
//
//   auto report = gradcheck([](Tape<double>& t, std::span<const Var<double>> in) {
//     return softmax_rows(matmul(in[0], in[1]));
//   }, {{"a", a}, {"b", b}});
//   CHECK_MESSAGE(report.ok(), report.str());

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tapegrad/autograd/tape.hpp"

namespace tapegrad {

struct GradcheckOptions {
  double eps = 1e-6;  // central-difference step
  // An entry passes when |analytic - numeric| <= atol + rtol |numeric| (PyTorch's gradcheck rule). The
  // bounds are the ones tapegrad's own ops and layers are held to: float64 central differences at eps 1e-6
  // agree with the rules to about 1e-9, so these leave a margin of about 100x and still catch any wrong
  // rule (PyTorch's defaults, atol 1e-5 and rtol 1e-3, are looser).
  double atol = 1e-7;
  double rtol = 1e-6;
  std::uint64_t seed = 0;  // the projection R and the fast mode's directions
  // Fast mode: per tensor, compare directional derivatives along `directions` random unit vectors
  // instead of every element; for inputs too large to perturb one element at a time.
  bool fast = false;
  int directions = 8;
  std::size_t max_failures_listed = 20;
};

// The default bounds, by the name the tests and examples/gradcheck_report give them.
inline constexpr GradcheckOptions kStrictGradcheck{};

// One compared derivative. It passes when abs_error <= tolerance; tolerance_used says how close it came.
struct GradcheckEntry {
  std::string tensor;    // input or parameter name
  Index index = -1;      // flat element index, or the direction number in fast mode
  std::string position;  // "[1, 2]" in the tensor's shape, or "direction 3"
  double analytic = 0;
  double numeric = 0;
  double abs_error = 0;       // |analytic - numeric|
  double rel_error = 0;       // |analytic - numeric| / max(|analytic|, |numeric|, atol): for reading, not the rule
  double tolerance = 0;       // atol + rtol |numeric|: the most abs_error may be
  double tolerance_used = 0;  // abs_error / tolerance: up to 1 passes (NaN: infinite)
};

struct GradcheckTensorSummary {
  std::string name;
  Shape shape;
  Index checked = 0;
  Index failed = 0;
  double max_abs_error = 0;       // the largest abs_error of its entries
  double max_rel_error = 0;       // the largest rel_error (not always the same entry's)
  double max_tolerance_used = 0;  // the largest tolerance_used: above 1, some entry failed
};

struct GradcheckReport {
  GradcheckOptions options;
  Index checked = 0;
  Index failed = 0;
  std::vector<GradcheckTensorSummary> tensors;  // inputs, then parameters, in the order given
  std::vector<GradcheckEntry> failures;         // the first options.max_failures_listed mismatches
  // The entry with the largest tolerance_used, over every input and parameter: the one closest to its
  // tolerance, or furthest past it. Its abs_error and rel_error need not be the largest ones.
  GradcheckEntry closest_to_tolerance;

  bool ok() const { return failed == 0 && checked > 0; }
  std::string str() const;  // a readable multi-line report
};

struct GradcheckInput {
  std::string name;
  TensorD value;
};

using GradcheckFn = std::function<Var<double>(Tape<double>&, std::span<const Var<double>> inputs)>;

GradcheckReport gradcheck(const GradcheckFn& f, const std::vector<GradcheckInput>& inputs,
                          std::span<Parameter<double>* const> params = {}, const GradcheckOptions& options = {});

}  // namespace tapegrad
