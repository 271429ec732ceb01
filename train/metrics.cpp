#include "tapegrad/train/metrics.hpp"

#include <limits>

#include "tapegrad/autograd/ops.hpp"  // kIgnoreLabel

namespace tapegrad {

double Tally::mean() const { return count > 0 ? sum / count : std::numeric_limits<double>::quiet_NaN(); }

Tally count_correct(const Tensor& output, const Ids& labels) {
  const auto z = output.flat();
  if (labels.numel() != z.rows())
    fail<ShapeError>("accuracy: the output is {} ({} rows) but there are {} labels ({}); give one label per row",
                     output.shape(), z.rows(), labels.numel(), labels.shape());
  Tally t;
  for (Index r = 0; r < z.rows(); ++r) {
    const std::int32_t label = labels[r];
    if (label == kIgnoreLabel) continue;
    Index best = 0;
    z.row(r).maxCoeff(&best);
    t.sum += best == label ? 1 : 0;
    t.count += 1;
  }
  return t;
}

Tally squared_error(const Tensor& output, const Tensor& targets) {
  if (output.shape() != targets.shape())
    fail<ShapeError>("mean_squared_error: the output is {} but the targets are {}", output.shape(), targets.shape());
  return {(output.array() - targets.array()).template cast<double>().square().sum(),
          static_cast<double>(output.numel())};
}

double value_of(const NamedValues& values, std::string_view name) {
  for (const auto& v : values)
    if (v.name == name) return v.value;
  std::vector<std::string> names;  // for the message alone: a lookup that finds its value allocates nothing
  for (const auto& v : values) names.push_back(v.name);
  fail<NameError>("value_of: no value named '{}'; there are {}", name,
                  names.empty() ? std::string("none") : quoted_list(names));
}

}  // namespace tapegrad
