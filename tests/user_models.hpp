#pragma once
// What a user writes, for the tests of the generic parts (train/): an MLP built from the public layers,
// rebuildable from its file (a kind, a Config with fields(), model_record()), and two small dense data
// sets for it.

#include <string>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/layers/linear.hpp"
#include "tapegrad/train/data_source.hpp"

namespace tapegrad::test {

// x (N, in) -> tanh(x W1 + b1) W2 + b2.
class Mlp : public Module<float> {
 public:
  struct Config {
    Index in = 2, hidden = 8, out = 2;
    std::uint64_t seed = 0;
    template <class S, class F>
    static void fields(S& s, F&& field) {
      field("in", s.in, "inputs", at_least(1));
      field("hidden", s.hidden, "hidden units", at_least(1));
      field("out", s.out, "outputs", at_least(1));
      field("seed", s.seed, "seed of the initial weights");
    }
  };
  static constexpr std::string_view kind = "test_mlp";

  explicit Mlp(const Config& c)
      : Module<float>(), config_(c), rng_(c.seed), hidden_("hidden", {.in = c.in, .out = c.hidden}, rng_),
        out_("out", {.in = c.hidden, .out = c.out}, rng_) {
    register_child(hidden_);
    register_child(out_);
  }
  Var<float> forward(Var<float> x) { return out_.forward(tanh(hidden_.forward(x))); }
  ModelRecord model_record() const override { return {std::string(kind), to_settings(config_)}; }

 private:
  Config config_;
  Rng rng_;
  Linear<float> hidden_, out_;
};

// y = x . (1, -2, 0.5) + 0.3 for x ~ N(0, 1): a regression an MLP fits closely.
inline TensorSource regression_data(Index n, std::uint64_t seed, const std::string& name) {
  Rng rng(seed);
  Tensor x(Shape::mat(n, 3)), y(Shape::mat(n, 1));
  for (Index i = 0; i < n; ++i) {
    for (Index j = 0; j < 3; ++j) x.at(i, j) = static_cast<float>(rng.normal());
    y.at(i, 0) = x.at(i, 0) - 2 * x.at(i, 1) + 0.5f * x.at(i, 2) + 0.3f;
  }
  return TensorSource(name, std::move(x), std::move(y));
}

// Two classes of points x ~ N(0, I2): whether x0 + x1 > 0 (`quadrants`: whether x0 x1 > 0).
inline TensorSource classification_data(Index n, std::uint64_t seed, bool quadrants = false) {
  Rng rng(seed);
  Tensor x(Shape::mat(n, 2));
  Ids y(Shape::vec(n));
  for (Index i = 0; i < n; ++i) {
    x.at(i, 0) = static_cast<float>(rng.normal());
    x.at(i, 1) = static_cast<float>(rng.normal());
    y[i] = (quadrants ? x.at(i, 0) * x.at(i, 1) : x.at(i, 0) + x.at(i, 1)) > 0 ? 1 : 0;
  }
  return TensorSource(quadrants ? "quadrants" : "halves", std::move(x), std::move(y));
}

}  // namespace tapegrad::test
