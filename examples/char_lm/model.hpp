#pragma once
// The next-character model: the library's decoder language model (layers/decoder_lm.hpp) over 27 symbols,
// with a configuration of this program's own that a checkpoint rebuilds it from (model_record() kind
// "char_lm"), as examples/first_steps/3_custom_model.cpp's MLP.
//
//   tokens (B, T) -> Embedding (B, T, D) + learned positions (T, D)
//                 -> TransformerStack: N causal pre-norm blocks (attention, MLP D -> d_ff -> D), final LayerNorm
//                 -> LmHead: logits (B, T, V), its own (D, V) weight or tied to the embedding (h E^T)
//
// Legend: B words in a batch, T positions (the longest word's letters + 1), D = d_model, V = 27 symbols.
// The attention mode is the one thing the two models of the comparison differ in: learnable (Wq, Wk, Wv,
// Wo and biases) or parameter-free (softmax(h h^T / sqrt(dh)) h, no attention parameters at all).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "char_lm/words.hpp"
#include "tapegrad/layers/decoder_lm.hpp"
#include "tapegrad/train/trainer.hpp"

namespace char_lm {

using tapegrad::AttentionMode;
using tapegrad::Index;

template <class T>
class CharLm : public tapegrad::DecoderLm<T> {
 public:
  struct Config {  // all it takes to rebuild the model: checkpoints keep it as the model's settings
    Index max_len = 23;  // longest sequence: the longest training word's letters + 1
    Index d_model = 64;
    Index n_heads = 4;
    Index n_layers = 2;
    Index d_ff = 0;  // 0: 4 d_model
    AttentionMode attention = AttentionMode::learnable;
    bool tie = false;      // the head reuses the embedding table (h E^T)
    double dropout = 0;
    std::uint64_t seed = 0;  // initial weights
    // Bounded so that no configuration read from a file can ask for absurd memory.
    template <class S, class F>
    static void fields(S& s, F&& field) {
      using tapegrad::in_range;
      field("max_len", s.max_len, "longest sequence (letters + 1)", in_range(2, 1024));
      field("d_model", s.d_model, "width of the residual stream", in_range(1, 4096));
      field("n_heads", s.n_heads, "attention heads", in_range(1, 256));
      field("n_layers", s.n_layers, "transformer blocks", in_range(1, 64));
      field("d_ff", s.d_ff, "hidden width of the MLP (0: 4 d_model)", in_range(0, 1 << 16));
      field("attention", s.attention, "attention: learnable or parameter_free");
      field("tie", s.tie, "the output head reuses the embedding table");
      field("dropout", s.dropout, "dropout probability", in_range(0, 1, true));
      field("seed", s.seed, "seed of the initial weights");
    }
  };
  static constexpr std::string_view kind = "char_lm";

  explicit CharLm(const Config& config);  // ValueError for a configuration that does not fit together
  // The constructor's checks alone: ValueError naming what does not fit, nothing allocated.
  static void check_config(const Config& config);
  // The library's model this configuration means: 27 symbols, learned positions, PyTorch's initial weights,
  // a head with a bias.
  static tapegrad::DecoderLmConfig decoder_config(const Config& config);
  // The parameter values a configuration implies (ValueError for one the constructor refuses), counted by
  // the library (DecoderLm::count_parameters): a checkpoint's loader compares it with the file before building.
  static Index count_parameters(const Config& config);
  using tapegrad::DecoderLm<T>::count_parameters;

  // Cross-entropy at the labelled positions (mean per symbol), and the logits: the Trainer's loss function.
  tapegrad::StepOutput<T> loss(tapegrad::Tape<T>& tape, const tapegrad::SequenceBatch& batch);

  tapegrad::ModelRecord model_record() const override { return {std::string(kind), tapegrad::to_settings(config_)}; }
  const Config& config() const { return config_; }

 private:
  Config config_;
};

extern template class CharLm<float>;

// "parameter-free" / "learnable", and the file-name form "free" / "learnable".
std::string_view mode_title(AttentionMode mode);
std::string_view mode_file_name(AttentionMode mode);
std::string describe(const CharLm<float>::Config& c);  // one line: sizes, attention, tie, dropout

// ---- sampling ---------------------------------------------------------------------------------------

// P(next symbol) given a word's symbols so far ('.' first): kVocab probabilities.
using NextSymbol = std::function<std::vector<double>(const std::vector<std::int32_t>& prefix)>;

// `count` words by ancestral sampling: from '.', draw each next symbol from its distribution until '.',
// or until `max_letters` letters (such a word is cut, and marked with a trailing '~'). Word i draws from
// its own stream Rng(seed, i), so asking for fewer words gives a prefix of the same list.
// `on_word(i)`, when given, is called after word i (progress on long sampling).
std::vector<std::string> sample_words(const NextSymbol& next, Index max_letters, Index count, std::uint64_t seed,
                                      const std::function<void(Index)>& on_word = {});

// The model's distribution of the next symbol, in evaluation mode, without recording gradients.
NextSymbol next_symbol(CharLm<float>& model);
NextSymbol next_symbol(const Bigram& bigram);

// The model's attention weights on one word, ". w o r d": [layer][head], each (T, T) row-major.
std::vector<std::vector<std::vector<double>>> attention_maps(CharLm<float>& model, const std::string& word);

}  // namespace char_lm
