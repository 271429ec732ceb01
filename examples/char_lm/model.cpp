#include "char_lm/model.hpp"

#include <algorithm>

#include "lm_programs.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace char_lm {

using namespace tapegrad;

DecoderLmConfig CharLmConfig::decoder(const CharLmConfig& c) {
  DecoderLmConfig d = c;
  d.vocab = kVocab;
  d.positions = PositionEncoding::learned;
  d.head_bias = true;
  d.init = LmInit::pytorch;
  return d;
}

template <class T>
StepOutput<T> CharLm<T>::loss(Tape<T>& tape, const SequenceBatch& batch) {
  Var<T> out = this->forward(tape, batch.tokens, nullptr);
  return {cross_entropy(out, batch.labels), out};
}

template class CharLm<float>;

std::string describe(const CharLmConfig& c) {
  return fmt::format("{} attention, {} block{} of width {}, {} heads, MLP {}, max_len {}, {} head{}",
                     examples::attention_title(c.attention), c.n_layers, c.n_layers == 1 ? "" : "s", c.d_model, c.n_heads,
                     feed_forward_width(c.d_model, c.d_ff), c.context, c.tie ? "tied" : "untied",
                     c.dropout > 0 ? fmt::format(", dropout {}", c.dropout) : "");
}

// ---- sampling ---------------------------------------------------------------------------------------

template <class T>
std::vector<std::string> sample_words(LanguageModel<T>& model, Index max_letters, Index count, std::uint64_t seed,
                                      bool cache, const std::function<void(Index)>& on_word) {
  std::vector<std::string> words;
  const std::vector<std::int32_t> start = {kEnd};
  for (Index i = 0; i < count; ++i) {
    const std::vector<std::int32_t> drawn = sample(
        model, start,
        {.count = max_letters, .seed = seed, .stream = static_cast<std::uint64_t>(i), .stop = kEnd, .cache = cache});
    std::string word;
    for (const std::int32_t symbol : drawn)
      if (symbol != kEnd) word += symbol_of(symbol);
    if (drawn.empty() || drawn.back() != kEnd) word += '~';  // cut: the model had not ended the word
    words.push_back(std::move(word));
    if (on_word) on_word(i + 1);
  }
  return words;
}

template std::vector<std::string> sample_words(LanguageModel<float>&, Index, Index, std::uint64_t, bool,
                                               const std::function<void(Index)>&);
template std::vector<std::string> sample_words(LanguageModel<double>&, Index, Index, std::uint64_t, bool,
                                               const std::function<void(Index)>&);

std::vector<std::vector<Tensor>> attention_maps(CharLm<float>& model, const std::string& word) {
  std::vector<std::int32_t> tokens = {kEnd};
  for (char c : word) tokens.push_back(token_of(c));
  return model.attention_maps(tokens);
}

}  // namespace char_lm
