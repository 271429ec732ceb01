#include "tapegrad/layers/init.hpp"

#include <cmath>

namespace tapegrad {

// "zeros", "normal(std 0.02)", "xavier_uniform(gain 1)": the kind's name (as Kind spells it), and its scale.
std::string Initializer::describe() const {
  static constexpr const char* kNames[] = {"zeros", "normal", "xavier_uniform", "xavier_normal", "identity_plus_noise"};
  const auto k = static_cast<std::size_t>(kind);
  if (k >= std::size(kNames)) return "unknown";
  if (kind == Kind::zeros) return "zeros";
  const bool xavier = kind == Kind::xavier_uniform || kind == Kind::xavier_normal;
  return fmt::format("{}({} {:g})", kNames[k], xavier ? "gain" : "std", scale);
}

template <class T>
void Initializer::apply(TensorT<T>& t, Rng& rng) const {
  if (t.rank() == 3)
    fail<ShapeError>("init: {} applies to vectors and matrices, not to a {} tensor", describe(), t.shape());
  if (scale < 0) fail<ValueError>("init: {} has a negative scale", describe());
  const double fan_in = static_cast<double>(t.rows()), fan_out = static_cast<double>(t.cols());
  const double glorot = std::sqrt(2.0 / (fan_in + fan_out));
  const auto draw = [&](Index r, Index c) {  // element (r, c), drawn in row-major order
    switch (kind) {
      case Kind::zeros:
        return 0.0;
      case Kind::normal:
        return scale * rng.normal();
      case Kind::xavier_uniform:
        return rng.uniform(-1, 1) * scale * std::sqrt(3.0) * glorot;
      case Kind::xavier_normal:
        return rng.normal() * scale * glorot;
      case Kind::identity_plus_noise:
        return (r == c ? 1.0 : 0.0) + scale * rng.normal();
    }
    return 0.0;
  };
  for (Index r = 0; r < t.rows(); ++r)
    for (Index c = 0; c < t.cols(); ++c) t.at(r, c) = static_cast<T>(draw(r, c));
}

template void Initializer::apply(TensorT<float>&, Rng&) const;
template void Initializer::apply(TensorT<double>&, Rng&) const;

}  // namespace tapegrad
