#include "gpt/model.hpp"

#include <algorithm>
#include <cmath>

#include "tapegrad/autograd/ops.hpp"

namespace gpt {

using namespace tapegrad;

template <class T>
DecoderLmConfig Gpt<T>::decoder_config(const Config& c) {
  return {.vocab = static_cast<Index>(c.vocabulary.size() / 2), .context = c.context, .d_model = c.d_model,
          .n_heads = c.n_heads, .n_layers = c.n_layers, .d_ff = c.d_ff, .attention = c.attention,
          .positions = PositionEncoding::learned, .tie = true, .head_bias = false, .init = LmInit::gpt2,
          .dropout = c.dropout, .seed = c.seed};
}

template <class T>
void Gpt<T>::check_config(const Config& c) {
  check_fields(c, "gpt");  // within its own bounds first, so that messages name this program's settings
  (void)ByteVocabulary::from_hex(c.vocabulary, "gpt");
  DecoderLm<T>::check_config(decoder_config(c));
}

template <class T>
Index Gpt<T>::count_parameters(const Config& c) {
  check_config(c);  // its own bounds first, so that messages name this program's settings
  return DecoderLm<T>::count_parameters(decoder_config(c));
}

template <class T>
Gpt<T>::Gpt(const Config& c)
    : DecoderLm<T>((check_config(c), decoder_config(c)), 0x677074),  // stream "gpt"
      config_(c), vocabulary_(ByteVocabulary::from_hex(c.vocabulary, "gpt")) {}

template <class T>
StepOutput<T> Gpt<T>::loss(Tape<T>& tape, const SequenceBatch& batch) {
  Var<T> out = this->forward(tape, batch.tokens, nullptr);
  return {cross_entropy(out, batch.labels), out};
}

template class Gpt<float>;

std::string_view mode_title(AttentionMode mode) {
  return mode == AttentionMode::learnable ? "learnable" : "parameter-free";
}
std::string_view mode_file_name(AttentionMode mode) {
  return mode == AttentionMode::learnable ? "learnable" : "parameter_free";
}

std::string describe(const Gpt<float>::Config& c) {
  return fmt::format("{} attention, {} block{} of width {}, {} heads, MLP {}, context {}, {} bytes{}", mode_title(c.attention),
                     c.n_layers, c.n_layers == 1 ? "" : "s", c.d_model, c.n_heads, feed_forward_width(c.d_model, c.d_ff),
                     c.context, c.vocabulary.size() / 2, c.dropout > 0 ? fmt::format(", dropout {}", c.dropout) : "");
}

std::vector<std::vector<std::vector<double>>> attention_maps(Gpt<float>& model, std::string_view text) {
  const std::vector<std::int32_t> ids = model.vocabulary().encode(text, "attention_maps");
  const EvalModeGuard<float> eval_mode(model);
  for (std::size_t layer = 0; layer < model.stack().size(); ++layer) model.stack().block(layer).attention().keep_weights(true);
  Tape<float> tape;
  NoGradGuard<float> no_grad(tape);
  Ids window(Shape::mat(1, static_cast<Index>(ids.size())));
  std::copy(ids.begin(), ids.end(), window.data());
  (void)model.forward(tape, window, nullptr);
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

Var<double> BigramModel::forward(Tape<double>& tape, const Ids& tokens, KvCache<double>*) {
  if (tokens.numel() == 0) fail<ValueError>("bigram: no bytes to read");
  const Index N = tokens.numel(), V = bigram_.vocab();
  return tape.constant("bigram_logits", Shape::batched(1, N, V), [&](TensorD& logits) {
    for (Index t = 0; t < N; ++t)  // log P(next | this byte), for each byte
      for (Index v = 0; v < V; ++v)
        logits.at(0, t, v) = std::log(bigram_.probability(tokens[t], static_cast<std::int32_t>(v)));
  });
}

}  // namespace gpt
