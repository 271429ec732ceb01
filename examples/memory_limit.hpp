#pragma once
// The examples' bound on what one training run may take, checked before anything is allocated.

#include <string_view>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/core/shape.hpp"
#include "tapegrad/layers/decoder_lm.hpp"

namespace tapegrad::examples {

inline constexpr double kMaxMemoryBytes = 8e9;  // what one run of an example may take

// A transformer language model's size, as the bound below reads it.
struct LmSize {
  double parameters = 0;
  Index batch = 0, positions = 0, layers = 0, d_model = 0, d_ff = 0, heads = 0;
};

// A rough bound on a run's memory: the parameters with their gradients and AdamW's two buffers, and a
// batch's activations and their gradients on the tape (per position and block: about 12 D for the norms,
// projections and residuals, 3 d_ff for the MLP, 3 H T for the attention weights). LimitError above
// kMaxMemoryBytes, naming the flags that lower it.
inline void check_lm_memory(const LmSize& s, std::string_view flags) {
  const double D = static_cast<double>(s.d_model), F = static_cast<double>(s.d_ff), T = static_cast<double>(s.positions),
               H = static_cast<double>(s.heads);
  const double activations =
      static_cast<double>(s.batch) * T * static_cast<double>(s.layers) * (12 * D + 3 * F + 3 * H * T);
  const double bytes = 4.0 * (4 * s.parameters + 2 * activations);
  if (bytes > kMaxMemoryBytes)
    fail<LimitError>("the model and a batch would take about {}, more than the {} this example allows; lower {}",
                     format_bytes(bytes), format_bytes(kMaxMemoryBytes), flags);
}

// check_lm_memory for a decoder language model, its parameters counted by the library (which reads them
// off the constructor, building nothing of the configuration's size).
inline void check_lm_memory(const DecoderLmConfig& c, Index batch, std::string_view flags) {
  const Index parameters = DecoderLm<float>::count_parameters_of(c);
  check_lm_memory({.parameters = static_cast<double>(parameters), .batch = batch, .positions = c.context,
                   .layers = c.n_layers, .d_model = c.d_model, .d_ff = feed_forward_width(c.d_model, c.d_ff),
                   .heads = c.n_heads},
                  flags);
}

}  // namespace tapegrad::examples
