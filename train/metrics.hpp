#pragma once
// Metrics: what the training loop measures besides the loss, on training batches (over a window of
// steps) and on evaluation data. A metric is a mean: each batch contributes a Tally (a sum and a count),
// and the metric is the total sum over the total count, so batches of any size combine exactly.
//
//   trainer.add_metric("accuracy", metrics::accuracy);             // argmax of the output vs batch.labels
//   trainer.add_metric("mse", metrics::mean_squared_error);        // output vs batch.targets
//   trainer.add_metric("mae", [](const Tensor& out, const TensorBatch& b) {   // a user's own
//     return Tally{(out.array() - b.targets.array()).abs().template cast<double>().sum(),
//                  static_cast<double>(out.numel())};
//   });

#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/core/tensor.hpp"

namespace tapegrad {

struct Tally {
  double sum = 0;
  double count = 0;
  Tally& operator+=(const Tally& o) {
    sum += o.sum;
    count += o.count;
    return *this;
  }
  double mean() const;  // NaN when nothing was counted
  bool operator==(const Tally&) const = default;
};

// Rows of `output` (.., classes) whose largest entry is at the row's label; rows labelled kIgnoreLabel
// do not count. ShapeError unless there is one label per row.
Tally count_correct(const Tensor& output, const Ids& labels);
// Squared differences of `output` and `targets`, per element. ShapeError unless the shapes match.
Tally squared_error(const Tensor& output, const Tensor& targets);

// The library's metrics, for any batch type with `labels` (Ids) or `targets` (Tensor). In their own
// namespace, so that a variable named `accuracy` does not shadow them.
namespace metrics {
inline constexpr auto accuracy = [](const Tensor& output, const auto& batch) {
  return count_correct(output, batch.labels);
};
inline constexpr auto mean_squared_error = [](const Tensor& output, const auto& batch) {
  return squared_error(output, batch.targets);
};
}  // namespace metrics

// Named values in a fixed order: a curve point's "train_loss", "eval_accuracy", ...
struct NamedValue {
  std::string name;
  double value = 0;
  bool operator==(const NamedValue&) const = default;
};
using NamedValues = std::vector<NamedValue>;

// The value named `name`; NameError listing the names there are if none is.
double value_of(const NamedValues& values, std::string_view name);

// A metric's sums since the last curve point (the trainer's window of a metric).
struct MetricWindow {
  std::string name;
  Tally tally;
  bool operator==(const MetricWindow&) const = default;
};

}  // namespace tapegrad
