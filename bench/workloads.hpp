#pragma once
// The benchmark workloads, one table for every benchmark that times a training step (step_bench, dp_step;
// bench/compare.py and bench/torch_step.py read it through step_bench --list-workloads).
// W1-W4 ("attention"): the lesson's toy model with trainable token embeddings and learned positions ->
// self-attention (Wq, Wk, Wv, Wo, no bias, H heads) + residual -> linear readout over V classes.
// W5-W7 ("stack"): embedding + learned positions -> L pre-norm transformer blocks -> LayerNorm -> head. W6 and
// W7 are the sizes of a many-core machine's table (bench/many_cores.sh); W7 (a GPT-2-small-sized stack of
// 32 x 256 tokens, some 4 TFLOP a step) runs only when named, not by default on a 2-core machine.

#include <memory>
#include <string>
#include <vector>

#include "lesson/toy_model.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/layers/decoder_lm.hpp"
#include "tapegrad/train/data_source.hpp"

namespace tapegrad {

struct Workload {
  std::string name;
  Index B, T, d, H, V;
  std::string model = "attention";  // or "stack"
  Index layers = 0, ffn = 0;         // the stack's blocks and FFN width
  bool by_default = true;            // run when no workloads are named
  // Matmul FLOPs of one step: 3x the forward GEMMs (backward is two GEMMs per forward one).
  double flops() const {
    const double b = static_cast<double>(B), t = static_cast<double>(T), dd = static_cast<double>(d),
                 v = static_cast<double>(V), f = static_cast<double>(ffn), l = static_cast<double>(layers);
    const double attention = 8 * b * t * dd * dd + 4 * b * t * t * dd;  // Q K V O projections; scores, A V
    if (model == "stack") return 3 * (l * (attention + 4 * b * t * dd * f) + 2 * b * t * dd * v);
    return 3 * (attention + 2 * b * t * dd * v);
  }
};

inline const std::vector<Workload> kWorkloads = {{"W1", 32, 8, 16, 1, 16},
                                          {"W2", 16, 32, 64, 4, 32},
                                          {"W3", 8, 128, 128, 4, 64},
                                          {"W4", 4, 256, 256, 8, 256},
                                          {"W5", 8, 128, 256, 8, 64, "stack", 4, 1024},
                                          {"W6", 16, 256, 512, 8, 256, "stack", 6, 2048},
                                          {"W7", 32, 256, 768, 12, 256, "stack", 12, 3072, false}};

// W5's model: the library's decoder LM (embedding + learned positions -> TransformerStack, causal,
// pre-norm -> LmHead with its own weight and bias), PyTorch's initial weights.
class StackModel : public DecoderLm<float> {
 public:
  // checkpoint_every: TransformerStackOptions::checkpoint_every (0: every block's activations kept).
  explicit StackModel(const Workload& w, Index checkpoint_every = 0)
      : DecoderLm<float>({.vocab = w.V, .context = w.T, .d_model = w.d, .n_heads = w.H, .n_layers = w.layers,
                          .d_ff = w.ffn, .attention = AttentionMode::learnable, .seed = 1}) {
    stack().set_checkpoint_every(checkpoint_every);
  }
  Var<float> loss(Tape<float>& tape, const SequenceBatch& batch) {
    return cross_entropy(forward(tape, batch.tokens, nullptr), batch.labels);  // (B, T, V) -> scalar
  }
};

// W1-W4's model: the lesson's toy model in the shape of the workload.
inline lesson::ModelConfig attention_config(const Workload& w) {
  return {.vocab = w.V, .labels = w.V, .max_len = w.T, .features = lesson::FeatureKind::learned, .d_embed = w.d,
          .positions = PositionEncoding::learned, .attention = AttentionMode::learnable, .heads = w.H,
          .output_projection = true, .residual = true, .seed = 1};
}

}  // namespace tapegrad
