#pragma once
// Grow-only buffers of the calling thread for the arithmetic behind the ops (matrix products, the
// attention op's blocks, softmax rows): each grows to the largest size asked of it and then stays, so
// once a training step has run, a step allocates nothing. One buffer per use: uses that are live at the
// same time (a product's transposed operand while the attention op holds its block) take different ones.
// Each starts on a 64-byte boundary (AlignedAllocator), as a fresh tensor does: the attention op's
// blocks of weights depend on that (autograd/ops_attention.cpp). Internal to autograd/.

#include <cstddef>
#include <type_traits>

#include "tapegrad/core/parallel.hpp"
#include "tapegrad/core/tensor.hpp"

namespace tapegrad::detail {

enum class Scratch : std::size_t {
  transposed_operand,  // gemm: b of a b^T, transposed for libxsmm's kernels
  packed_operand,      // gemm: op(B) of a many-row product, in column panels for libxsmm's kernels
  packed_rows,         // gemm: one block of op(A)'s rows of a many-row a^T b, contiguous for the kernels
  product,             // gemm: a product formed before it is added into C
  eigen_packed_lhs,    // gemm: Eigen's packing buffers, kept from product to product
  eigen_packed_rhs,
  attention_block,   // attention: one item's (Tq, Tk) scores or their gradient
  softmax_row_dots,  // softmax backward: each short row's sum(dy y)
  mask_rows,         // softmax_rows, attention: what each row of a mask leaves open (MaskRow)
  attention_reach,   // attention: the keys each block of queries sees
  norm_row,          // layer_norm: one row of x in double, for its statistics
  norm_xhat,         // layer_norm backward: the normalised input, recomputed from x
  count
};
static_assert(static_cast<std::size_t>(Scratch::count) <= kScratchSlots);

// At least `size` elements of the calling thread's buffer for `use`; its contents are whatever the last
// user left there. The buffers are core/parallel.hpp's (thread_scratch_bytes): every thread's grows to the
// longest any thread asked for, so which thread meets which piece does not decide when one allocates.
template <class T>
T* thread_scratch(Scratch use, std::size_t size) {
  static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 64);
  return reinterpret_cast<T*>(thread_scratch_bytes(static_cast<std::size_t>(use), size * sizeof(T)));
}

}  // namespace tapegrad::detail
