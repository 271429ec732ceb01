#include "tapegrad/layers/init.hpp"

#include <cmath>

namespace tapegrad {

std::string Initializer::describe() const {
  switch (kind) {
    case Kind::zeros:
      return "zeros";
    case Kind::normal:
      return fmt::format("normal(std {:g})", scale);
    case Kind::xavier_uniform:
      return fmt::format("xavier_uniform(gain {:g})", scale);
    case Kind::xavier_normal:
      return fmt::format("xavier_normal(gain {:g})", scale);
    case Kind::identity_plus_noise:
      return fmt::format("identity_plus_noise(std {:g})", scale);
  }
  return "unknown";
}

template <class T>
void Initializer::apply(TensorT<T>& t, Rng& rng) const {
  if (t.rank() == 3)
    fail<ShapeError>("init: {} applies to vectors and matrices, not to a {} tensor", describe(), t.shape());
  if (scale < 0) fail<ValueError>("init: {} has a negative scale", describe());
  const double fan_in = static_cast<double>(t.rows()), fan_out = static_cast<double>(t.cols());
  const double glorot = std::sqrt(2.0 / (fan_in + fan_out));
  for (Index r = 0; r < t.rows(); ++r)
    for (Index c = 0; c < t.cols(); ++c) {
      double v = 0;
      switch (kind) {
        case Kind::zeros:
          v = 0;
          break;
        case Kind::normal:
          v = scale * rng.normal();
          break;
        case Kind::xavier_uniform:
          v = rng.uniform(-1, 1) * scale * std::sqrt(3.0) * glorot;
          break;
        case Kind::xavier_normal:
          v = rng.normal() * scale * glorot;
          break;
        case Kind::identity_plus_noise:
          v = (r == c ? 1.0 : 0.0) + scale * rng.normal();
          break;
      }
      t.at(r, c) = static_cast<T>(v);
    }
}

template void Initializer::apply(TensorT<float>&, Rng&) const;
template void Initializer::apply(TensorT<double>&, Rng&) const;

}  // namespace tapegrad
