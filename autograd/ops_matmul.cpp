// Matrix products: a b, a b^T, a^T b; 2-D, batched, and batched times a shared 2-D weight; and x w + b.
#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/gemm.hpp"
#include "tapegrad/autograd/kernels.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

using Form = detail::ProductForm;  // a b, a^T b or a b^T
using detail::product_macs;

// C (m x n) = op(A) op(B), or C += when not `assign` (a gradient already written this pass), for
// contiguous operands: A stored (a_rows x a_cols), B (b_rows x b_cols), row-major; `form` says which one
// is read transposed. autograd/gemm.hpp does the arithmetic and splits C's rows over threads when it
// pays and `may_split`.
template <class T>
void gemm(Form form, const T* a, Index a_rows, Index a_cols, const T* b, Index b_rows, Index b_cols, T* c, bool assign,
          bool may_split = true) {
  const Index m = form == Form::atb ? a_cols : a_rows;
  const Index k = form == Form::atb ? a_rows : a_cols;
  const Index n = form == Form::abt ? b_rows : b_cols;
  detail::gemm<T>(form, m, n, k, {a, a_cols}, {b, b_cols}, c, n, !assign, may_split);
}

// The product's shape, or a ShapeError naming both operands.
Shape product_shape(const char* op, Form form, const Shape& sa, const Shape& sb) {
  if (sa.rank == 1 || sb.rank == 1)
    fail<ShapeError>("{}: a is {} and b is {}; both must be matrices (2-D) or batches of matrices (3-D)", op, sa, sb);
  if (sa.rank == 2 && sb.rank == 3)
    fail<ShapeError>("{}: a is {} (one matrix) but b is {} (a batch); put the batched operand first", op, sa, sb);
  if (sa.rank == 3 && sb.rank == 2 && form == Form::atb)
    fail<ShapeError>("{}: a is {} (a batch) and b is {} (one matrix); a^T b needs both batched or both 2-D", op, sa,
                     sb);
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

constexpr const char* kProductNames[] = {"matmul", "matmul_at", "matmul_bt"};  // by Form: ab, atb, abt

// C = op(A) op(B), per batch item (a shared 2-D B: A and C viewed flat, (B*M, K) and (B*M, N), one product).
// Backward, per batch item:
//   C = A B:    dA += dC B^T,  dB += A^T dC
//   C = A B^T:  dA += dC B,    dB += dC^T A
//   C = A^T B:  dA += B dC^T,  dB += A dC
template <class T, Form F>
struct Product {
  static constexpr const char* name = kProductNames[static_cast<int>(F)];
  static constexpr const char* inputs[] = {"a", "b"};

  void forward(Output<T>& out, const TensorT<T>& A, const TensorT<T>& B) const {
    const Shape sa = A.shape(), sb = B.shape();
    TensorT<T>& C = out.make(product_shape(name, F, sa, sb), false);
    const bool shared = sa.rank == 3 && sb.rank == 2;  // one (B*M, K) x (K, N) product
    const Index items = shared ? 1 : C.batch();
    const Index ar = shared ? sa.flat_rows() : sa.rows;
    const Index k = F == Form::atb ? sa.rows : sa.cols;
    parallel_for(items, items > 1 ? threads_for_product(product_macs(items, C.rows(), C.cols(), k)) : 1,
                 [&](Index first, Index last) {
                   for (Index i = first; i < last; ++i)
                     gemm(F, A.mat(i).data(), ar, sa.cols, B.mat(i).data(), sb.rows, sb.cols, C.mat(i).data(), true,
                          items == 1);
                 });
  }

  static void backward(const Output<T>& out, const OpInput<T>& a, const OpInput<T>& b) {
    const TensorT<T>& A = a.value;
    const TensorT<T>& B = b.value;
    const TensorT<T>& dC = out.grad();
    // Both written whole (when a is b, the first write assigns and the second adds).
    const GradWrite<T> dA = detail::pieces(a.grad), dB = detail::pieces(b.grad);
    const bool shared = A.rank() == 3 && B.rank() == 2;
    const Index items = shared ? 1 : A.batch();
    const Index ar = shared ? A.shape().flat_rows() : A.rows(), ac = A.cols(), br = B.rows(), bc = B.cols();
    // dC is op(A)'s rows by op(B)'s columns (m x cc) per item.
    const Index m = F == Form::atb ? ac : ar, k = F == Form::atb ? ar : ac, cc = dC.cols();
    // Batch items in parallel when it pays, each item's products on one thread (bit-identical to one
    // thread: no two items write the same gradient block). A single item's products may split their rows.
    const int threads = items > 1 ? threads_for_product(2 * product_macs(items, m, cc, k)) : 1;
    parallel_for(items, threads, [&](Index first, Index last) {
      const bool may_split = items == 1;
      for (Index i = first; i < last; ++i) {
        const T* a_i = A.mat(i).data();
        const T* b_i = B.mat(i).data();
        const T* dc = dC.mat(i).data();
        T* da = dA ? dA.tensor->mat(i).data() : nullptr;
        T* db = dB ? dB.tensor->mat(i).data() : nullptr;
        if constexpr (F == Form::ab) {
          if (da) gemm(Form::abt, dc, m, cc, b_i, br, bc, da, !dA.accumulate, may_split);
          if (db) gemm(Form::atb, a_i, ar, ac, dc, m, cc, db, !dB.accumulate, may_split);
        } else if constexpr (F == Form::abt) {
          if (da) gemm(Form::ab, dc, m, cc, b_i, br, bc, da, !dA.accumulate, may_split);
          if (db) gemm(Form::atb, dc, m, cc, a_i, ar, ac, db, !dB.accumulate, may_split);
        } else {
          if (da) gemm(Form::abt, b_i, br, bc, dc, m, cc, da, !dA.accumulate, may_split);
          if (db) gemm(Form::ab, a_i, ar, ac, dc, m, cc, db, !dB.accumulate, may_split);
        }
      }
    });
  }
};

// Y = X W + 1 b^T (X viewed flat, (rows, K)): the bias added to each block of rows as its product completes.
// Backward: dX += dY W^T,  dW += X^T dY,  db += the column sums of dY: matmul's rule itself (a 2-D or
// batched x times a 2-D w is one product of x viewed flat there too) and add's (write_column_sums), from dY
// in place.
template <class T>
struct Affine {
  static constexpr const char* name = "affine";
  static constexpr const char* inputs[] = {"x", "w", "b"};

  void forward(Output<T>& out, const TensorT<T>& X, const TensorT<T>& W, const TensorT<T>& b) const {
    const Shape sx = X.shape(), sw = W.shape(), sb = b.shape();
    if (sx.rank == 1 || sw.rank != 2)
      fail<ShapeError>("affine: x is {} and w is {}; x must be a matrix or a batch of matrices and w a matrix", sx, sw);
    if (sx.cols != sw.rows) fail<ShapeError>("affine: inner dimensions differ: x is {}, w is {}", sx, sw);
    if (!detail::is_row_of(sb, sw.cols))
      fail<ShapeError>("affine: b is {} but x w has {} columns; b must be a row of {} values ({} or 1x{})", sb, sw.cols,
                       sw.cols, sw.cols, sw.cols);
    TensorT<T>& Y = out.make({sx.rank, sx.batch, sx.rows, sw.cols}, false);
    detail::gemm<T>(Form::ab, sx.flat_rows(), sw.cols, sx.cols, {X.data(), sx.cols}, {W.data(), sw.cols}, Y.data(),
                    sw.cols, false, true, b.data());
  }

  static void backward(const Output<T>& out, const OpInput<T>& x, const OpInput<T>& w, const OpInput<T>& b) {
    // In the order of the writes (the first write to a gradient assigns, when one node has two roles).
    if (const GradWrite<T> db = detail::pieces(b.grad)) detail::write_column_sums(db, out.grad().flat().array());
    Product<T, Form::ab>::backward(out, x, w);  // x (viewed flat) times w: one product each for dX and dW
  }
};

}  // namespace

template <class T>
Var<T> affine(Var<T> x, Var<T> w, Var<T> b, Where where) {
  return apply(Affine<T>{}, {x, w, b}, where);
}

// matmul, matmul_bt and matmul_at, each recording the Product of its form (autograd/kernels.hpp).
TAPEGRAD_TWO_INPUTS(matmul, Product<T, Form::ab>)
TAPEGRAD_TWO_INPUTS(matmul_bt, Product<T, Form::abt>)
TAPEGRAD_TWO_INPUTS(matmul_at, Product<T, Form::atb>)

template Var<float> affine(Var<float>, Var<float>, Var<float>, Where);
template Var<double> affine(Var<double>, Var<double>, Var<double>, Where);

}  // namespace tapegrad
