#include "tapegrad/layers/generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "tapegrad/core/escape.hpp"
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

// The first logit that is NaN or infinite, or -1.
template <class T>
Index first_non_finite(std::span<const T> logits) {
  for (std::size_t v = 0; v < logits.size(); ++v)
    if (!std::isfinite(logits[v])) return static_cast<Index>(v);
  return -1;
}

constexpr const char* kOverflow = "its weights make the logits overflow, and no token can be drawn from them";

// The draw of draw_token over finite logits, with `p` as the probabilities' buffer (one per sampler).
template <class T>
std::int32_t draw(std::span<const T> logits, double temperature, double u, std::vector<double>& p) {
  const auto V = static_cast<Index>(logits.size());
  // softmax(logits / temperature), less the largest logit (so no exp overflows), in double
  const double top = static_cast<double>(*std::max_element(logits.begin(), logits.end()));
  p.resize(logits.size());
  double sum = 0;
  for (Index v = 0; v < V; ++v)
    sum += p[static_cast<std::size_t>(v)] =
        std::exp((static_cast<double>(logits[static_cast<std::size_t>(v)]) - top) / temperature);
  // Inverse CDF: the first token whose cumulative probability exceeds u sum (the last one if rounding
  // leaves the total just below it).
  const double target = u * sum;
  double cumulative = 0;
  for (Index v = 0; v < V; ++v) {
    cumulative += p[static_cast<std::size_t>(v)];
    if (target < cumulative) return static_cast<std::int32_t>(v);
  }
  return static_cast<std::int32_t>(V - 1);
}

// A cached forward must have appended the `fed` tokens to every attention layer's cache, each then holding
// held + fed positions: a model whose block forgot to pass the cache on would otherwise attend to this step's
// tokens alone, and sample another text than its recomputing forward, silently. A layer that was given no
// cache has no entry in it, but its attention op is on the tape: more attention ops than layers that grew
// means one ran without the cache.
template <class T>
void check_cache_grew(LanguageModel<T>& model, const KvCache<T>& cache, const Tape<T>& tape, Index held, Index fed) {
  Index wrong = -1;
  for (Index i = 0; i < cache.layers() && wrong < 0; ++i)
    if (cache.layer(i).length() != held + fed) wrong = i;
  Index attention_ops = 0;
  for (std::size_t i = 0; i < tape.size(); ++i) attention_ops += std::strcmp(tape.node_at(i).op, "attention") == 0;
  if (wrong < 0 && attention_ops <= cache.layers()) return;  // (a model without attention appends nothing)
  const auto* module = dynamic_cast<const Module<T>*>(&model);
  const std::string name =
      module && !module->path().empty() ? fmt::format("model '{}'", escaped(module->path())) : "the model";
  if (wrong >= 0)
    fail<UsageError>(
        "sample: the cached forward of {} left attention layer {} of {} holding {} positions where it "
        "should hold {} ({} before, {} fed); its forward must pass the cache on to every attention layer, "
        "once per step (or sample with cache = false)",
        name, wrong, cache.layers(), cache.layer(wrong).length(), held + fed, held, fed);
  fail<UsageError>(
      "sample: the cached forward of {} ran {} attention op{} but only {} took the cache; its forward must "
      "pass the cache on to every attention layer (or sample with cache = false)",
      name, attention_ops, attention_ops == 1 ? "" : "s", cache.layers());
}

}  // namespace

template <class T>
std::int32_t draw_token(const TensorT<T>& logits, double temperature, double u) {
  const Index V = logits.numel();
  if (V == 0) fail<ShapeError>("draw_token: the logits are empty");
  if (const Index v = first_non_finite(logits.span()); v >= 0)
    fail<NonFiniteError>("draw_token: the logit of token {} of {} is {}; {}", v, V, static_cast<double>(logits[v]),
                         kOverflow);
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
  if (o.stop < -1 || o.stop >= V)
    fail<ValueError>("sample: the stop token {} is outside the vocabulary of {} (-1: none)", o.stop, V);
  if (!(o.temperature > 0) || !std::isfinite(o.temperature))
    fail<ValueError>("sample: the temperature must be positive and finite, got {}", o.temperature);

  std::vector<std::int32_t> tokens(prompt.begin(), prompt.end());
  Rng rng(o.seed, o.stream);
  std::optional<KvCache<T>> cache;
  if (o.cache) cache.emplace(context);
  Tape<T> tape;  // reset for every draw, its buffers reused: values only
  NoGradGuard<T> no_grad(tape);
  Ids fed;
  std::vector<double> p, seen;  // the draw's probabilities; the logits on_logits sees
  Index cached_from = -1;       // the cache holds tokens [cached_from, cached_from + cache->length())
  for (Index i = 0; i < o.count; ++i) {
    const Index n = static_cast<Index>(tokens.size());
    const Index start = window_start(n, context);
    std::span<const std::int32_t> feed = std::span<const std::int32_t>(tokens).subspan(static_cast<std::size_t>(start));
    if (cache) {
      if (start != cached_from) {  // a new window: its tokens at positions from 0 again
        cache->clear();
        cached_from = start;
      }
      // The window's tokens not fed yet: the last drawn one, or the whole window after a jump (the prompt first).
      feed = std::span<const std::int32_t>(tokens).subspan(static_cast<std::size_t>(cached_from + cache->length()));
    }
    fed.resize(Shape::mat(1, static_cast<Index>(feed.size())));
    std::copy(feed.begin(), feed.end(), fed.data());
    tape.reset();
    const Index held = cache ? cache->length() : 0;
    const TensorT<T>& all = model.forward(tape, fed, cache ? &*cache : nullptr).value();  // (1, N, V)
    if (cache) check_cache_grew(model, *cache, tape, held, fed.numel());
    if (all.numel() != static_cast<Index>(feed.size()) * V || all.cols() != V)
      fail<ShapeError>("sample: the model gave logits of shape {} for {} tokens and a vocabulary of {}", all.shape(),
                       feed.size(), V);
    const std::span<const T> logits(all.data() + all.numel() - V, static_cast<std::size_t>(V));  // after the last token
    if (const Index v = first_non_finite(logits); v >= 0)
      fail<NonFiniteError>(
          "sample: drawing token {} of {} (position {} of the text), the model's logit of token {} of {} is "
          "{}; {}",
          i + 1, o.count, n, v, V, static_cast<double>(logits[static_cast<std::size_t>(v)]), kOverflow);
    if (o.on_logits) {
      seen.assign(logits.begin(), logits.end());
      o.on_logits(seen);
    }
    tokens.push_back(draw(logits, o.temperature, rng.uniform(), p));
    if (o.on_token) o.on_token(tokens.back());
    if (tokens.back() == o.stop) break;
  }
  return {tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size()), tokens.end()};
}

template std::vector<std::int32_t> sample(LanguageModel<float>&, std::span<const std::int32_t>, const SampleOptions&);
template std::vector<std::int32_t> sample(LanguageModel<double>&, std::span<const std::int32_t>, const SampleOptions&);
template std::int32_t draw_token(const TensorT<float>&, double, double);
template std::int32_t draw_token(const TensorT<double>&, double, double);

}  // namespace tapegrad
