#pragma once
// The catalogue of gradient checks over every layer, with respect to its inputs and every parameter:
// Linear, Embedding, positions, and SelfAttention single- and multi-head, parameter-free and
// learnable, with and without masks. The test suite runs each through gradcheck (float64);
// examples/gradcheck_report prints them.

#include <memory>
#include <string>
#include <vector>

#include "tapegrad/autograd/gradcheck.hpp"
#include "tapegrad/layers/module.hpp"

namespace tapegrad {

struct LayerCheck {
  std::string layer;  // "SelfAttention"
  std::string name;   // what the case exercises
  std::vector<GradcheckInput> inputs;       // inputs that take a gradient
  std::shared_ptr<Module<double>> module;   // owns the parameters under check
  GradcheckFn f;
};

// Fresh layers and inputs drawn from `seed`.
std::vector<LayerCheck> layer_checks(std::uint64_t seed = 1);

}  // namespace tapegrad
