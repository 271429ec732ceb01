#pragma once
// What the two language-model programs (examples/char_lm, examples/gpt) share beyond the library: how they
// name an attention mode, their attention pictures, and a bigram table as a model the library's sampler
// draws from. Each program keeps only what differs: its data, its vocabulary and its settings.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/layers/generate.hpp"
#include "tapegrad/layers/self_attention.hpp"
#include "tapegrad/train/plot/plot.hpp"

namespace tapegrad::examples {

// How a table or a title names an attention mode: "parameter-free" or "learnable". Files and flags use
// the library's names, to_string(mode): "parameter_free", "learnable".
inline std::string_view attention_title(AttentionMode mode) {
  return mode == AttentionMode::learnable ? "learnable" : "parameter-free";
}

// One layer's heads side by side, each (T, T) with rows the queries and columns the keys (what
// DecoderLm::attention_maps gives for a layer), titled "<title>, head <h>", the tokens as labels.
inline std::string attention_layer_svg(const std::vector<Tensor>& heads, const std::vector<std::string>& labels,
                                       std::string_view title, bool show_values) {
  std::vector<std::string> pictures;
  for (std::size_t h = 0; h < heads.size(); ++h)
    pictures.push_back(heatmap_svg({.title = fmt::format("{}, head {}", title, h),
                                              .row_labels = labels,
                                              .col_labels = labels,
                                              .values = std::vector<double>(heads[h].data(), heads[h].data() + heads[h].numel()),
                                              .show_values = show_values}));
  return svg_row(pictures);
}

// A bigram table (probability(previous, next) over vocab() tokens) as a LanguageModel with a context of one
// token: its logits are log P(next | the last token), so the library's sampler draws from it as from the
// trained models, with the same random numbers for the same seed and stream.
template <class Bigram>
class BigramModel final : public LanguageModel<double> {
 public:
  explicit BigramModel(const Bigram& bigram) : bigram_(bigram) {}
  Index vocab() const override { return bigram_.vocab(); }
  Index context() const override { return 1; }
  // One token of context, so a cache holds nothing (it has no attention layer to grow).
  Var<double> forward(Tape<double>& tape, const Ids& tokens,
                                KvCache<double>*) override {
    if (tokens.numel() == 0) fail<ValueError>("bigram: no tokens to read");
    const Index N = tokens.numel(), V = bigram_.vocab();
    return tape.constant("bigram_logits", Shape::batched(1, N, V), [&](TensorD& logits) {
      for (Index t = 0; t < N; ++t)
        for (Index v = 0; v < V; ++v)
          logits.at(0, t, v) = std::log(bigram_.probability(tokens[t], static_cast<std::int32_t>(v)));
    });
  }

 private:
  const Bigram& bigram_;
};

}  // namespace tapegrad::examples
