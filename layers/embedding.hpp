#pragma once
// Token features and positions, the inputs of attention.
//   Embedding      trainable lookup table (vocab, dim): ids (B, T) -> (B, T, dim)
//   OneHotTokens   fixed one-hot features: ids (B, T) -> (B, T, vocab), no parameters
//   Positions      none | one-hot (concatenated: width + max_len) | learned (added) | sinusoidal (added)

#include <string_view>

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/enum_names.hpp"
#include "tapegrad/core/required.hpp"
#include "tapegrad/layers/init.hpp"
#include "tapegrad/layers/kv_cache.hpp"
#include "tapegrad/layers/module.hpp"

namespace tapegrad {

struct EmbeddingOptions {
  Required<Index, "EmbeddingOptions::vocab"> vocab;
  Required<Index, "EmbeddingOptions::dim"> dim;
  Initializer init = Initializer::normal(1.0);  // PyTorch's nn.Embedding default
};

template <class T>
class Embedding : public Module<T> {
 public:
  Embedding(std::string name, const EmbeddingOptions& options, Rng& rng);
  Var<T> forward(Tape<T>& tape, const Ids& ids);  // ids (N) or (B, T) -> (N, dim) or (B, T, dim)
  Parameter<T>& table() { return *table_; }
  // nn.Embedding: the table is its "weight".
  TorchName torch_name(std::string_view) const override { return {"weight"}; }

 private:
  Parameter<T>* table_;
};

template <class T>
class OneHotTokens : public Module<T> {
 public:
  OneHotTokens(std::string name, Index vocab) : Module<T>(std::move(name)), vocab_(vocab) {
    if (vocab <= 0) fail<ValueError>("one_hot_tokens '{}': vocab must be positive, got {}", this->name(), vocab);
  }
  Var<T> forward(Tape<T>& tape, const Ids& ids);  // ids (B, T) -> (B, T, vocab)
  Index vocab() const { return vocab_; }

 private:
  Index vocab_;
};

enum class PositionEncoding { none, onehot, learned, sinusoidal };
template <>
struct EnumNames<PositionEncoding> {
  static constexpr std::string_view what = "positions";
  static constexpr std::array<EnumName<PositionEncoding>, 4> names = {{
      {PositionEncoding::none, "none"},
      {PositionEncoding::onehot, "onehot"},
      {PositionEncoding::learned, "learned"},
      {PositionEncoding::sinusoidal, "sinusoidal"},
  }};
};

struct PositionOptions {
  PositionEncoding kind = PositionEncoding::none;
  Required<Index, "PositionOptions::max_len"> max_len;  // longest sequence the layer accepts
  Required<Index, "PositionOptions::d_model"> d_model;  // width of x; learned and sinusoidal add a (T, d_model) table
  Initializer init = Initializer::normal(0.02);         // learned positions only
};

template <class T>
class Positions : public Module<T> {
 public:
  Positions(std::string name, const PositionOptions& options, Rng& rng) : Positions(std::move(name), options, &rng) {}
  // none, one-hot and sinusoidal positions initialise nothing, so they need no Rng; learned ones given
  // here are a ValueError.
  Positions(std::string name, const PositionOptions& options) : Positions(std::move(name), options, nullptr) {}
  // x (B, T, d_model), its rows at positions first, first + 1, ..., first + T - 1 <= max_len - 1, where
  // first is 0, or with a cache (generation, layers/kv_cache.hpp) the positions it holds: x is then the
  // newest tokens of a sequence. one-hot concatenates e_t (width d_model + max_len); learned and
  // sinusoidal add row t of their (max_len, d_model) table; none returns x. A position past max_len is a
  // ValueError naming it.
  Var<T> forward(Var<T> x, const KvCache<T>* cache = nullptr) { return forward_from(x, cache ? cache->length() : 0); }
  Var<T> forward_from(Var<T> x, Index first);  // the same from position `first`
  Index output_width() const {
    return options_.kind == PositionEncoding::onehot ? options_.d_model + options_.max_len : Index{options_.d_model};
  }
  const PositionOptions& options() const { return options_; }
  // Learned positions are an nn.Embedding(max_len, d_model) (GPT-2's wpe): the table is its "weight".
  TorchName torch_name(std::string_view) const override { return {"weight"}; }

 private:
  Positions(std::string name, const PositionOptions& options, Rng* rng);

  PositionOptions options_;
  Parameter<T>* learned_ = nullptr;
  TensorT<T> table_;  // sinusoidal: (max_len, d_model)
  Ids positions_;     // the rows of x's positions, for learned and sinusoidal ones; reused from call to call
};

extern template class Embedding<float>;
extern template class Embedding<double>;
extern template class OneHotTokens<float>;
extern template class OneHotTokens<double>;
extern template class Positions<float>;
extern template class Positions<double>;

}  // namespace tapegrad
