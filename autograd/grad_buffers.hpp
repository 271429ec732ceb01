#pragma once
// How a backward rule writes a gradient buffer, and where a leaf read in place keeps its value and its
// gradient: devices for speed, which a first reading of the tape (autograd/tape.hpp) may skip. A gradient
// starts each backward pass as zero without its buffer being filled (a pass of zeros over every tensor
// saved): its first write assigns, later ones add. Op authors see this through InputGrad
// (autograd/function.hpp), which takes care of it.

#include <utility>

#include "tapegrad/core/tensor.hpp"

namespace tapegrad {

// dst = src when `assign`, dst += src otherwise: a gradient's first write of a backward pass assigns (see
// GradWrite below).
template <class Dst, class Src>
void write_grad(Dst&& dst, const Src& src, bool assign) {
  if (assign)
    dst = src;
  else
    dst += src;
}

// A leaf that reads its value where it lives instead of holding a copy (a parameter's value, a cache of
// keys and values, another tape's node) and writes its gradient there (Parameter::grad, the other node's).
template <class T>
struct InPlace {
  const TensorT<T>* value = nullptr;
  TensorT<T>* grad = nullptr;
  // When the gradient is another tape's node's, which may not have been written yet in that tape's backward
  // pass: that node's `fresh`, so the first write assigns as it would there. nullptr for a parameter's
  // gradient, which is always added to.
  bool* fresh = nullptr;
};

namespace detail {
[[noreturn]] void refuse_piece(const char* op, const char* input, Index rows, Index cols, Index piece_rows,
                               Index piece_cols, const Shape& shape);
}

// Where a backward rule writes one input's gradient, and how: `accumulate` is false on the first write of
// a backward pass, when the buffer holds stale values that stand for zeros, so each element is assigned
// instead of added (no pass of zero-filling first); true after. tensor is nullptr when no gradient is wanted.
// The library's own fast rules write through it (InputGrad's pieces, autograd/function.hpp); `op` and
// `input` name the gradient in the refusal of a piece write of the wrong size or outside it.
template <class T>
struct GradWrite {
  TensorT<T>* tensor = nullptr;
  bool accumulate = false;
  const char* op = "";
  const char* input = "";
  explicit operator bool() const { return tensor != nullptr; }
  // piece += g (a view into *tensor and an expression of its shape): assigned while !accumulate. A g of
  // another size than the piece, or a piece outside the gradient, is a ShapeError naming op and input.
  template <class Dst, class Src>
  void add(Dst&& piece, const Src& g) const {
    const bool inside =
        piece.size() == 0 || (&piece.coeffRef(0, 0) >= tensor->data() &&
                              &piece.coeffRef(piece.rows() - 1, piece.cols() - 1) < tensor->data() + tensor->numel());
    if (g.rows() != piece.rows() || g.cols() != piece.cols() || !inside)
      detail::refuse_piece(op, input, g.rows(), g.cols(), piece.rows(), piece.cols(), tensor->shape());
    write_grad(std::forward<Dst>(piece), g, !accumulate);
  }
};

}  // namespace tapegrad
