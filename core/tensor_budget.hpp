#pragma once
// A bound on the tensor memory a scope may allocate: the defence of a loader against a file forged to ask
// for terabytes. Every tensor buffer (core/tensor.hpp's AlignedAllocator) is charged to its thread's
// innermost budget before the memory is taken.

#include <cstddef>
#include <string>

namespace tapegrad {

// A limit on the tensor memory one thread may allocate while the budget lives: what rebuilding a model from
// a file may take (model_from_checkpoint), so that a configuration forged to ask for terabytes is refused
// before the memory is taken, for any model, without the model's help. Every tensor buffer allocated on
// this thread (AlignedAllocator) is charged before it is taken; past the limit, a LimitError starting
// with `what`. Nothing is given back when a buffer is freed: the budget bounds what a scope asked for.
// Budgets nest: the innermost counts, and its charges count in the outer ones too.
class TensorBudget {
 public:
  TensorBudget(std::size_t bytes, std::string what);
  ~TensorBudget();
  TensorBudget(const TensorBudget&) = delete;
  TensorBudget& operator=(const TensorBudget&) = delete;

  std::size_t used() const { return used_; }
  // LimitError, and nothing charged, if `bytes` more would pass this budget or an outer one.
  void charge(std::size_t bytes);
  static TensorBudget* current();  // this thread's innermost, or nullptr

 private:
  std::size_t limit_, used_ = 0;
  std::string what_;
  TensorBudget* outer_;
};

}  // namespace tapegrad
