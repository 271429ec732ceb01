#pragma once
// Initialisation schemes, all drawn from the seeded Rng (so a seed fixes every initial weight on every
// platform). Weights are (fan_in, fan_out), as rows are tokens: y = x W.

#include <string>

#include "tapegrad/core/rng.hpp"
#include "tapegrad/core/tensor.hpp"

namespace tapegrad {

struct Initializer {
  enum class Kind { zeros, normal, xavier_uniform, xavier_normal, identity_plus_noise };
  Kind kind = Kind::xavier_uniform;
  double scale = 1.0;  // normal: std; xavier: gain; identity_plus_noise: noise std

  static Initializer zeros() { return {Kind::zeros, 0}; }
  static Initializer normal(double std) { return {Kind::normal, std}; }
  // Glorot & Bengio (2010): U(-a, a), a = gain sqrt(6 / (fan_in + fan_out)).
  static Initializer xavier_uniform(double gain = 1) { return {Kind::xavier_uniform, gain}; }
  // N(0, s^2), s = gain sqrt(2 / (fan_in + fan_out)).
  static Initializer xavier_normal(double gain = 1) { return {Kind::xavier_normal, gain}; }
  // The identity (ones on the diagonal of a possibly rectangular matrix) plus N(0, noise^2): attention
  // that starts as the parameter-free version and learns away from it.
  static Initializer identity_plus_noise(double noise) { return {Kind::identity_plus_noise, noise}; }

  std::string describe() const;
  // Fills t (rank 1 or 2; a rank-1 tensor counts as 1 x n) from rng.
  template <class T>
  void apply(TensorT<T>& t, Rng& rng) const;
  // A new tensor of `shape`, filled by apply(): a layer's initial weight.
  template <class T>
  TensorT<T> make(Shape shape, Rng& rng) const {
    TensorT<T> t(shape);
    apply(t, rng);
    return t;
  }
};

}  // namespace tapegrad
