#include "tapegrad/layers/dropout.hpp"

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {

template <class T>
Var<T> Dropout<T>::forward(Var<T> x) {
  if (!this->training() || p_ == 0) return x;
  if (!this->rng())
    fail<UsageError>(
        "dropout '{}': training mode with p {} needs a random stream; call set_rng on the model (a "
        "Trainer sets its own) or eval() to switch dropout off",
        this->path(), p_);
  return dropout(x, p_, *this->rng());
}

template class Dropout<float>;
template class Dropout<double>;

}  // namespace tapegrad
