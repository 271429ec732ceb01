#pragma once
// The character GPT: nanoGPT's model (Karpathy's nanoGPT, model.py) as the library's decoder language model
// (layers/decoder_lm.hpp), with a configuration of this program's own that a checkpoint rebuilds it from
// (a ConfiguredLm, kind "gpt").
//
//   bytes (B, T) -> Embedding (B, T, D) + learned positions (T, D)
//                -> TransformerStack: N pre-norm blocks (causal attention with biases and Wo, MLP D -> 4D ->
//                   D with GELU and biases), final LayerNorm
//                -> LmHead tied to the embedding, no bias (nanoGPT's lm_head): logits h E^T (B, T, V)
//
// Initial weights as nanoGPT's: every weight and embedding N(0, 0.02), biases 0, LayerNorms 1 and 0, and the
// projections that write into the residual stream (attention's Wo, the MLP's second linear) N(0, 0.02 /
// sqrt(2 N)). The attention mode is the one thing the two models of the comparison differ in: learnable
// (Wq, Wk, Wv, Wo and their biases) or parameter-free (softmax(h h^T / sqrt(dh)) h, no attention parameters).
//
// Legend: B windows in a batch, T = context positions, D = d_model, V = the byte vocabulary's size.
//
// As a LanguageModel (layers/generate.hpp) it samples through its one forward, in evaluation mode: over
// the whole window, or one byte at a time through a KvCache.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpt/text.hpp"
#include "tapegrad/layers/decoder_lm.hpp"
#include "tapegrad/train/trainer.hpp"

namespace gpt {

using tapegrad::AttentionMode;

// All it takes to rebuild the model: checkpoints keep it as the model's settings, kind "gpt". The
// library's DecoderLmConfig, of which this program names the vocabulary's bytes, the context and the
// transformer's settings; the rest (learned positions, a tied head without a bias, GPT-2's initial
// weights) is this program's, set by decoder().
struct GptConfig : tapegrad::DecoderLmConfig {
  std::string vocabulary;  // the byte vocabulary, ByteVocabulary::hex(): which byte each token is

  static constexpr std::string_view kind = "gpt";
  static constexpr std::uint64_t stream = 0x677074;  // "gpt": the initial weights' random stream
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("vocabulary", s.vocabulary, "the bytes of the vocabulary, in hex, ascending");
    field("context", s.context, "positions: the longest window", tapegrad::in_range(1, 4096));
    tapegrad::DecoderLmConfig::transformer_fields(s, field);
  }
  void check() const;  // ValueError unless the vocabulary is ByteVocabulary::hex()'s form
  static tapegrad::DecoderLmConfig decoder(const GptConfig& c);
};

template <class T>
class Gpt : public tapegrad::ConfiguredLm<T, GptConfig> {
 public:
  explicit Gpt(const GptConfig& config);  // ValueError for a configuration that does not fit together

  // Cross-entropy over every position (mean per predicted byte), and the logits: the Trainer's loss function.
  tapegrad::StepOutput<T> loss(tapegrad::Tape<T>& tape, const tapegrad::SequenceBatch& batch);
  const ByteVocabulary& vocabulary() const { return vocabulary_; }

 private:
  ByteVocabulary vocabulary_;
};

extern template class Gpt<float>;

// The model's attention weights on a text (its bytes in the vocabulary): [layer][head], each (T, T).
std::vector<std::vector<tapegrad::Tensor>> attention_maps(Gpt<float>& model, std::string_view text);

}  // namespace gpt
