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

// Where a backward rule writes one input's gradient, and how: `accumulate` is false on the first write of
// a backward pass, when the buffer holds stale values that stand for zeros, so each element is assigned
// instead of added (no pass of zero-filling first); true after. tensor is nullptr when no gradient is wanted.
template <class T>
struct GradWrite {
  TensorT<T>* tensor = nullptr;
  bool accumulate = false;
  explicit operator bool() const { return tensor != nullptr; }
  // piece += g (a view into *tensor and an expression of its shape): assigned while !accumulate.
  template <class Dst, class Src>
  void add(Dst&& piece, const Src& g) const {
    write_grad(std::forward<Dst>(piece), g, !accumulate);
  }
};

}  // namespace tapegrad
