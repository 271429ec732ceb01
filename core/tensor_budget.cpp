#include "tapegrad/core/tensor_budget.hpp"

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/escape.hpp"
#include "tapegrad/core/tensor.hpp"  // detail::charge_tensor_bytes

namespace tapegrad {
namespace {
thread_local TensorBudget* innermost_budget = nullptr;
}  // namespace

TensorBudget::TensorBudget(std::size_t bytes, std::string what)
    : limit_(bytes), what_(std::move(what)), outer_(innermost_budget) {
  innermost_budget = this;
}

TensorBudget::~TensorBudget() { innermost_budget = outer_; }

TensorBudget* TensorBudget::current() { return innermost_budget; }

void TensorBudget::charge(std::size_t bytes) {
  for (const TensorBudget* b = this; b; b = b->outer_)
    if (bytes > b->limit_ - b->used_)
      fail<LimitError>("{}: its tensors would take more than {} ({} taken, {} more asked)", b->what_,
                       format_bytes(static_cast<double>(b->limit_)), format_bytes(static_cast<double>(b->used_)),
                       format_bytes(static_cast<double>(bytes)));
  for (TensorBudget* b = this; b; b = b->outer_) b->used_ += bytes;
}

void detail::charge_tensor_bytes(std::size_t bytes) {
  if (innermost_budget) innermost_budget->charge(bytes);
}

}  // namespace tapegrad
