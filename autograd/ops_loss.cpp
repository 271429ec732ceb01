// Losses: cross-entropy fused with log-softmax, mean-squared error.
#include <cmath>
#include <vector>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/kernels.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

// L = mean over labelled rows r of -log softmax(x_r)[t_r], with p_r = softmax(x_r) saved. Backward:
// dx_r += dL / count * (p_r - onehot(t_r)) for labelled rows; ignored rows get nothing.
template <class T>
struct CrossEntropy {
  static constexpr const char* name = "cross_entropy";
  static constexpr const char* inputs[] = {"logits"};
  // What cross_entropy keeps: the softmax of each labelled row (zeros for ignored rows), each row's max
  // and sum of exponentials (scratch), the targets and how many rows are labelled.
  struct Saved {
    TensorT<T> probabilities;  // (rows, classes)
    TensorT<T> row_stats;      // (rows, 2): max, sum of exp(x - max)
    std::vector<std::int32_t> targets;
    std::int32_t ignore_label = kIgnoreLabel;
    Index labelled = 0;
    std::size_t heap_bytes() const { return buffer_bytes(probabilities, row_stats, targets); }
  };
  const Ids* targets = nullptr;
  std::int32_t ignore_label = kIgnoreLabel;

  void forward(Output<T, Saved>& out, const TensorT<T>& logits) const {
    const Shape s = logits.shape();
    if (s.rank == 1)
      fail<ShapeError>(
          "cross_entropy: logits are a vector of {}; they must be (rows, classes) or (batch, rows, "
          "classes)",
          s);
    if (s.cols == 0) fail<ShapeError>("cross_entropy: logits are {}, with no classes", s);
    const Shape expected = s.rank == 3 ? Shape::mat(s.batch, s.rows) : Shape::vec(s.rows);
    if (targets->shape() != expected && targets->shape() != Shape::vec(s.flat_rows()))
      fail<ShapeError>("cross_entropy: targets are {} but logits are {}; give one target per row: {}", targets->shape(),
                       s, expected);
    TensorT<T>& loss = out.make(Shape::scalar(), false);
    const auto X = logits.flat();
    Saved& saved = out.saved();
    // -log softmax(x)[t] = log(sum exp(x - max)) + max - x[t], for all rows at once: `row_stats` holds
    // each row's max and sum of exponentials, `probabilities` first the exponentials, then, divided by
    // their row sums, what the backward rule needs. Whole-matrix expressions on contiguous data vectorise
    // across rows (a row of 16 classes alone would not fill the registers evenly).
    saved.probabilities.resize(s);
    saved.row_stats.resize(Shape::mat(X.rows(), 2));
    auto P = saved.probabilities.flat();
    auto top = saved.row_stats.flat().col(0);
    auto sums = saved.row_stats.flat().col(1);
    // In row ranges over the threads when large (core/parallel.hpp: the ranges keep the packets in place).
    parallel_rows(
        X.rows(), X.cols(),
        [&](Index first, Index rows) {
          for (Index r = first; r < first + rows; ++r) {  // row by row: a row is one aligned packet
            top(r) = X.row(r).maxCoeff();
            P.row(r).array() = X.row(r).array() - top(r);
          }
          P.middleRows(first, rows).array() = P.middleRows(first, rows).array().exp();  // contiguous, vectorised
          for (Index r = first; r < first + rows; ++r) {
            sums(r) = P.row(r).sum();
            P.row(r) /= sums(r);
          }
        },
        4);
    // Each row's target checked as it is read (the node is dropped if one is refused).
    double total = 0;  // summed in double: a float sum over many rows would lose digits
    Index count = 0;
    for (Index r = 0; r < X.rows(); ++r) {
      const std::int32_t target = (*targets)[r];
      if (target == ignore_label) {
        P.row(r).setZero();
        continue;
      }
      if (target < 0 || target >= s.cols)
        fail<ValueError>("cross_entropy: target {} at row {} is outside [0, {}) and is not the ignore label {}", target,
                         r, s.cols, ignore_label);
      ++count;
      // Not log(P[t]): exp(x[t] - max) underflows to 0 for a confidently wrong row; max - x[t] is exact.
      total += static_cast<double>(std::log(sums(r)) + top(r) - X(r, target));
    }
    loss[0] = count == 0 ? T(0) : static_cast<T>(total / static_cast<double>(count));
    if (out.needs_grad()) {
      saved.targets.assign(targets->data(), targets->data() + targets->numel());
      saved.ignore_label = ignore_label;
      saved.labelled = count;
    }
  }

  static void backward(const Output<T, Saved>& out, const OpInput<T>& logits) {
    const Saved& saved = out.saved();
    if (saved.labelled == 0) return;  // no labelled row: a zero gradient, as one never taken reads
    const GradWrite<T> dX = detail::pieces(logits.grad);
    if (!dX) return;
    const T g = out.grad()[0] / static_cast<T>(saved.labelled);
    const auto P = saved.probabilities.flat();
    auto dx = dX.tensor->flat();
    parallel_rows(P.rows(), P.cols(), [&](Index first, Index count) {
      for (Index r = first; r < first + count; ++r) {
        const std::int32_t target = saved.targets[static_cast<std::size_t>(r)];
        if (target == saved.ignore_label) {
          if (!dX.accumulate) dx.row(r).setZero();
          continue;
        }
        dX.add(dx.row(r), g * P.row(r));
        dx(r, target) -= g;
      }
    });
  }
};

// L = mean((a - b)^2) over N elements. Backward: da += 2 (a - b) dL / N, db -= the same.
template <class T>
struct Mse {
  static constexpr const char* name = "mse";
  static constexpr const char* inputs[] = {"a", "b"};
  void forward(Output<T>& out, const TensorT<T>& a, const TensorT<T>& b) const {
    if (a.shape() != b.shape())
      fail<ShapeError>("mse: a is {} but b is {}; they must have the same shape", a.shape(), b.shape());
    if (a.numel() == 0) fail<ShapeError>("mse: a and b are {}, with no elements to average", a.shape());
    out.make(Shape::scalar(), false)[0] = (a.array() - b.array()).square().mean();
  }
  static void backward(const Output<T>& out, const OpInput<T>& a, const OpInput<T>& b) {
    const T g = T(2) * out.grad()[0] / static_cast<T>(a.value.numel());
    a.grad.add(g * (a.value.array() - b.value.array()));
    b.grad.add(-g * (a.value.array() - b.value.array()));
  }
};

}  // namespace

template <class T>
Var<T> cross_entropy(Var<T> logits, const Ids& targets, std::int32_t ignore_label, Where where) {
  return apply(CrossEntropy<T>{.targets = &targets, .ignore_label = ignore_label}, {logits}, where);
}

template Var<float> cross_entropy(Var<float>, const Ids&, std::int32_t, Where);
template Var<double> cross_entropy(Var<double>, const Ids&, std::int32_t, Where);

TAPEGRAD_TWO_INPUTS(mse, Mse<T>)  // autograd/kernels.hpp

}  // namespace tapegrad
