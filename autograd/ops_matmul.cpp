// Matrix products: a b, a b^T, a^T b; 2-D, batched, and batched times a shared 2-D weight.
#include "autograd/ops.hpp"

namespace tapegrad {
namespace {

enum class Form : Index { ab, abt, atb };

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
  const Form form = static_cast<Form>(n.attr0);
  Node<T>& na = t.input(n, 0);
  Node<T>& nb = t.input(n, 1);
  const TensorT<T>& A = na.val();
  const TensorT<T>& B = nb.val();
  const TensorT<T>& dC = n.grad;
  TensorT<T>* dA = na.grad_sink();
  TensorT<T>* dB = nb.grad_sink();

  if (A.rank() == 3 && B.rank() == 2) {
    if (form == Form::ab) {
      if (dA) dA->flat().noalias() += dC.flat() * B.mat().transpose();
      if (dB) dB->mat().noalias() += A.flat().transpose() * dC.flat();
    } else {
      if (dA) dA->flat().noalias() += dC.flat() * B.mat();
      if (dB) dB->mat().noalias() += dC.flat().transpose() * A.flat();
    }
    return;
  }
  for (Index i = 0; i < A.batch(); ++i) {
    switch (form) {
      case Form::ab:
        if (dA) dA->mat(i).noalias() += dC.mat(i) * B.mat(i).transpose();
        if (dB) dB->mat(i).noalias() += A.mat(i).transpose() * dC.mat(i);
        break;
      case Form::abt:
        if (dA) dA->mat(i).noalias() += dC.mat(i) * B.mat(i);
        if (dB) dB->mat(i).noalias() += dC.mat(i).transpose() * A.mat(i);
        break;
      case Form::atb:
        if (dA) dA->mat(i).noalias() += B.mat(i) * dC.mat(i).transpose();
        if (dB) dB->mat(i).noalias() += A.mat(i) * dC.mat(i);
        break;
    }
  }
}

template <class T>
Var<T> product(const char* op, Form form, Var<T> a, Var<T> b, Where where) {
  Tape<T>& t = Tape<T>::of(op, {{"a", a}, {"b", b}});
  const Shape sa = t.node(a).val().shape();
  const Shape sb = t.node(b).val().shape();
  const Shape out = product_shape(op, form, sa, sb);

  Node<T>& n = t.record(op, {a, b}, out, where);
  n.attr0 = static_cast<Index>(form);
  const TensorT<T>& A = t.node(a).val();
  const TensorT<T>& B = t.node(b).val();
  TensorT<T>& C = n.value;
  if (sa.rank == 3 && sb.rank == 2) {
    if (form == Form::ab)
      C.flat().noalias() = A.flat() * B.mat();
    else
      C.flat().noalias() = A.flat() * B.mat().transpose();
  } else {
    for (Index i = 0; i < C.batch(); ++i) {
      switch (form) {
        case Form::ab: C.mat(i).noalias() = A.mat(i) * B.mat(i); break;
        case Form::abt: C.mat(i).noalias() = A.mat(i) * B.mat(i).transpose(); break;
        case Form::atb: C.mat(i).noalias() = A.mat(i).transpose() * B.mat(i); break;
      }
    }
  }
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
