#pragma once
// Products of small row-major matrices, the ones attention is made of when sequences and heads are
// short (8 x 16 by 16 x 8, 256 x 16 by 16 x 16): C (+)= op(A) op(B). Eigen's GEMM packs its operands
// before multiplying, which at these sizes costs more than the arithmetic, so when tapegrad is built
// with libxsmm (Debian's libxsmm-dev) such products go through its JIT-generated kernels instead,
// 2 to 4 times faster (bench/step_bench measures it; see the README's performance section). Larger
// products, and builds without libxsmm, use Eigen.
//
// Internal to autograd/ops_matmul.cpp.

#include "tapegrad/core/shape.hpp"

namespace tapegrad::detail {

// The layout of a product a (m x k) times b (k x n), for tapegrad's matmul ops and these kernels alike:
// ab: a (m x k), b (k x n); atb: a stored (k x m); abt: b stored (n x k).
enum class ProductForm { ab, atb, abt };

// C = op(A) op(B), or C += when `accumulate` (the sum is formed first and then added, as Eigen does,
// so results are the same whichever way a gradient is accumulated). Returns false, having done
// nothing, when the product is not small or there is no kernel for it.
template <class T>
bool small_gemm(ProductForm form, Index m, Index n, Index k, const T* a, const T* b, T* c, bool accumulate);

// Whether tapegrad was built with libxsmm.
bool have_small_gemm();

// Whether small_gemm takes a product of this size (it runs on one thread; bench/gemm_threads says so).
bool small_gemm_takes(Index m, Index n, Index k);

}  // namespace tapegrad::detail
