// Matrix products: a b, a b^T, a^T b; 2-D, batched, and batched times a shared 2-D weight.
#include "tapegrad/autograd/ops.hpp"
#include <type_traits>
#include <vector>

#include "tapegrad/autograd/small_gemm.hpp"
#include "tapegrad/core/parallel.hpp"

namespace tapegrad {
namespace {

using Form = detail::ProductForm;  // a b, a^T b or a b^T

struct ProductSaved {
  Form form = Form::ab;
};

// Eigen's GEMM packing buffers, kept from product to product (per thread). Eigen's own product makes a
// blocking object per call and takes these from malloc, about 1 MB at d = 256: glibc then maps and
// unmaps them with every product, and the step spends its time page-faulting them in again (W4 at one
// thread: 44 ms against 28 ms with the buffers kept). The blocking sizes are Eigen's own for the shape
// (computeProductBlockingSizes, one thread, as Eigen's product computes them), so the arithmetic, and
// every result, is exactly that of `C.noalias() += A * B`.
template <class T>
class KeptBlocking : public Eigen::internal::level3_blocking<T, T> {
 public:
  // For a column-major product of (rows x depth) by (depth x cols).
  KeptBlocking(Index rows, Index cols, Index depth) {
    this->m_mc = rows;
    this->m_nc = cols;
    this->m_kc = depth;
    Eigen::internal::computeProductBlockingSizes<T, T, 1>(this->m_kc, this->m_mc, this->m_nc, Index{1});
    auto& space = workspace();
    const auto need_a = static_cast<std::size_t>(this->m_mc * this->m_kc);
    const auto need_b = static_cast<std::size_t>(this->m_kc * this->m_nc);
    if (space.a.size() < need_a) space.a.resize(need_a);  // grows to the largest shape, then stays
    if (space.b.size() < need_b) space.b.resize(need_b);
    this->m_blockA = space.a.data();
    this->m_blockB = space.b.data();
  }

 private:
  struct Space {
    std::vector<T, AlignedAllocator<T>> a, b;
  };
  static Space& workspace() {
    thread_local Space space;
    return space;
  }
};

// C (m x n) += op(A) op(B) through Eigen's sequential GEMM with kept buffers. C is row-major, so the
// product is computed as the column-major C^T = op(B)^T op(A)^T, as Eigen does for a row-major result.
// The blocking is that of a product of `blocking_m` rows (the whole product, when this is a range of its
// rows: see gemm).
template <class T>
void eigen_gemm_kept(Form form, const T* a, Index a_cols, const T* b, Index b_cols, T* c, Index m, Index n, Index k,
                     Index blocking_m) {
  using Eigen::ColMajor;
  using Eigen::RowMajor;
  KeptBlocking<T> blocking(n, blocking_m, k);  // C^T is n x m, depth k
  // C^T (n x m) = op(B)^T (n x k) op(A)^T (k x m). A row-major X read as column-major is X^T.
  auto run = [&](auto lhs_order, auto rhs_order) {
    constexpr int L = decltype(lhs_order)::value, R = decltype(rhs_order)::value;
    Eigen::internal::general_matrix_matrix_product<Index, T, L, false, T, R, false, ColMajor, 1>::run(
        n, m, k, b, b_cols, a, a_cols, c, 1, n, T(1), blocking, nullptr);
  };
  using Col = std::integral_constant<int, ColMajor>;
  using Row = std::integral_constant<int, RowMajor>;
  switch (form) {
    case Form::ab: run(Col{}, Col{}); break;   // B^T: b (k x n) read column-major; A^T likewise
    case Form::atb: run(Col{}, Row{}); break;  // (A^T)^T = A: a (k x m) stored row-major, read as is
    case Form::abt: run(Row{}, Col{}); break;  // (B^T)^T = B: b (n x k) row-major, read as is
  }
}

// C (m x n) = op(A) op(B), or C += when not `assign` (a gradient already written this pass). A is
// stored (a_rows x a_cols) and B (b_rows x b_cols), row-major; `form` says which one is read
// transposed. Small products go to libxsmm's kernels when tapegrad has them (autograd/small_gemm.hpp),
// the rest to Eigen's sequential GEMM with kept buffers. When it pays (core/parallel.hpp) and `may_split`,
// C's rows are split over the threads: each thread runs that same GEMM on its rows, with the blocking of
// the whole product, from a row that is a multiple of 16. Eigen's kernel sums every element over the
// depth in an order that depends only on the blocking and on the kind of panel the element falls in
// (full panels of 4 rows of C, or the remainder, handled with other accumulators); with the same blocking
// and ranges that start on panel boundaries, each element is summed exactly as on one thread, and the
// result is bit-identical at any thread count (tests/test_parallel.cpp checks it).
template <class T>
void gemm(Form form, const T* a, Index a_rows, Index a_cols, const T* b, Index b_rows, Index b_cols, T* c,
          bool assign, bool may_split = true) {
  const Index m = form == Form::atb ? a_cols : a_rows;
  const Index k = form == Form::atb ? a_rows : a_cols;
  const Index n = form == Form::abt ? b_rows : b_cols;
  if (detail::small_gemm(form, m, n, k, a, b, c, !assign)) return;
  // Where Eigen's product would run its GEMM (not a vector product, not the coefficient-wise path of tiny
  // products), run that GEMM with kept buffers.
  if (m > 1 && n > 1 && k > 0 && k + m + n >= EIGEN_GEMM_TO_COEFFBASED_THRESHOLD) {
    const double macs = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    parallel_for(
        m, may_split && split_product(macs),
        [&](Index r0, Index r1) {
          T* rows = c + r0 * n;  // C's rows r0..r1; op(A)'s rows are A's rows, or A's columns for a^T b
          if (assign) MatrixMap<T>(rows, r1 - r0, n).setZero();
          eigen_gemm_kept(form, form == Form::atb ? a + r0 : a + r0 * a_cols, a_cols, b, b_cols, rows, r1 - r0, n, k, m);
        },
        16);
    return;
  }
  const SingleThreaded one_thread;  // Eigen's other paths, on this thread
  const ConstMatrixMap<T> A(a, a_rows, a_cols), B(b, b_rows, b_cols);
  MatrixMap<T> C(c, m, n);
  auto into = [&](const auto& product) {
    if (assign)
      C.noalias() = product;
    else
      C.noalias() += product;
  };
  switch (form) {
    case Form::ab: into(A * B); break;
    case Form::atb: into(A.transpose() * B); break;
    case Form::abt: into(A * B.transpose()); break;
  }
}

// The multiply-adds of `items` products of m x k by k x n.
double product_macs(Index items, Index m, Index n, Index k) {
  return static_cast<double>(items) * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

// The product's shape, or a ShapeError naming both operands.
Shape product_shape(const char* op, Form form, const Shape& sa, const Shape& sb) {
  if (sa.rank == 1 || sb.rank == 1)
    fail<ShapeError>("{}: a is {} and b is {}; both must be matrices (2-D) or batches of matrices (3-D)", op, sa,
                     sb);
  if (sa.rank == 2 && sb.rank == 3)
    fail<ShapeError>("{}: a is {} (one matrix) but b is {} (a batch); put the batched operand first", op, sa, sb);
  if (sa.rank == 3 && sb.rank == 2 && form == Form::atb)
    fail<ShapeError>("{}: a is {} (a batch) and b is {} (one matrix); a^T b needs both batched or both 2-D", op,
                     sa, sb);
  if (sa.rank == 3 && sb.rank == 3 && sa.batch != sb.batch)
    fail<ShapeError>("{}: batch sizes differ: a is {}, b is {}", op, sa, sb);
  const Index a_inner = form == Form::atb ? sa.rows : sa.cols;
  const Index b_inner = form == Form::abt ? sb.cols : sb.rows;
  if (a_inner != b_inner) {
    const char* hint = form == Form::abt   ? " (a b^T pairs the columns of a with the columns of b)"
                       : form == Form::atb ? " (a^T b pairs the rows of a with the rows of b)"
                                           : "";
    fail<ShapeError>("{}: inner dimensions differ: a is {}, b is {}{}", op, sa, sb, hint);
  }
  const Index m = form == Form::atb ? sa.cols : sa.rows;
  const Index n = form == Form::abt ? sb.rows : sb.cols;
  return sa.rank == 3 ? Shape::batched(sa.batch, m, n) : Shape::mat(m, n);
}

// Forward was C = op(A) op(B). So now, per batch item:
//   C = A B:    dA += dC B^T,  dB += A^T dC
//   C = A B^T:  dA += dC B,    dB += dC^T A
//   C = A^T B:  dA += B dC^T,  dB += A dC
// With a shared 2-D B, A and C are viewed flat, (B*M, K) and (B*M, N): one product per rule.
template <class T>
void product_backward(Tape<T>& t, Node<T>& n) {
  const Form form = n.template saved<ProductSaved>().form;
  Node<T>& na = t.input(n, 0);
  Node<T>& nb = t.input(n, 1);
  const TensorT<T>& A = na.val();
  const TensorT<T>& B = nb.val();
  const TensorT<T>& dC = n.grad;
  // Both written whole (when a is b, the first write assigns and the second adds).
  const auto dA = na.grad_whole();
  const auto dB = nb.grad_whole();
  const bool shared = A.rank() == 3 && B.rank() == 2;
  const Index items = shared ? 1 : A.batch();
  const Index ar = shared ? A.shape().flat_rows() : A.rows(), ac = A.cols(), br = B.rows(), bc = B.cols();
  const Index cr = shared ? dC.shape().flat_rows() : dC.rows(), cc = dC.cols();
  // Batch items in parallel when it pays, each item's products on one thread (bit-identical to one
  // thread: no two items write the same gradient block). A single item's products may split their rows.
  const Index m = form == Form::atb ? ac : ar, k = form == Form::atb ? ar : ac;
  const bool split = items > 1 && split_product(2 * product_macs(items, m, cc, k));
  parallel_for(items, split, [&](Index first, Index last) {
    const bool may_split = items == 1;
    for (Index i = first; i < last; ++i) {
      const T* a = A.mat(i).data();
      const T* b = B.mat(i).data();
      const T* dc = dC.mat(i).data();
      switch (form) {
        case Form::ab:
          if (dA) gemm(Form::abt, dc, cr, cc, b, br, bc, dA.grad->mat(i).data(), dA.assign, may_split);
          if (dB) gemm(Form::atb, a, ar, ac, dc, cr, cc, dB.grad->mat(i).data(), dB.assign, may_split);
          break;
        case Form::abt:
          if (dA) gemm(Form::ab, dc, cr, cc, b, br, bc, dA.grad->mat(i).data(), dA.assign, may_split);
          if (dB) gemm(Form::atb, dc, cr, cc, a, ar, ac, dB.grad->mat(i).data(), dB.assign, may_split);
          break;
        case Form::atb:
          if (dA) gemm(Form::abt, b, br, bc, dc, cr, cc, dA.grad->mat(i).data(), dA.assign, may_split);
          if (dB) gemm(Form::ab, a, ar, ac, dc, cr, cc, dB.grad->mat(i).data(), dB.assign, may_split);
          break;
      }
    }
  });
}

template <class T>
Var<T> product(const char* op, Form form, Var<T> a, Var<T> b, Where where) {
  Tape<T>& t = Tape<T>::of(op, {{"a", a}, {"b", b}});
  const Shape sa = t.node(a).val().shape();
  const Shape sb = t.node(b).val().shape();
  const Shape out = product_shape(op, form, sa, sb);

  Node<T>& n = t.record(op, {a, b}, out, where);
  n.template saved<ProductSaved>().form = form;
  const TensorT<T>& A = t.node(a).val();
  const TensorT<T>& B = t.node(b).val();
  TensorT<T>& C = n.value;
  const bool shared = sa.rank == 3 && sb.rank == 2;  // one (B*M, K) x (K, N) product
  const Index items = shared ? 1 : C.batch();
  const Index ar = shared ? sa.flat_rows() : sa.rows;
  const Index k = form == Form::atb ? sa.rows : sa.cols;
  parallel_for(items, items > 1 && split_product(product_macs(items, C.rows(), C.cols(), k)), [&](Index first, Index last) {
    for (Index i = first; i < last; ++i)
      gemm(form, A.mat(i).data(), ar, sa.cols, B.mat(i).data(), sb.rows, sb.cols, C.mat(i).data(), true, items == 1);
  });
  n.backward = &product_backward<T>;
  return t.commit(n);
}

}  // namespace

template <class T>
Var<T> matmul(Var<T> a, Var<T> b, Where where) {
  return product("matmul", Form::ab, a, b, where);
}

template <class T>
Var<T> matmul_bt(Var<T> a, Var<T> b, Where where) {
  return product("matmul_bt", Form::abt, a, b, where);
}

template <class T>
Var<T> matmul_at(Var<T> a, Var<T> b, Where where) {
  return product("matmul_at", Form::atb, a, b, where);
}

#define TAPEGRAD_INSTANTIATE(T)                     \
  template Var<T> matmul(Var<T>, Var<T>, Where);    \
  template Var<T> matmul_bt(Var<T>, Var<T>, Where); \
  template Var<T> matmul_at(Var<T>, Var<T>, Where);
TAPEGRAD_INSTANTIATE(float)
TAPEGRAD_INSTANTIATE(double)

}  // namespace tapegrad
