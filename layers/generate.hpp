#pragma once
// Sampling text from a causal language model: ancestral sampling, each next token drawn from
// softmax(logits / temperature), with the model's logits computed by its own forward (the one training
// runs), with gradients off, either over the whole window (recomputed for every token) or over the newest
// token only through a KvCache (layers/kv_cache.hpp). Both read the same window of context, so for a seed
// they draw the same tokens (the two differ by float rounding only: a draw that lands within that
// rounding of a boundary between two tokens could go either way; tests/test_generate.cpp checks the
// texts agree).
//
// The window. A model trained on sequences of `context` tokens has positions 0 .. context-1 only. While
// the text is that long or shorter, the window is all of it. Past that it slides, by half a context at a
// time: the prediction of token n reads tokens [window_start(n), n), and window_start jumps by
// jump = max(1, context / 2) whenever the window would be longer than the context. So the window holds
// between context - jump + 1 and context tokens, and at each jump the cached path clears its cache and
// feeds the kept tokens again in one step (at their new positions, which an absolute position encoding
// needs), as it feeds the prompt: a token costs one step of one token and, on average, a share of one
// batched step over half a context, where a window that slid by one token at every draw (nanoGPT's
// generate) would need a whole new forward for every token, cache or not.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/required.hpp"
#include "tapegrad/core/tensor.hpp"
#include "tapegrad/layers/kv_cache.hpp"

namespace tapegrad {

// The first token the prediction of token n reads (n tokens so far), for a model of `context` positions.
Index window_start(Index n, Index context);

// What the sampler needs of a model: a causal language model over `vocab()` tokens, built from the
// library's layers or a user's. A model that is also a Module (a public base, once) is sampled in
// evaluation mode (dropout off) and left in the mode it was in; another is sampled as its forward runs.
// One model is sampled by one thread at a time: its forward writes its layers' state (and the sampler, for a
// Module in training mode, its modes).
template <class T>
class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual Index vocab() const = 0;
  virtual Index context() const = 0;  // the longest window: the positions the model has
  // The model's forward: the logits (1, N, vocab) after each of the tokens (1, N), on `tape`. Without a
  // cache the tokens are a window from position 0 (1 to context tokens); with one, they are the newest
  // tokens of a sequence whose earlier ones the cache holds, at positions cache->length() on, and the
  // forward appends their keys and values: it passes the cache on to its Positions, its TransformerStack or
  // its blocks' SelfAttention layers. The sampler runs it with gradients off, and refuses a model whose
  // forward with a cache gives other logits than without one (a layer that reads earlier tokens but does not
  // take the cache), comparing the two once, at the first token drawn through a cache that holds tokens.
  virtual Var<T> forward(Tape<T>& tape, const Ids& tokens, KvCache<T>* cache) = 0;
};

struct SampleOptions {
  Required<Index, "SampleOptions::count"> count;  // tokens to draw, at most
  std::uint64_t seed = 0;                         // the draws' random numbers: Rng(seed, stream)
  std::uint64_t stream = 0;  // ... so that texts sampled apart (one word each) draw from streams of one seed
  // A token that ends the text once drawn (it is the last one returned).
  std::optional<std::int32_t> stop = std::nullopt;
  double temperature = 1.0;  // logits are divided by it: below 1 sharper, above 1 flatter
  bool cache = true;         // false: a forward of the whole window for every token
  // Called with each token as it is drawn (a program streams the text instead of holding it until the
  // end); may be empty. What it throws ends the sampling.
  std::function<void(std::int32_t)> on_token = {};
  // Called before each draw with the model's logits for the next token (vocab() values, before the
  // temperature, in double whatever the model's type): to compare the cached and the recomputed paths, or
  // to look at what the model predicts. May be empty; what it throws ends the sampling.
  std::function<void(std::span<const double>)> on_logits = {};
};

// `count` tokens drawn after `prompt` (fewer when `stop` is drawn), the new ones only. ValueError for an
// empty prompt, a prompt token outside the vocabulary, a negative count, a stop token outside the
// vocabulary or a temperature that is not positive and finite; NonFiniteError, naming the token being
// drawn, when the model's logits are not all finite (weights that overflow: every draw would otherwise
// fall on the last token); UsageError when the model's logits through the cache are not its logits without
// it (LanguageModel::forward).
template <class T>
std::vector<std::int32_t> sample(LanguageModel<T>& model, std::span<const std::int32_t> prompt,
                                 const SampleOptions& options);

// The token whose cumulative probability first exceeds u, for probabilities from softmax(logits /
// temperature) computed in double: the draw itself, shared by every sampler. NonFiniteError naming the
// first logit that is NaN or infinite. (With finite logits, their largest subtracted and the arithmetic
// in double, no positive finite temperature can overflow: every term is exp of a value <= 0, and the
// largest is exp(0) = 1.)
template <class T>
std::int32_t draw_token(const TensorT<T>& logits, double temperature, double u);

extern template std::vector<std::int32_t> sample(LanguageModel<float>&, std::span<const std::int32_t>,
                                                 const SampleOptions&);
extern template std::vector<std::int32_t> sample(LanguageModel<double>&, std::span<const std::int32_t>,
                                                 const SampleOptions&);
extern template std::int32_t draw_token(const TensorT<float>&, double, double);
extern template std::int32_t draw_token(const TensorT<double>&, double, double);

}  // namespace tapegrad
