#pragma once
// Row-wise softmax over a block of rows, forward and backward: the arithmetic of softmax_rows
// (ops_softmax.cpp) and of the attention op (ops_attention.cpp), in one place, so that the two compute
// every element the same way. Internal to autograd/.

#include <cstdint>

#include "tapegrad/core/tensor.hpp"

namespace tapegrad::detail {

// What one row of a mask (nonzero = blocked) leaves open, read once per mask (not once per head) so that
// the softmax takes no exponential it would discard. `reach`: the entries up to and including the last
// open one (0 when every entry is blocked); every entry from `reach` on is blocked. `prefix`: every
// entry before `reach` is open, as in the rows of causal masks, key padding, or both.
struct MaskRow {
  Index reach = 0;
  bool prefix = false;
};

// What each row of `mask` (its flat view: every row of every batch item) leaves open, in the calling
// thread's scratch (autograd/scratch.hpp), which holds it until the thread reads another mask.
const MaskRow* read_mask_rows(const Mask& mask);

// A mask as the softmax reads it: for row r of x, its entries at blocked + (r % period) * cols and
// what they leave open at rows[r % period]. No mask when `blocked` is null.
struct RowMask {
  const std::uint8_t* blocked = nullptr;
  const MaskRow* rows = nullptr;
  Index period = 1;
};

// y = softmax(scale x) along each row of x (rows x cols, contiguous; y may be x). With a mask, blocked
// entries get exactly 0, a fully blocked row all zeros, and a NaN or Inf among a row's open entries makes
// that row's open outputs NaN. Rows may be split over threads when it pays and `may_split`.
template <class T>
void softmax_forward(const T* x, T* y, Index rows, Index cols, T scale, RowMask mask, bool may_split);

// dx = scale y (dy - sum(dy y)) along each row (assign), or dx += that; dx may be dy.
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, Index rows, Index cols, T scale, bool assign, bool may_split);

}  // namespace tapegrad::detail
