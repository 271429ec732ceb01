#pragma once
// Dropout: in training mode, zeroes each element with probability p and scales the rest by 1 / (1 - p)
// (the dropout op, autograd/ops.hpp), drawing from the module's random stream (Module::set_rng; a Trainer
// sets its own, which checkpoints save); in evaluation mode, the identity. It has no parameters and
// initialises nothing, so it takes no Rng.

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/layers/module.hpp"

namespace tapegrad {

template <class T>
class Dropout : public Module<T> {
 public:
  Dropout(std::string name, double p) : Module<T>(std::move(name)), p_(p) {
    if (!(p >= 0 && p < 1)) fail<ValueError>("dropout '{}': p must be in [0, 1), got {}", this->path(), p);
  }
  // In training mode with p > 0 and no random stream set: UsageError naming the layer.
  Var<T> forward(Var<T> x);
  double p() const { return p_; }

 private:
  double p_;
};

extern template class Dropout<float>;
extern template class Dropout<double>;

}  // namespace tapegrad
