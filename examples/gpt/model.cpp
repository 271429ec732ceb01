#include "gpt/model.hpp"

#include "tapegrad/autograd/ops.hpp"

namespace gpt {

using namespace tapegrad;

void GptConfig::check() const { (void)ByteVocabulary::from_hex(vocabulary, "gpt"); }

DecoderLmConfig GptConfig::decoder(const GptConfig& c) {
  DecoderLmConfig d = c;
  d.vocab = static_cast<Index>(c.vocabulary.size() / 2);
  d.positions = PositionEncoding::learned;
  d.tie = true;
  d.head_bias = false;
  d.init = LmInit::gpt2;
  return d;
}

template <class T>
Gpt<T>::Gpt(const GptConfig& c) : ConfiguredLm<T, GptConfig>(c), vocabulary_(ByteVocabulary::from_hex(c.vocabulary, "gpt")) {}

template <class T>
StepOutput<T> Gpt<T>::loss(Tape<T>& tape, const SequenceBatch& batch) {
  Var<T> out = this->forward(tape, batch.tokens, nullptr);
  return {cross_entropy(out, batch.labels), out};
}

template class Gpt<float>;

std::vector<std::vector<Tensor>> attention_maps(Gpt<float>& model, std::string_view text) {
  return model.attention_maps(model.vocabulary().encode(text, "attention_maps"));
}

}  // namespace gpt
