// Shape changes: reshape (the same elements under another shape) and pick_positions (one row per
// sequence).
#include <algorithm>
#include <vector>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

// C = X viewed as `shape` (row-major order kept);  dX += dC viewed as X's shape
template <class T>
struct Reshape {
  static constexpr const char* name = "reshape";
  static constexpr const char* inputs[] = {"x"};
  Shape shape;

  void forward(ForwardContext<T>& ctx, const TensorT<T>& x) const {
    const Shape s = x.shape();
    if (!shape.valid())
      fail<ShapeError>("reshape: the new shape is invalid (rank {}, batch {}, rows {}, cols {})", shape.rank,
                       shape.batch, shape.rows, shape.cols);
    if (shape.numel() != s.numel())
      fail<ShapeError>("reshape: x is {} ({} elements) but the new shape {} holds {}", s, s.numel(), shape,
                       shape.numel());
    // A copy, not a view: a node owns its value buffer (TensorT cannot alias another's), and sharing one
    // would need the tape to track which node owns it. The copy is one memcpy into a reused buffer.
    TensorT<T>& C = ctx.output(shape);
    std::copy(x.data(), x.data() + x.numel(), C.data());
  }
  static void backward(BackwardContext<T>& ctx, const OpInput<T>& x) { x.grad.add(ctx.grad_output().array()); }
};

// [readme:op]
// C[b] = X[b, p_b] (x (B, T, D), positions (B) -> (B, D));  dX[b, p_b] += dC[b], the other rows get nothing
template <class T>
struct PickPositions {
  static constexpr const char* name = "pick_positions";
  static constexpr const char* inputs[] = {"x"};
  struct Saved {
    std::vector<std::int32_t> positions;  // the row each batch item picked, as the forward read them
    std::size_t heap_bytes() const { return buffer_bytes(positions); }  // for Tape::bytes()
  };
  const Ids* positions = nullptr;  // a setting, read by the forward

  void forward(ForwardContext<T, Saved>& ctx, const TensorT<T>& x) const {
    const Shape s = x.shape();
    if (s.rank != 3) fail<ShapeError>("pick_positions: x is {}; it must be batched (batch, positions, cols)", s);
    if (positions->rank() != 1 || positions->cols() != s.batch)
      fail<ShapeError>("pick_positions: positions are {} but x is {}; give one position per batch item: {}",
                       positions->shape(), s, s.batch);
    for (Index b = 0; b < s.batch; ++b)
      if ((*positions)[b] < 0 || (*positions)[b] >= s.rows)
        fail<ValueError>("pick_positions: position {} of batch item {} is outside [0, {}): x is {}", (*positions)[b], b,
                         s.rows, s);
    auto C = ctx.output(Shape::mat(s.batch, s.cols)).mat();  // (B, D); recorded once every check has passed
    for (Index b = 0; b < s.batch; ++b) C.row(b) = x.mat(b).row((*positions)[b]);
    if (ctx.needs_grad()) ctx.saved().positions.assign(positions->data(), positions->data() + positions->numel());
  }
  static void backward(BackwardContext<T, Saved>& ctx, const OpInput<T>& x) {
    TensorT<T>* dX = detail::zeroed_grad(x.grad);  // only the picked rows are added to: the rest stay zero
    if (!dX) return;
    const auto& picked = ctx.saved().positions;
    const auto dC = ctx.grad_output().mat();  // (B, D)
    for (Index b = 0; b < dC.rows(); ++b) dX->mat(b).row(picked[static_cast<std::size_t>(b)]) += dC.row(b);
  }
};

}  // namespace

template <class T>
Var<T> pick_positions(Var<T> x, const Ids& positions, Where where) {
  return apply(PickPositions<T>{.positions = &positions}, {x}, where);
}
// [readme:op-end]

template <class T>
Var<T> reshape(Var<T> x, Shape shape, Where where) {
  return apply(Reshape<T>{.shape = shape}, {x}, where);
}

template Var<float> reshape(Var<float>, Shape, Where);
template Var<double> reshape(Var<double>, Shape, Where);
template Var<float> pick_positions(Var<float>, const Ids&, Where);
template Var<double> pick_positions(Var<double>, const Ids&, Where);

}  // namespace tapegrad
