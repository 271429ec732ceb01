#include "tapegrad/layers/normalization.hpp"

#include <cmath>

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {

template <class T>
LayerNorm<T>::LayerNorm(std::string name, Index dim, double eps) : Module<T>(std::move(name)), dim_(dim), eps_(eps) {
  if (dim <= 0) fail<ValueError>("layer_norm '{}': the width must be positive, got {}", this->path(), dim);
  if (!(eps > 0) || !std::isfinite(eps))
    fail<ValueError>("layer_norm '{}': eps must be a positive number, got {}", this->path(), eps);
  weight_ = &this->register_parameter("weight", TensorT<T>(Shape::vec(dim), T(1)));
  bias_ = &this->register_parameter("bias", TensorT<T>(Shape::vec(dim)));
}

template <class T>
Var<T> LayerNorm<T>::forward(Var<T> x) {
  Tape<T>& t = Tape<T>::of("layer_norm", {{"x", x}});
  if (x.shape().cols != dim_)
    fail<ShapeError>("layer_norm '{}': x is {} but the layer normalises rows of {} values", this->path(), x.shape(),
                     dim_);
  return layer_norm(x, t.param(*weight_), t.param(*bias_), eps_);
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace tapegrad
