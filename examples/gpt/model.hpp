#pragma once
// The character GPT: nanoGPT's model (Karpathy's nanoGPT, model.py) as the library's decoder language model
// (layers/decoder_lm.hpp), with a configuration of this program's own that a checkpoint rebuilds it from
// (model_record() kind "gpt").
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

template <class T>
class Gpt : public tapegrad::DecoderLm<T> {
 public:
  struct Config {  // all it takes to rebuild the model: checkpoints keep it as the model's settings
    std::string vocabulary;  // the byte vocabulary, ByteVocabulary::hex(): which byte each token is
    Index context = 64;      // positions: the longest window
    Index d_model = 128;
    Index n_heads = 4;
    Index n_layers = 4;
    Index d_ff = 0;  // 0: 4 d_model
    AttentionMode attention = AttentionMode::learnable;
    double dropout = 0;
    std::uint64_t seed = 0;  // initial weights
    // Bounded so that no configuration read from a file can ask for absurd memory.
    template <class S, class F>
    static void fields(S& s, F&& field) {
      using tapegrad::in_range;
      field("vocabulary", s.vocabulary, "the bytes of the vocabulary, in hex, ascending");
      field("context", s.context, "positions: the longest window", in_range(1, 4096));
      field("d_model", s.d_model, "width of the residual stream", in_range(1, 4096));
      field("n_heads", s.n_heads, "attention heads", in_range(1, 256));
      field("n_layers", s.n_layers, "transformer blocks", in_range(1, 64));
      field("d_ff", s.d_ff, "hidden width of the MLP (0: 4 d_model)", in_range(0, 1 << 16));
      field("attention", s.attention, "attention: learnable or parameter_free");
      field("dropout", s.dropout, "dropout probability", in_range(0, 1, true));
      field("seed", s.seed, "seed of the initial weights");
    }
  };
  static constexpr std::string_view kind = "gpt";

  explicit Gpt(const Config& config);  // ValueError for a configuration that does not fit together
  // The constructor's checks alone: ValueError naming what does not fit, nothing allocated.
  static void check_config(const Config& config);
  // The library's model this configuration means: the vocabulary's bytes, learned positions, GPT-2's
  // initial weights, a head tied to the embedding without a bias.
  static tapegrad::DecoderLmConfig decoder_config(const Config& config);
  // The parameter values a configuration implies (ValueError for one the constructor refuses), counted by
  // the library (DecoderLm::count_parameters): a checkpoint's loader compares it with the file before building.
  static Index count_parameters(const Config& config);
  using tapegrad::DecoderLm<T>::count_parameters;

  // Cross-entropy over every position (mean per predicted byte), and the logits: the Trainer's loss function.
  tapegrad::StepOutput<T> loss(tapegrad::Tape<T>& tape, const tapegrad::SequenceBatch& batch);

  tapegrad::ModelRecord model_record() const override { return {std::string(kind), tapegrad::to_settings(config_)}; }
  const Config& config() const { return config_; }
  const ByteVocabulary& vocabulary() const { return vocabulary_; }

 private:
  Config config_;
  ByteVocabulary vocabulary_;
};

extern template class Gpt<float>;

// "parameter-free" / "learnable" (the table's rows), and the file-name form "parameter_free" / "learnable".
std::string_view mode_title(AttentionMode mode);
std::string_view mode_file_name(AttentionMode mode);
std::string describe(const Gpt<float>::Config& c);  // one line: sizes, attention, dropout

// The model's attention weights on a text (its bytes in the vocabulary), in evaluation mode:
// [layer][head], each (T, T) row-major (row = query, column = key).
std::vector<std::vector<std::vector<double>>> attention_maps(Gpt<float>& model, std::string_view text);

// The bigram as a LanguageModel with a context of one byte: its logits are log P(next | last byte).
class BigramModel final : public tapegrad::LanguageModel<double> {
 public:
  explicit BigramModel(const Bigram& bigram) : bigram_(bigram) {}
  Index vocab() const override { return bigram_.vocab(); }
  Index context() const override { return 1; }
  // log P(next | byte) for each byte: one byte of context, so a cache holds nothing.
  tapegrad::Var<double> forward(tapegrad::Tape<double>& tape, const tapegrad::Ids& tokens,
                                tapegrad::KvCache<double>* cache) override;

 private:
  const Bigram& bigram_;
};

}  // namespace gpt
