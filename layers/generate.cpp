#include "tapegrad/layers/generate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tapegrad/core/rng.hpp"
#include "tapegrad/layers/module.hpp"

namespace tapegrad {

Index window_start(Index n, Index context) {
  if (n < 0 || context < 1) fail<ValueError>("window_start: needs n >= 0 and context >= 1, got {} and {}", n, context);
  if (n <= context) return 0;
  const Index jump = std::max<Index>(1, context / 2);
  return (n - context + jump - 1) / jump * jump;  // the first multiple of the jump that leaves <= context tokens
}

namespace {

// NonFiniteError "<at()>logit of token v of V is x; ..." for the first logit that is NaN or infinite: at() says
// which draw the logits were for, formatted only when one is.
template <class T, class At>
void check_finite(std::span<const T> logits, At at) {
  for (std::size_t v = 0; v < logits.size(); ++v)
    if (!std::isfinite(logits[v]))
      fail<NonFiniteError>(
          "{}logit of token {} of {} is {}; its weights make the logits overflow, and no token can be drawn from them",
          at(), v, logits.size(), static_cast<double>(logits[v]));
}

// The draw of draw_token over finite logits, with `p` as the probabilities' buffer (one per sampler).
template <class T>
std::int32_t draw(std::span<const T> logits, double temperature, double u, std::vector<double>& p) {
  const std::size_t V = logits.size();
  // softmax(logits / temperature), less the largest logit (so no exp overflows), in double
  const double top = static_cast<double>(*std::max_element(logits.begin(), logits.end()));
  p.resize(V);
  double sum = 0;
  for (std::size_t v = 0; v < V; ++v) sum += p[v] = std::exp((static_cast<double>(logits[v]) - top) / temperature);
  // Inverse CDF: the first token whose cumulative probability exceeds u sum (the last one if rounding
  // leaves the total just below it).
  const double target = u * sum;
  double cumulative = 0;
  for (std::size_t v = 0; v < V; ++v) {
    cumulative += p[v];
    if (target < cumulative) return static_cast<std::int32_t>(v);
  }
  return static_cast<std::int32_t>(V - 1);
}

// The logits after the last of `tokens` (vocab() values) by the model's forward on `tape`, through `cache`
// when it is given; ShapeError unless the forward gives (1, N, vocab) logits.
template <class T>
std::span<const T> next_logits(LanguageModel<T>& model, Tape<T>& tape, std::span<const std::int32_t> tokens,
                               KvCache<T>* cache, Ids& ids) {
  const Index V = model.vocab(), N = static_cast<Index>(tokens.size());
  ids.resize(Shape::mat(1, N));
  std::copy(tokens.begin(), tokens.end(), ids.data());
  const TensorT<T>& all = model.forward(tape, ids, cache).value();  // (1, N, V)
  if (all.numel() != N * V || all.cols() != V)
    fail<ShapeError>("sample: the model gave logits of shape {} for {} tokens and a vocabulary of {}", all.shape(), N,
                     V);
  return {all.data() + all.numel() - V, static_cast<std::size_t>(V)};
}

// A layer that reads earlier tokens but is not handed the cache (a block that does not pass it on, an
// attention written from matmul_bt, softmax_rows and matmul) sees only the tokens fed at a step, and the
// cached path would sample another text than the recomputing one, silently. So the logits of the first step
// that reads tokens the cache holds are compared with those of its window recomputed without the cache.
// Rounding in another order moves the logits by units in the last place of their scale, times a factor
// that grows with the depth of the computation: half the element type's digits of that scale
// (sqrt(epsilon)) leaves room for any depth, and a layer that ignores the cache moves them far more.
template <class T>
void check_cached_logits(LanguageModel<T>& model, std::span<const std::int32_t> window, std::span<const T> cached) {
  Tape<T> tape;
  NoGradGuard<T> no_grad(tape);
  Ids ids;
  const std::span<const T> recomputed = next_logits<T>(model, tape, window, nullptr, ids);
  check_finite(recomputed, [] { return "sample: recomputing the cached logits without the cache, the model's "; });
  const auto n = static_cast<Index>(cached.size());
  const ConstArrayMap<T> c(cached.data(), n), r(recomputed.data(), n);
  Index at = 0;  // the first token of the largest difference, in double as the bound
  const double largest = (c.template cast<double>() - r.template cast<double>()).abs().maxCoeff(&at);
  const double allowed = std::sqrt(std::numeric_limits<T>::epsilon()) * std::max<double>(1, r.abs().maxCoeff());
  if (largest > allowed)
    fail<UsageError>(
        "sample: the model's forward with a cache gives other logits than without one (largest difference {:.3g} "
        "at token {}, where rounding allows {:.3g}): a layer that reads earlier tokens must take the cache "
        "(SelfAttention does), or sample with cache = false",
        largest, at, allowed);
}

}  // namespace

template <class T>
std::int32_t draw_token(const TensorT<T>& logits, double temperature, double u) {
  if (logits.numel() == 0) fail<ShapeError>("draw_token: the logits are empty");
  check_finite(logits.span(), [] { return "draw_token: the "; });
  std::vector<double> p;
  return draw(logits.span(), temperature, u, p);
}

template <class T>
std::vector<std::int32_t> sample(LanguageModel<T>& model, std::span<const std::int32_t> prompt,
                                 const SampleOptions& o) {
  const Index V = model.vocab(), context = model.context();
  if (prompt.empty()) fail<ValueError>("sample: the prompt is empty; give at least one token to start from");
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= V)
      fail<ValueError>("sample: prompt token {} at position {} is outside the vocabulary of {}", prompt[i], i, V);
  if (o.count < 0) fail<ValueError>("sample: count must be >= 0, got {}", o.count);
  if (o.stop && (*o.stop < 0 || *o.stop >= V))
    fail<ValueError>("sample: the stop token {} is outside the vocabulary of {}", *o.stop, V);
  if (!(o.temperature > 0) || !std::isfinite(o.temperature))
    fail<ValueError>("sample: the temperature must be positive and finite, got {}", o.temperature);

  // A model that is a Module is read in evaluation mode (no dropout) and left in the mode it was in.
  std::optional<EvalModeGuard<T>> eval;
  if (auto* module = dynamic_cast<Module<T>*>(&model)) eval.emplace(*module);
  std::vector<std::int32_t> tokens(prompt.begin(), prompt.end());
  Rng rng(o.seed, o.stream);
  std::optional<KvCache<T>> cache;
  if (o.cache) cache.emplace(context);
  Tape<T> tape;  // reset for every draw, its buffers reused: values only
  NoGradGuard<T> no_grad(tape);
  Ids fed;
  std::vector<double> p, seen;  // the draw's probabilities; the logits on_logits sees
  bool compared = false;        // whether the cached logits were compared with recomputed ones
  for (Index i = 0; i < o.count; ++i) {
    const Index n = static_cast<Index>(tokens.size());
    const Index start = window_start(n, context);
    const auto window = std::span<const std::int32_t>(tokens).subspan(static_cast<std::size_t>(start));
    // The cache holds the tokens before the newest of the window it was fed; holding as many as the window
    // has, it holds an earlier window's: the start jumped, and the window's tokens go to positions from 0 again.
    if (cache && cache->length() >= static_cast<Index>(window.size())) cache->clear();
    // The window's tokens not fed yet: the last drawn one, or the whole window after a jump (the prompt first).
    const auto feed = cache ? window.subspan(static_cast<std::size_t>(cache->length())) : window;
    tape.reset();
    const bool reads_cache = cache && cache->length() > 0;
    const std::span<const T> logits = next_logits(model, tape, feed, cache ? &*cache : nullptr, fed);
    check_finite(logits, [&] {
      return fmt::format("sample: drawing token {} of {} (position {} of the text), the model's ", i + 1, o.count, n);
    });
    if (reads_cache && !compared) {
      check_cached_logits(model, window, logits);
      compared = true;
    }
    if (o.on_logits) {
      seen.assign(logits.begin(), logits.end());
      o.on_logits(seen);
    }
    tokens.push_back(draw(logits, o.temperature, rng.uniform(), p));
    if (o.on_token) o.on_token(tokens.back());
    if (o.stop == tokens.back()) break;
  }
  return {tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size()), tokens.end()};
}

template std::vector<std::int32_t> sample(LanguageModel<float>&, std::span<const std::int32_t>, const SampleOptions&);
template std::vector<std::int32_t> sample(LanguageModel<double>&, std::span<const std::int32_t>, const SampleOptions&);
template std::int32_t draw_token(const TensorT<float>&, double, double);
template std::int32_t draw_token(const TensorT<double>&, double, double);

}  // namespace tapegrad
