#pragma once
// LayerNorm and Dropout: the two layers a transformer block wraps around attention and its MLP.
//
//   LayerNorm  y = (x - mean) / sqrt(var + eps) * weight + bias over the last axis (the fused
//              layer_norm op); weight starts at ones, bias at zeros, as PyTorch's nn.LayerNorm.
//   Dropout    in training mode, zeroes each element with probability p and scales the rest by
//              1 / (1 - p), drawing from the module's random stream (Module::set_rng; a Trainer sets
//              its own, which checkpoints save); in evaluation mode, the identity.
// Neither initialises anything at random, so neither takes an Rng.

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/layers/module.hpp"

namespace tapegrad {

template <class T>
class LayerNorm : public Module<T> {
 public:
  LayerNorm(std::string name, Index dim, double eps = 1e-5);
  Var<T> forward(Var<T> x);  // (..., dim) -> (..., dim)
  TensorT<T> infer(const TensorT<T>& x) const;  // the same values without a tape (autograd/inference.hpp)

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

template <class T>
class Dropout : public Module<T> {
 public:
  Dropout(std::string name, double p);  // 0 <= p < 1
  // In training mode with p > 0 and no random stream set: UsageError naming the layer.
  Var<T> forward(Var<T> x);
  // The inference path (no tape) computes evaluation mode's values: x itself. In training mode with p > 0 it
  // would not be what forward() computes, so that is a UsageError naming the layer (check_inference alone
  // is that check).
  TensorT<T> infer(TensorT<T> x) const;
  void check_inference() const;
  double p() const { return p_; }

 private:
  double p_;
};

extern template class LayerNorm<float>;
extern template class LayerNorm<double>;
extern template class Dropout<float>;
extern template class Dropout<double>;

}  // namespace tapegrad
