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

  void zero_grad() {
    grad.resize(value.shape());
    grad.set_zero();
  }
};

}  // namespace tapegrad
