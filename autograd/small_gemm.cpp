#include "tapegrad/autograd/small_gemm.hpp"

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tapegrad/core/tensor.hpp"

#ifdef TAPEGRAD_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

namespace tapegrad::detail {

#ifdef TAPEGRAD_HAVE_LIBXSMM

namespace {

// Up to 64^3 multiply-adds: where libxsmm's kernels beat Eigen's GEMM on this machine (bench/).
constexpr Index kMaxWork = 64 * 64 * 64;

// libxsmm is column-major. A row-major matrix is its transpose in column-major terms, so the
// row-major C (m x n) = A B is the column-major C^T (n x m) = B^T A^T: the kernel takes B first.
template <class T>
using Kernel = std::conditional_t<std::is_same_v<T, float>, libxsmm_smmfunction, libxsmm_dmmfunction>;

struct Key {
  Index m = -1, n = -1, k = -1;
  bool transposed_a = false;
  bool operator==(const Key&) const = default;
};

// Dispatching a kernel costs more than running a small one, so each thread keeps the kernels it
// has used: a fixed table, so that after the first step nothing is allocated.
template <class T>
Kernel<T> kernel(const Key& key) {
  struct Entry {
    Key key;
    Kernel<T> fn = nullptr;  // nullptr in a used entry: libxsmm has no kernel for this case
    bool used = false;
  };
  thread_local std::array<Entry, 64> cache{};
  for (auto& e : cache) {
    if (e.used && e.key == key) return e.fn;
    if (e.used) continue;
    static const bool initialised = [] {  // a free slot: dispatch once and remember either way
      libxsmm_init();
      return true;
    }();
    (void)initialised;
    const auto M = static_cast<libxsmm_blasint>(key.n), N = static_cast<libxsmm_blasint>(key.m),
               K = static_cast<libxsmm_blasint>(key.k);
    const libxsmm_blasint lda = M, ldb = key.transposed_a ? N : K, ldc = M;
    const int flags = key.transposed_a ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
    const T alpha = 1, beta = 0;
    if constexpr (std::is_same_v<T, float>)
      e.fn = libxsmm_smmdispatch(M, N, K, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
    else
      e.fn = libxsmm_dmmdispatch(M, N, K, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
    e.key = key;
    e.used = true;
    return e.fn;
  }
  return nullptr;  // the table is full: Eigen
}

// Grow-only scratch buffers (a transposed operand, a product to be added): no allocation once grown.
template <class T>
T* scratch(std::size_t n, int which) {
  thread_local std::array<std::vector<T, AlignedAllocator<T>>, 2> buffers;
  auto& b = buffers[static_cast<std::size_t>(which)];
  if (b.size() < n) b.resize(n);
  return b.data();
}

}  // namespace

bool have_small_gemm() { return true; }

bool small_gemm_takes(Index m, Index n, Index k) { return m > 0 && n > 0 && k > 0 && m * n * k <= kMaxWork; }

template <class T>
bool small_gemm(ProductForm form, Index m, Index n, Index k, const T* a, const T* b, T* c, bool accumulate) {
  if (!small_gemm_takes(m, n, k)) return false;
  const Kernel<T> fn = kernel<T>({m, n, k, form == ProductForm::atb});
  if (!fn) return false;
  if (form == ProductForm::abt) {  // b is stored (n x k): lay it out as (k x n) for the kernel
    T* bt = scratch<T>(static_cast<std::size_t>(k * n), 0);
    MatrixMap<T>(bt, k, n) = ConstMatrixMap<T>(b, n, k).transpose();
    b = bt;
  }
  if (!accumulate) {
    fn(b, a, c);
    return true;
  }
  // C += A B as Eigen does it: the product first, then one addition per element.
  T* product = scratch<T>(static_cast<std::size_t>(m * n), 1);
  fn(b, a, product);
  ArrayMap<T>(c, m * n) += ConstArrayMap<T>(product, m * n);
  return true;
}

#else  // without libxsmm: always Eigen

bool have_small_gemm() { return false; }

bool small_gemm_takes(Index, Index, Index) { return false; }

template <class T>
bool small_gemm(ProductForm, Index, Index, Index, const T*, const T*, T*, bool) {
  return false;
}

#endif

template bool small_gemm(ProductForm, Index, Index, Index, const float*, const float*, float*, bool);
template bool small_gemm(ProductForm, Index, Index, Index, const double*, const double*, double*, bool);

}  // namespace tapegrad::detail
