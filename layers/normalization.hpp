#pragma once
// LayerNorm: y = (x - mean) / sqrt(var + eps) * weight + bias over the last axis (the fused layer_norm
// op); weight starts at ones, bias at zeros, as PyTorch's nn.LayerNorm. It initialises nothing at random,
// so it takes no Rng. Dropout, the other layer a transformer block wraps around attention and its MLP, is
// in layers/dropout.hpp.

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/layers/module.hpp"

namespace tapegrad {

template <class T>
class LayerNorm : public Module<T> {
 public:
  LayerNorm(std::string name, Index dim, double eps = 1e-5);
  Var<T> forward(Var<T> x);  // (..., dim) -> (..., dim)

  Parameter<T>& weight() { return *weight_; }
  Parameter<T>& bias() { return *bias_; }
  Index dim() const { return dim_; }
  double eps() const { return eps_; }

 private:
  Index dim_;
  double eps_;
  Parameter<T>* weight_;
  Parameter<T>* bias_;
};

extern template class LayerNorm<float>;
extern template class LayerNorm<double>;

}  // namespace tapegrad
