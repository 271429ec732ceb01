#include "char_lm/model.hpp"

#include <algorithm>
#include <cmath>

#include "tapegrad/autograd/ops.hpp"

namespace char_lm {

using namespace tapegrad;

template <class T>
DecoderLmConfig CharLm<T>::decoder_config(const Config& c) {
  return {.vocab = kVocab, .context = c.max_len, .d_model = c.d_model, .n_heads = c.n_heads, .n_layers = c.n_layers,
          .d_ff = c.d_ff, .attention = c.attention, .positions = PositionEncoding::learned, .tie = c.tie,
          .head_bias = true, .init = LmInit::pytorch, .dropout = c.dropout, .seed = c.seed};
}

template <class T>
void CharLm<T>::check_config(const Config& c) {
  check_fields(c, "char_lm");  // within its own bounds first, so that messages name this program's settings
  DecoderLm<T>::check_config(decoder_config(c));
}

template <class T>
Index CharLm<T>::count_parameters(const Config& c) {
  check_config(c);  // its own bounds first, so that messages name this program's settings
  return DecoderLm<T>::count_parameters(decoder_config(c));
}

template <class T>
CharLm<T>::CharLm(const Config& c)
    : DecoderLm<T>((check_config(c), decoder_config(c)), 0x636861726c6d), config_(c) {}  // stream "charlm"

template <class T>
StepOutput<T> CharLm<T>::loss(Tape<T>& tape, const SequenceBatch& batch) {
  Var<T> out = this->forward(tape, batch.tokens, nullptr);
  return {cross_entropy(out, batch.labels), out};
}

template class CharLm<float>;

std::string_view mode_title(AttentionMode mode) {
  return mode == AttentionMode::learnable ? "learnable" : "parameter-free";
}
std::string_view mode_file_name(AttentionMode mode) { return mode == AttentionMode::learnable ? "learnable" : "free"; }

std::string describe(const CharLm<float>::Config& c) {
  return fmt::format("{} attention, {} block{} of width {}, {} heads, MLP {}, max_len {}, {} head{}", mode_title(c.attention),
                     c.n_layers, c.n_layers == 1 ? "" : "s", c.d_model, c.n_heads, feed_forward_width(c.d_model, c.d_ff),
                     c.max_len, c.tie ? "tied" : "untied", c.dropout > 0 ? fmt::format(", dropout {}", c.dropout) : "");
}

// ---- sampling ---------------------------------------------------------------------------------------

std::vector<std::string> sample_words(const NextSymbol& next, Index max_letters, Index count, std::uint64_t seed,
                                      const std::function<void(Index)>& on_word) {
  std::vector<std::string> words;
  for (Index i = 0; i < count; ++i) {
    Rng rng(seed, static_cast<std::uint64_t>(i));
    std::vector<std::int32_t> prefix = {kEnd};
    std::string word;
    for (;;) {
      if (static_cast<Index>(word.size()) >= max_letters) {
        word += '~';  // cut: the model had not ended the word
        break;
      }
      const std::vector<double> p = next(prefix);
      // Inverse CDF: the first symbol whose cumulative probability exceeds u (the last one if rounding
      // leaves the sum just below u).
      const double u = rng.uniform();
      double cumulative = 0;
      std::int32_t symbol = kVocab - 1;
      for (std::int32_t s = 0; s < kVocab; ++s) {
        cumulative += p[static_cast<std::size_t>(s)];
        if (u < cumulative) {
          symbol = s;
          break;
        }
      }
      if (symbol == kEnd) break;
      word += symbol_of(symbol);
      prefix.push_back(symbol);
    }
    words.push_back(std::move(word));
    if (on_word) on_word(i + 1);
  }
  return words;
}

namespace {
// Runs the model on one sequence in evaluation mode, restoring its mode afterwards.
Tensor logits_of(CharLm<float>& model, const std::vector<std::int32_t>& tokens) {
  const EvalModeGuard<float> eval_mode(model);
  Ids ids(Shape::mat(1, static_cast<Index>(tokens.size())));
  std::copy(tokens.begin(), tokens.end(), ids.data());
  Tape<float> tape;
  NoGradGuard<float> guard(tape);
  return model.forward(tape, ids, nullptr).value();  // (1, T, V)
}
}  // namespace

NextSymbol next_symbol(CharLm<float>& model) {
  return [&model](const std::vector<std::int32_t>& prefix) {
    const Tensor logits = logits_of(model, prefix);  // (1, T, V): the last row predicts the next symbol
    const float* row = logits.data() + (logits.numel() - kVocab);
    const double top = *std::max_element(row, row + kVocab);
    std::vector<double> p(static_cast<std::size_t>(kVocab));
    double sum = 0;
    for (std::size_t s = 0; s < p.size(); ++s) sum += p[s] = std::exp(static_cast<double>(row[s]) - top);
    for (double& v : p) v /= sum;
    return p;
  };
}

NextSymbol next_symbol(const Bigram& bigram) {
  return [&bigram](const std::vector<std::int32_t>& prefix) {
    std::vector<double> p(static_cast<std::size_t>(kVocab));
    for (std::int32_t s = 0; s < kVocab; ++s) p[static_cast<std::size_t>(s)] = bigram.probability(prefix.back(), s);
    return p;
  };
}

std::vector<std::vector<std::vector<double>>> attention_maps(CharLm<float>& model, const std::string& word) {
  std::vector<std::int32_t> tokens = {kEnd};
  for (char c : word) tokens.push_back(token_of(c));
  for (std::size_t layer = 0; layer < model.stack().size(); ++layer) model.stack().block(layer).attention().keep_weights(true);
  logits_of(model, tokens);
  std::vector<std::vector<std::vector<double>>> maps;
  for (std::size_t layer = 0; layer < model.stack().size(); ++layer) {
    maps.emplace_back();
    SelfAttention<float>& attention = model.stack().block(layer).attention();
    for (const Tensor& head : attention.attention_weights())  // (1, T, T)
      maps.back().emplace_back(head.data(), head.data() + head.numel());
    attention.keep_weights(false);  // training and sampling have no use for them
  }
  return maps;
}

}  // namespace char_lm
