#pragma once
// What the ops' files share, internal to autograd/: the calling thread's scratch buffers, the column sums
// of a row broadcast over every row, the row softmax behind softmax_rows and attention, and the macro that
// defines an op's function of one input. (The matrix products have a header of their own, gemm.hpp.)

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/parallel.hpp"
#include "tapegrad/core/tensor.hpp"

// The public function `fn` (ops.hpp declares it) recording the op `...` on its one input (or two), defined
// for every T and instantiated for float and double: TAPEGRAD_ONE_INPUT(relu, UnaryOp<T, unary::relu>)
// defines relu<T>(a, where) as apply(UnaryOp<T, unary::relu>{}, {a}, where) (grep "(relu," to find it), and
// TAPEGRAD_TWO_INPUTS(mse, Mse<T>) mse<T>(a, b, where) as apply(Mse<T>{}, {a, b}, where). Macros, because a
// function template and its explicit instantiations are written out once per function, and that is all
// these functions are.
#define TAPEGRAD_ONE_INPUT(fn, ...)          \
  template <class T>                         \
  Var<T> fn(Var<T> a, Where where) {         \
    return apply(__VA_ARGS__{}, {a}, where); \
  }                                          \
  template Var<float> fn(Var<float>, Where); \
  template Var<double> fn(Var<double>, Where);
#define TAPEGRAD_TWO_INPUTS(fn, ...)                     \
  template <class T>                                     \
  Var<T> fn(Var<T> a, Var<T> b, Where where) {           \
    return apply(__VA_ARGS__{}, {a, b}, where);          \
  }                                                      \
  template Var<float> fn(Var<float>, Var<float>, Where); \
  template Var<double> fn(Var<double>, Var<double>, Where);

namespace tapegrad::detail {

// ---- the calling thread's scratch ----
// Grow-only buffers of the calling thread for the arithmetic behind the ops (matrix products, the
// attention op's blocks, softmax rows): each grows to the largest size asked of it and then stays, so
// once a training step has run, a step allocates nothing. One buffer per use: uses that are live at the
// same time (a product's transposed operand while the attention op holds its block) take different ones.
// Each starts on a 64-byte boundary (AlignedAllocator), as a fresh tensor does: the attention op's
// blocks of weights depend on that (autograd/ops_attention.cpp).
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

// ---- column sums ----
// Column sums of a gradient, for the ops whose input is a row broadcast over every row of their output (a
// bias in add and affine, layer norm's gamma and beta): one place for the summation, so that ops that
// broadcast a row the same way give the same bits.

// Whether `s` is a row of `width` values, (width) or (1, width): what these ops broadcast over every row.
inline bool is_row_of(const Shape& s, Index width) {
  return s.rank <= 2 && s.batch == 1 && s.rows == 1 && s.cols == width;
}

// The pieces of write_column_sums (below), for an op that sums several gradients over the same rows in one
// pass (layer norm's gamma and beta): body(first, last) for ranges of 16 columns over the threads, as many as
// `passes` reads of the (rows x cols) values are worth; and the sums of columns [first, last) of `rows`
// written into grad's.
template <class F>
void for_column_ranges(Index rows, Index cols, double passes, F&& body) {
  parallel_for(cols, threads_for_elements(passes * static_cast<double>(rows) * static_cast<double>(cols)), body, 16);
}
template <class T, class Rows>
void write_column_sums_of(const GradWrite<T>& grad, const Rows& rows, Index first, Index last) {
  grad.add(grad.tensor->flat().row(0).array().segment(first, last - first),
           rows.middleCols(first, last - first).colwise().sum());
}

// grad, one row of values, += the column sums of `rows` (an array expression, one row per output row). A
// large pass is split in ranges of 16 columns over the threads (it would otherwise be a serial part of
// every step): each column is summed by one thread over the rows in the order one thread takes, and Eigen's
// packets start on the same columns (a multiple of 16 from the row's 64-byte aligned start), so the sums
// have the same bits at any thread count.
template <class T, class Rows>
void write_column_sums(const GradWrite<T>& grad, const Rows& rows) {
  for_column_ranges(rows.rows(), rows.cols(), 1,
                    [&](Index first, Index last) { write_column_sums_of(grad, rows, first, last); });
}

// ---- the row softmax ----
// Row-wise softmax over a block of rows, forward and backward: the arithmetic of softmax_rows
// (ops_rowwise.cpp) and of the attention op (ops_attention.cpp), in one place, so that the two compute
// every element the same way.

// What one row of a mask (nonzero = blocked) leaves open, read once per mask (not once per head) so that
// the softmax takes no exponential it would discard. `reach`: the entries up to and including the last
// open one (0 when every entry is blocked); every entry from `reach` on is blocked. `prefix`: every
// entry before `reach` is open, as in the rows of causal masks, key padding, or both.
struct MaskRow {
  Index reach = 0;
  bool prefix = false;
};

// What each row of `mask` (its flat view: every row of every batch item) leaves open, in the calling
// thread's scratch (above), which holds it until the thread reads another mask.
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
