#pragma once
// Linear: y = x W + b, with W (in, out) since rows are tokens (PyTorch stores W transposed): the layer
// that owns W and b. The function is the op affine(x, w, b) (autograd/ops.hpp), which it records (matmul
// without a bias); x is (N, in) or (B, T, in), and a batched x times the shared W is one
// (B*T, in) x (in, out) product.

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/required.hpp"
#include "tapegrad/layers/init.hpp"
#include "tapegrad/layers/module.hpp"

namespace tapegrad {

struct LinearOptions {
  Required<Index, "LinearOptions::in"> in;  // features of x's rows
  Required<Index, "LinearOptions::out"> out;
  bool bias = true;
  Initializer weight_init = Initializer::xavier_uniform();
};

template <class T>
class Linear : public Module<T> {
 public:
  Linear(std::string name, const LinearOptions& options, Rng& rng);
  Var<T> forward(Var<T> x);  // (..., in) -> (..., out)

  // Accessors return references; a parameter the layer was built without is a NameError naming it.
  Parameter<T>& weight() { return *weight_; }
  Parameter<T>& bias();
  bool has_bias() const { return bias_ != nullptr; }
  const LinearOptions& options() const { return options_; }
  // nn.Linear: "weight" (out, in), W transposed; "bias".
  TorchName torch_name(std::string_view local_name) const override {
    return {std::string(local_name), local_name == "weight"};
  }

 private:
  LinearOptions options_;
  Parameter<T>* weight_;
  Parameter<T>* bias_ = nullptr;
};

extern template class Linear<float>;
extern template class Linear<double>;

}  // namespace tapegrad
