#pragma once
// Matrix products of row-major matrices with row strides: C (+)= op(A) op(B), the one routine behind
// tapegrad's matmul ops and the attention op (which reads a head's columns of Q, K and V in place,
// through the strides). Two kernels do the arithmetic:
//  - libxsmm's JIT-generated kernels (Debian's libxsmm-dev), when tapegrad is built with it: every
//    product is a grid of blocks of at most kBlockRows x kBlockCols of C and kBlockDepth of the depth,
//    each one kernel call reading its operands in place (op(B) of a product of 256 rows or more packed
//    into column panels first) and writing C instead of adding into zeroed memory. They run the
//    workloads' products faster than Eigen's GEMM (OMP_NUM_THREADS=2 build/bench/gemm_threads prints both).
//  - Eigen's sequential GEMM with its packing buffers kept from product to product, without libxsmm.
//
// When a product is large enough (core/parallel.hpp), C's rows are split over the threads, each range
// starting on a multiple of the kernels' row block (64 rows; 16 with Eigen's), and with libxsmm's, from 4
// threads, a product of fewer than two row blocks a thread is cut into tiles of a row block by a group of
// 64-column blocks: each thread runs exactly the blocks, the kernels and the depth order one thread
// would, so results are bit-identical at any thread count.
//
// Internal to autograd/ (ops_matmul.cpp, ops_attention.cpp) and the benchmarks.

#include <string_view>

#include "tapegrad/core/shape.hpp"

namespace tapegrad::detail {

// The layout of a product a (m x k) times b (k x n): ab: a stored (m x k), b (k x n); atb: a stored
// (k x m) and read transposed; abt: b stored (n x k) and read transposed.
enum class ProductForm { ab, atb, abt };

// A row-major matrix operand: its first element and the distance between its rows, in elements (its
// width, or more for a block of columns of a wider matrix).
template <class T>
struct MatrixRef {
  const T* data;
  Index stride;
};

// The multiply-adds of `items` products of m x k by k x n (in double: no overflow), as core/parallel.hpp
// counts a product's work.
inline double product_macs(Index items, Index m, Index n, Index k) {
  return static_cast<double>(items) * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

// C (m x n, rows `c_stride` apart) = op(A) op(B), or C += op(A) op(B) when `accumulate` (the product is
// formed first and then added, so a sum of products comes out the same whichever product is written
// first). `may_split`: C may be split over the threads when that pays (false inside a region
// that is already one of several threads' work). `bias`, a row of n values (not with `accumulate`): C =
// op(A) op(B) + bias on every row, each element rounded once more after its product is complete, as
// by a separate add, but while the block of rows is still in cache.
template <class T>
void gemm(ProductForm form, Index m, Index n, Index k, MatrixRef<T> a, MatrixRef<T> b, T* c, Index c_stride,
          bool accumulate, bool may_split = true, const T* bias = nullptr);

// Which kernels gemm runs: libxsmm's where tapegrad is built with it and its JIT works on this machine,
// else Eigen's. Tests and benchmarks may switch to Eigen's (and back) between computations, not during
// one; switching to libxsmm's where there are none is a ValueError.
enum class GemmKernels { libxsmm, eigen };
GemmKernels gemm_kernels();
bool have_libxsmm();
void set_gemm_kernels(GemmKernels kernels);
std::string_view name(GemmKernels kernels);  // "libxsmm", "eigen"

// Whether the product of C's first c columns (c a multiple of 64) gives them the bits that the product of
// all n columns does: with libxsmm's kernels, each block of 64 columns being its own kernel calls; not
// with Eigen's, whose panels of columns, and the accumulators each panel uses, depend on n. (Rows split
// at multiples of 64, and a depth cut short where op(A) holds only zeros past it, keep the bits with
// either kind.)
bool product_columns_separable();

// Where a product of depth k whose op(A) is zero before depth `start` (a multiple of 64) may begin and
// give the bits of the whole product: `start` itself, or an earlier multiple of 64 (0 at worst). Summed
// from `start`, the depth falls into other kernel calls, and libxsmm's kernels for a depth under 12 do
// not sum as a chain continued from C does, nor does Eigen's path for tiny products (tests/test_gemm.cpp):
// a start is kept when every call, of the whole product and of the shortened one, spans 64 or more of the
// depth, or when both split it alike.
Index product_depth_start(Index k, Index start);

}  // namespace tapegrad::detail
