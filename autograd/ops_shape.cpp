// Shape changes: reshape (the same elements under another shape) and pick_positions (one row per
// sequence).
#include <algorithm>
#include <vector>

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

// [readme:op-state]
struct PickSaved {
  std::vector<std::int32_t> positions;  // the row each batch item picked, as the forward read them
  std::size_t heap_bytes() const { return buffer_bytes(positions); }
};
// [readme:op-state-end]

}  // namespace

// C = X viewed as `shape` (row-major order kept);  dX += dC viewed as X's shape
template <class T>
Var<T> reshape(Var<T> x, Shape shape, Where where) {
  Tape<T>& t = Tape<T>::of("reshape", {{"x", x}});
  const Shape s = t.node(x).val().shape();
  if (!shape.valid())
    fail<ShapeError>("reshape: the new shape is invalid (rank {}, batch {}, rows {}, cols {})", shape.rank, shape.batch,
                     shape.rows, shape.cols);
  if (shape.numel() != s.numel())
    fail<ShapeError>("reshape: x is {} ({} elements) but the new shape {} holds {}", s, s.numel(), shape, shape.numel());
  Node<T>& n = t.record("reshape", {x}, shape, where);
  // A copy, not a view: a node owns its value buffer (TensorT cannot alias another's), and sharing one
  // would need the tape to track which node owns it. The copy is one memcpy into a reused buffer.
  const TensorT<T>& X = t.node(x).val();
  std::copy(X.data(), X.data() + X.numel(), n.value.data());
  n.backward = [](Tape<T>& tp, Node<T>& node) {
    if (const auto dX = tp.input_node(node, 0).grad_whole()) write_grad(dX.grad->array(), node.grad.array(), dX.assign);
  };
  return t.commit(n);
}

// [readme:op]
// C[b] = X[b, p_b] (x (B, T, D), positions (B) -> (B, D));  dX[b, p_b] += dC[b], the other rows get nothing
template <class T>
Var<T> pick_positions(Var<T> x, const Ids& positions, Where where) {
  Tape<T>& t = Tape<T>::of("pick_positions", {{"x", x}});
  const Shape s = t.node(x).val().shape();
  if (s.rank != 3) fail<ShapeError>("pick_positions: x is {}; it must be batched (batch, positions, cols)", s);
  if (positions.rank() != 1 || positions.cols() != s.batch)
    fail<ShapeError>("pick_positions: positions are {} but x is {}; give one position per batch item: {}",
                     positions.shape(), s, s.batch);
  for (Index b = 0; b < s.batch; ++b)
    if (positions[b] < 0 || positions[b] >= s.rows)
      fail<ValueError>("pick_positions: position {} of batch item {} is outside [0, {}): x is {}", positions[b], b,
                       s.rows, s);
  Node<T>& n = t.record("pick_positions", {x}, Shape::mat(s.batch, s.cols), where);
  const TensorT<T>& X = t.node(x).val();
  auto C = n.value.mat();  // (B, D)
  for (Index b = 0; b < s.batch; ++b) C.row(b) = X.mat(b).row(positions[b]);
  if (n.requires_grad)
    n.template save<PickSaved>().positions.assign(positions.data(), positions.data() + positions.numel());
  n.backward = [](Tape<T>& tp, Node<T>& node) {
    TensorT<T>* dX = tp.input_node(node, 0).grad_sink();  // only the picked rows: the rest stay zero
    if (!dX) return;
    const auto& picked = node.template saved<PickSaved>().positions;
    const auto dC = node.grad.mat();  // (B, D)
    for (Index b = 0; b < dC.rows(); ++b) dX->mat(b).row(picked[static_cast<std::size_t>(b)]) += dC.row(b);
  };
  return t.commit(n);
}
// [readme:op-end]

#define TAPEGRAD_INSTANTIATE(T)                                      \
  template Var<T> reshape(Var<T>, Shape, Where);                    \
  template Var<T> pick_positions(Var<T>, const Ids&, Where);
TAPEGRAD_INSTANTIATE(float)
TAPEGRAD_INSTANTIATE(double)
#undef TAPEGRAD_INSTANTIATE  // each file its own: the library is built several files to a unit

}  // namespace tapegrad
