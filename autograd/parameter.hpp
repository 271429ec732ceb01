#pragma once
// A trainable tensor: value, gradient and a dotted name ("attn.wq"). Parameters live in layers and
// outlive tapes; a tape only refers to them, and backward() adds into Parameter::grad (so gradients
// accumulate until zero_grad(), as in PyTorch). Tapes and optimizers hold pointers to parameters:
// keep them at stable addresses (members of a layer, not elements of a growing vector).

#include <string>
#include <utility>

#include "tapegrad/core/tensor.hpp"

namespace tapegrad {

template <class T>
struct Parameter {
  std::string name;
  TensorT<T> value;
  TensorT<T> grad;  // same shape as value

  Parameter() = default;
  Parameter(std::string name_, TensorT<T> value_)
      : name(std::move(name_)), value(std::move(value_)), grad(value.shape()) {}

  // Sets the value, checking the shape first: a ShapeError naming the parameter, and nothing changed,
  // if `v` has another shape. (value is a public field for the ops and optimizers that read it in place;
  // code that loads or sets weights goes through here.)
  void assign(const TensorT<T>& v) {
    if (v.shape() != value.shape())
      fail<ShapeError>("parameter '{}': cannot assign a {} value to a parameter of shape {}", name, v.shape(),
                       value.shape());
    value = v;
  }

  void zero_grad() {
    grad.resize(value.shape());
    grad.set_zero();
  }
};

}  // namespace tapegrad
