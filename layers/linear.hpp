#pragma once
// Linear: y = x W + b, with W (in, out) since rows are tokens (PyTorch stores W transposed).
// x is (N, in) or (B, T, in); a batched x times the shared W is one (B*T, in) x (in, out) product.

#include <type_traits>

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/layers/init.hpp"
#include "tapegrad/layers/module.hpp"

namespace tapegrad {

struct LinearOptions {
  Index in = 0;
  Index out = 0;
  bool bias = true;
  Initializer weight_init = Initializer::xavier_uniform();
};

// x w, plus b when there is one (b may be null): the product of a linear map, for a layer that keeps its
// own weights (Linear, SelfAttention's projections, an untied LmHead, or a user's). With a bias it is one
// affine node (autograd/ops.hpp), else one matmul. x is (N, K) or (B, T, K), w (K, N_out). b's type is
// taken from w's, so that a literal nullptr is accepted.
template <class T>
Var<T> linear_map(Tape<T>& t, Var<T> x, Parameter<T>& w, std::type_identity_t<Parameter<T>>* b);

template <class T>
class Linear : public Module<T> {
 public:
  Linear(std::string name, const LinearOptions& options, Rng& rng);
  Var<T> forward(Var<T> x);  // (..., in) -> (..., out)
  // The same values without a tape (autograd/inference.hpp): generation's path.
  TensorT<T> infer(const TensorT<T>& x) const;

  // Accessors return references; a parameter the layer was built without is a NameError naming it.
  Parameter<T>& weight() { return *weight_; }
  Parameter<T>& bias();
  bool has_bias() const { return bias_ != nullptr; }
  const LinearOptions& options() const { return options_; }
  // nn.Linear: "weight" (out, in), W transposed; "bias".
  TorchName torch_name(std::string_view local_name) const override;

 private:
  LinearOptions options_;
  Parameter<T>* weight_;
  Parameter<T>* bias_ = nullptr;
};

extern template Var<float> linear_map(Tape<float>&, Var<float>, Parameter<float>&, Parameter<float>*);
extern template Var<double> linear_map(Tape<double>&, Var<double>, Parameter<double>&, Parameter<double>*);
extern template class Linear<float>;
extern template class Linear<double>;

}  // namespace tapegrad
