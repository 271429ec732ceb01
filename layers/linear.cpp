#include "tapegrad/layers/linear.hpp"

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {

template <class T>
Linear<T>::Linear(std::string name, const LinearOptions& options, Rng& rng)
    : Module<T>(std::move(name)), options_(options) {
  if (options.in <= 0 || options.out <= 0)
    fail<ValueError>("linear '{}': in and out must be positive, got in {} and out {}", this->path(), options.in,
                     options.out);
  weight_ = &this->register_parameter("weight", options.weight_init.make<T>(Shape::mat(options.in, options.out), rng));
  if (options.bias) bias_ = &this->register_parameter("bias", TensorT<T>(Shape::vec(options.out)));
}

template <class T>
Var<T> Linear<T>::forward(Var<T> x) {
  Tape<T>& t = Tape<T>::of("linear", {{"x", x}});
  const Shape s = x.shape();
  if (s.rank == 1 || s.cols != options_.in)
    fail<ShapeError>("linear '{}': x is {} but the layer maps rows of {} features to {}", this->path(), s, options_.in,
                     options_.out);
  return bias_ ? affine(x, t.param(*weight_), t.param(*bias_)) : matmul(x, t.param(*weight_));
}

template <class T>
Parameter<T>& Linear<T>::bias() {
  if (!bias_) fail<NameError>("linear '{}': has no bias (it was built with bias = false)", this->path());
  return *bias_;
}

template class Linear<float>;
template class Linear<double>;

}  // namespace tapegrad
