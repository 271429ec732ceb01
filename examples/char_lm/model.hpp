#pragma once
// The next-character model: the library's decoder language model over 27 symbols, with a configuration of
// this program's own that a checkpoint rebuilds it from (a ConfiguredLm, layers/decoder_lm.hpp).
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
#include <string>
#include <string_view>
#include <vector>

#include "char_lm/words.hpp"
#include "tapegrad/layers/decoder_lm.hpp"
#include "tapegrad/train/trainer.hpp"

namespace char_lm {

using tapegrad::AttentionMode;
using tapegrad::Index;

// All it takes to rebuild the model: checkpoints keep it as the model's settings, kind "char_lm". The
// library's DecoderLmConfig, of which this program names the longest sequence ("max_len": the context),
// the transformer's settings and the tie; the vocabulary, the positions, the head's bias and the initial
// weights are this program's, set by decoder().
struct CharLmConfig : tapegrad::DecoderLmConfig {
  static constexpr std::string_view kind = "char_lm";
  static constexpr std::uint64_t stream = 0x636861726c6d;  // "charlm": the initial weights' random stream
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("max_len", s.context, "longest sequence (letters + 1)", tapegrad::in_range(2, 1024));
    tapegrad::DecoderLmConfig::transformer_fields(s, field);
    field("tie", s.tie, "the output head reuses the embedding table");
  }
  // The library's model this means: 27 symbols, learned positions, PyTorch's initial weights, a head with
  // a bias.
  static tapegrad::DecoderLmConfig decoder(const CharLmConfig& c);
};

template <class T>
class CharLm : public tapegrad::ConfiguredLm<T, CharLmConfig> {
 public:
  using tapegrad::ConfiguredLm<T, CharLmConfig>::ConfiguredLm;
  // Cross-entropy at the labelled positions (mean per symbol), and the logits: the Trainer's loss function.
  tapegrad::StepOutput<T> loss(tapegrad::Tape<T>& tape, const tapegrad::SequenceBatch& batch);
};

extern template class CharLm<float>;

std::string describe(const CharLmConfig& c);  // one line: sizes, attention, tie, dropout

// ---- sampling ---------------------------------------------------------------------------------------

// `count` words, each drawn by the library's sampler (layers/generate.hpp) from '.' until it draws '.' or
// `max_letters` letters (such a word is cut, and marked with a trailing '~'). Word i draws from stream i
// of the seed, so asking for fewer words gives a prefix of the same list, and word i of every model uses
// the same random numbers. `cache`: through the model's KV cache (the default), or recomputing each word's
// window for every letter (the same words). `on_word(i)`, when given, is called after word i.
template <class T>
std::vector<std::string> sample_words(tapegrad::LanguageModel<T>& model, Index max_letters, Index count,
                                      std::uint64_t seed, bool cache = true,
                                      const std::function<void(Index)>& on_word = {});

// The model's attention weights on one word, ". w o r d": [layer][head], each (T, T).
std::vector<std::vector<tapegrad::Tensor>> attention_maps(CharLm<float>& model, const std::string& word);

}  // namespace char_lm
