// layers/kv_cache.hpp and layers/generate.hpp: the inference path without a tape (every layer's infer or
// step against its forward), the cache of keys and values against a full recompute, in float64 and float32,
// both attention modes, with dropout in evaluation mode; the sliding window past the context, sampling with
// and without the cache, and the refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "helpers.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/layers/embedding.hpp"
#include "tapegrad/layers/generate.hpp"
#include "tapegrad/layers/kv_cache.hpp"
#include "tapegrad/layers/transformer.hpp"

using namespace tapegrad;
using test::random_tensor;

namespace {

// A causal language model built from the library's blocks only, as a user builds one: token embedding and
// positions, a TransformerStack, an LmHead tied to the embedding or not.
struct TinyOptions {
  AttentionMode mode = AttentionMode::learnable;
  Index vocab = 11, d_model = 12, n_heads = 3, n_layers = 2, context = 8;
  PositionEncoding positions = PositionEncoding::learned;
  bool tie = true, layernorm = true, mlp = true;
  double dropout = 0;
  std::uint64_t seed = 1;
};

template <class T>
class TinyLm : public Module<T>, public LanguageModel<T> {
 public:
  explicit TinyLm(const TinyOptions& o)
      : o_(o), rng_(o.seed), embed_("embed", {.vocab = o.vocab, .dim = o.d_model, .init = Initializer::normal(0.5)}, rng_),
        pos_(make_positions(o, rng_)),
        stack_("stack",
               {.n_layers = o.n_layers,
                .block = {.mode = o.mode, .d_model = pos_->output_width(), .n_heads = o.n_heads, .layernorm = o.layernorm,
                          .mlp = o.mlp, .dropout = o.dropout}},
               rng_) {
    this->register_child(embed_);
    this->register_child(*pos_);
    this->register_child(stack_);
    const LmHeadOptions head{.d_model = pos_->output_width(), .vocab = o.vocab};
    head_ = o.tie ? std::make_unique<LmHead<T>>("head", head, embed_) : std::make_unique<LmHead<T>>("head", head, rng_);
    this->register_child(*head_);
    for (Parameter<T>* p : this->parameters())  // biases and norms away from their zeros and ones
      if (p->value.rank() == 1) p->value = random_tensor<T>(p->value.shape(), rng_, 0.3);
  }

  TensorT<T> forward_all(std::span<const std::int32_t> tokens) {  // (1, L, V) by the tape
    Ids ids(Shape::mat(1, static_cast<Index>(tokens.size())));
    std::copy(tokens.begin(), tokens.end(), ids.data());
    Tape<T> tape;
    NoGradGuard<T> guard(tape);
    return head_->forward(stack_.forward(pos_->forward(embed_.forward(tape, ids)))).value();
  }

  Index vocab() const override { return o_.vocab; }
  Index context() const override { return o_.context; }
  TensorT<T> next_logits(std::span<const std::int32_t> window) override {
    const TensorT<T> all = forward_all(window);
    return TensorT<T>(Shape::mat(1, o_.vocab), std::span<const T>(all.data() + all.numel() - o_.vocab, static_cast<std::size_t>(o_.vocab)));
  }
  TensorT<T> step(std::span<const std::int32_t> tokens, KvCache<T>& cache) override {
    ++steps;
    fed += static_cast<Index>(tokens.size());
    const TensorT<T> all = head_->infer(stack_.step(pos_->infer(embed_.infer(tokens), cache.length()), cache));  // (N, V)
    return TensorT<T>(Shape::mat(1, o_.vocab), std::span<const T>(all.data() + all.numel() - o_.vocab, static_cast<std::size_t>(o_.vocab)));
  }
  KvCache<T> make_cache() override { return KvCache<T>(o_.n_layers, o_.context); }

  TransformerStack<T>& stack() { return stack_; }
  Index steps = 0, fed = 0;  // step() calls, and the tokens they fed

 private:
  static std::unique_ptr<Positions<T>> make_positions(const TinyOptions& o, Rng& rng) {
    const PositionOptions p{.kind = o.positions, .max_len = o.context, .d_model = o.d_model};
    return p.kind == PositionEncoding::learned ? std::make_unique<Positions<T>>("pos", p, rng)
                                               : std::make_unique<Positions<T>>("pos", p);
  }

  TinyOptions o_;
  Rng rng_;
  Embedding<T> embed_;
  std::unique_ptr<Positions<T>> pos_;
  TransformerStack<T> stack_;
  std::unique_ptr<LmHead<T>> head_;
};

std::vector<std::int32_t> random_tokens(Index n, Index vocab, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& v : t) v = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  return t;
}

// The largest |cached - recomputed| over every logit of every position of a sequence of `context` tokens:
// row t of one forward of the whole sequence against the step that feeds token t, the first three tokens
// fed in one step (a prompt), the rest one at a time.
template <class T>
double cached_against_recomputed(TinyLm<T>& model, const TinyOptions& o) {
  const std::vector<std::int32_t> tokens = random_tokens(o.context, o.vocab, 7);
  const TensorT<T> all = model.forward_all(tokens);  // (1, L, V)
  KvCache<T> cache = model.make_cache();
  double worst = 0;
  for (Index t = 2; t < o.context; ++t) {
    const auto fed = std::span<const std::int32_t>(tokens).subspan(t == 2 ? 0 : static_cast<std::size_t>(t), t == 2 ? 3 : 1);
    const TensorT<T> row = model.step(fed, cache);  // (1, V): after token t
    REQUIRE(row.shape() == Shape::mat(1, o.vocab));
    for (Index v = 0; v < o.vocab; ++v)
      worst = std::max(worst, std::abs(static_cast<double>(row[v]) - static_cast<double>(all[t * o.vocab + v])));
  }
  CHECK(cache.length() == o.context);
  CHECK(cache.full());
  // The whole sequence in one step: its last row, and the same keys and values in every layer.
  KvCache<T> at_once = model.make_cache();
  const TensorT<T> last = model.step(tokens, at_once);
  for (Index v = 0; v < o.vocab; ++v)
    worst = std::max(worst, std::abs(static_cast<double>(last[v]) - static_cast<double>(all[(o.context - 1) * o.vocab + v])));
  for (Index layer = 0; layer < o.n_layers; ++layer)
    for (Index i = 0; i < at_once.layer(layer).keys().numel(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(at_once.layer(layer).keys()[i]) -
                                       static_cast<double>(cache.layer(layer).keys()[i])));
  return worst;
}

// Model variants: both attention modes, each position encoding, tied and untied heads, blocks without
// norms or MLP, and dropout (in evaluation mode).
std::vector<std::pair<std::string, TinyOptions>> variants() {
  std::vector<std::pair<std::string, TinyOptions>> v;
  for (AttentionMode mode : {AttentionMode::learnable, AttentionMode::parameter_free}) {
    const std::string m(to_string(mode));
    v.push_back({m, {.mode = mode}});
    v.push_back({m + ", untied, sinusoidal", {.mode = mode, .positions = PositionEncoding::sinusoidal, .tie = false}});
    v.push_back({m + ", one-hot positions", {.mode = mode, .d_model = 10, .n_heads = 2, .positions = PositionEncoding::onehot,
                                             .tie = false}});
    v.push_back({m + ", no norms, no MLP", {.mode = mode, .layernorm = false, .mlp = false}});
    v.push_back({m + ", dropout 0.3 (eval)", {.mode = mode, .dropout = 0.3}});
  }
  return v;
}

}  // namespace

TEST_CASE("inference: each layer's infer is its forward's value, without a tape") {
  Rng rng(3);
  const TensorD x = random_tensor(Shape::mat(5, 6), rng);
  Tape<double> tape;
  NoGradGuard<double> guard(tape);
  const Var<double> vx = tape.constant(TensorD(Shape::batched(1, 5, 6), x.span()));
  Linear<double> linear("linear", {.in = 6, .out = 4}, rng);
  CHECK_TENSOR_NEAR(linear.infer(x), TensorD(Shape::mat(5, 4), linear.forward(vx).value().span()), 1e-15, 1e-15);
  LayerNorm<double> norm("norm", 6);
  norm.weight().value = random_tensor(Shape::vec(6), rng);
  CHECK_TENSOR_NEAR(norm.infer(x), TensorD(Shape::mat(5, 6), norm.forward(vx).value().span()), 1e-15, 1e-15);
  FeedForward<double> ff("ff", {.d_model = 6, .d_hidden = 7}, rng);
  CHECK_TENSOR_NEAR(ff.infer(x), TensorD(Shape::mat(5, 6), ff.forward(vx).value().span()), 1e-14, 1e-14);
  Embedding<double> embed("embed", {.vocab = 9, .dim = 6}, rng);
  CHECK(embed.infer(std::vector<std::int32_t>{4, 1}) ==
        TensorD(Shape::mat(2, 6), {embed.table().value.at(4, 0), embed.table().value.at(4, 1), embed.table().value.at(4, 2),
                                   embed.table().value.at(4, 3), embed.table().value.at(4, 4), embed.table().value.at(4, 5),
                                   embed.table().value.at(1, 0), embed.table().value.at(1, 1), embed.table().value.at(1, 2),
                                   embed.table().value.at(1, 3), embed.table().value.at(1, 4), embed.table().value.at(1, 5)}));
  for (PositionEncoding kind : {PositionEncoding::none, PositionEncoding::onehot, PositionEncoding::learned,
                                PositionEncoding::sinusoidal}) {
    CAPTURE(to_string(kind));
    Positions<double> pos("pos", {.kind = kind, .max_len = 7, .d_model = 6}, rng);
    const TensorD all = pos.forward(vx).value();  // (1, 5, width): rows at positions 0 .. 4
    const TensorD tail = pos.infer(TensorD(Shape::mat(3, 6), std::span<const double>(x.data() + 12, 18)), 2);
    CHECK(tail == TensorD(Shape::mat(3, pos.output_width()),
                          std::span<const double>(all.data() + 2 * pos.output_width(), static_cast<std::size_t>(3 * pos.output_width()))));
  }
  for (bool tie : {true, false}) {
    Embedding<double> table("embed", {.vocab = 5, .dim = 6}, rng);
    const LmHeadOptions options{.d_model = 6, .vocab = 5};
    auto head = tie ? std::make_unique<LmHead<double>>("head", options, table) : std::make_unique<LmHead<double>>("head", options, rng);
    head->parameter("head.bias").value = random_tensor(Shape::vec(5), rng);
    CHECK_TENSOR_NEAR(head->infer(x), TensorD(Shape::mat(5, 5), head->forward(vx).value().span()), 1e-15, 1e-15);
  }
}

TEST_CASE("kv cache: the cached logits equal a full recompute, float64 within 1e-12, every variant") {
  for (const auto& [variant, o] : variants()) {
    const std::string& name = variant;  // clang 14 cannot capture a structured binding in CAPTURE's lambda
    CAPTURE(name);
    TinyLm<double> model(o);
    model.eval();
    CHECK(cached_against_recomputed(model, o) <= 1e-12);
  }
}

// The float bound: logits here are of order 1 to 10, and a float's rounding (6e-8 relative) through two
// blocks' products, softmax and norms, summed in another grouping (one row against many), moves them by
// well under 1e-5; the test allows 2e-5, against differences of 1e-1 and more from a wrong cache (a key
// at the wrong position, a missing bias).
TEST_CASE("kv cache: in float32 the cached logits agree with a full recompute within 2e-5") {
  test::with_each_kernel([] {
    for (const auto& [variant, o] : variants()) {
      const std::string& name = variant;  // clang 14 cannot capture a structured binding in CAPTURE's lambda
      CAPTURE(name);
      TinyLm<float> model(o);
      model.eval();
      const double worst = cached_against_recomputed(model, o);
      CAPTURE(worst);
      CHECK(worst <= 2e-5);
    }
  });
}

TEST_CASE("kv cache: what it holds, and what it refuses") {
  KvCache<double> cache(2, 3);
  CHECK(cache.layers() == 2);
  CHECK(cache.capacity() == 3);
  CHECK(cache.length() == 0);
  AttentionCache<double>& layer = cache.layer(1);
  const TensorD k(Shape::mat(1, 4), {1, 2, 3, 4}), v(Shape::mat(1, 2), {5, 6});
  layer.append(k, v);
  CHECK(layer.length() == 1);
  CHECK(layer.keys().shape() == Shape::mat(3, 4));
  CHECK(layer.values().at(0, 1) == 6);
  CHECK(cache.length() == 0);  // layer 0's count: the position of the next token
  CHECK_THROWS_WITH_AS(layer.append(TensorD(Shape::mat(1, 5)), v),
                       "attention_cache: the keys are 1x5 and the values 1x2 but the cache holds rows of 4 and 2", ShapeError);
  CHECK_THROWS_WITH_AS(layer.append(TensorD(Shape::mat(2, 4)), v),
                       "attention_cache: the keys are 2x4 and the values 1x2; they must be rows of as many positions",
                       ShapeError);
  CHECK_THROWS_WITH_AS(layer.append(TensorD(Shape::mat(3, 4)), TensorD(Shape::mat(3, 2))),
                       "attention_cache: 3 more positions do not fit: it holds 1 of 3 (the longest sequence it was made "
                       "for); clear it and feed a shorter window",
                       UsageError);
  layer.append(TensorD(Shape::mat(2, 4), {1, 2, 3, 4, 5, 6, 7, 8}), TensorD(Shape::mat(2, 2), {9, 10, 11, 12}));
  CHECK(layer.full());
  CHECK(layer.keys().at(2, 3) == 8);
  CHECK(layer.values().at(1, 0) == 9);
  CHECK_THROWS_WITH_AS(layer.append(k, v),
                       "attention_cache: 1 more position does not fit: it holds 3 of 3 (the longest sequence it was made "
                       "for); clear it and feed a shorter window",
                       UsageError);
  cache.clear();
  CHECK(layer.length() == 0);
  CHECK_THROWS_WITH_AS(cache.layer(2), "kv_cache: layer 2 asked of a cache of 2 layers", ValueError);
  CHECK_THROWS_WITH_AS(KvCache<float>(0, 4), "kv_cache: layers and capacity must be positive, got 0 and 4", ValueError);

  TinyOptions o;
  TinyLm<double> model(o);
  model.eval();
  KvCache<double> wrong(1, o.context);
  const std::vector<std::int32_t> one = {3}, six = random_tokens(6, o.vocab, 1);
  CHECK_THROWS_WITH_AS(model.step(one, wrong), "transformer_stack 'stack': the cache has 1 layers for 2 blocks", ValueError);
  KvCache<double> full = model.make_cache();
  model.step(six, full);
  // The positions run out first: a learned table has max_len rows.
  CHECK_THROWS_WITH_AS(model.step(six, full), "positions 'pos': positions 6 to 11 go past the longest sequence, max_len 8",
                       ValueError);
  model.step(std::span<const std::int32_t>(six).first(2), full);
  CHECK(full.full());
  CHECK_THROWS_WITH_AS(model.step(one, full), "positions 'pos': position 8 is past the longest sequence, max_len 8",
                       ValueError);
  CHECK_THROWS_WITH_AS(model.stack().block(0).step(TensorD(Shape::mat(1, o.d_model)), full.layer(0)),
                       "attention_cache: 1 more position does not fit: it holds 8 of 8 (the longest sequence it was made "
                       "for); clear it and feed a shorter window",
                       UsageError);
}

TEST_CASE("kv cache: refusals name the layer: training mode with dropout, a non-causal layer, a wrong row") {
  TinyOptions o{.dropout = 0.3};
  TinyLm<double> model(o);  // in training mode, as a module starts
  KvCache<double> cache = model.make_cache();
  CHECK_THROWS_WITH_AS(model.step(std::vector<std::int32_t>{1}, cache),
                       "dropout 'stack.blocks.0.dropout1': the inference path computes evaluation mode's values, but the "
                       "model is in training mode with p 0.3; call eval() first",
                       UsageError);
  Rng rng(2);
  SelfAttention<double> open("attn", {.d_model = 4, .causal = false}, rng);
  AttentionCache<double> layer(4);
  CHECK_THROWS_WITH_AS(open.step(TensorD(Shape::mat(1, 4)), layer),
                       "self_attention 'attn': step() feeds the newest tokens only, which needs a causal layer (here "
                       "every token attends to later ones too)",
                       UsageError);
  SelfAttention<double> causal("attn", {.d_model = 4, .causal = true}, rng);
  CHECK_THROWS_WITH_AS(causal.step(TensorD(Shape::mat(2, 5)), layer),
                       "self_attention 'attn': x is 2x5 but a step takes the new tokens' rows, (tokens, 4)", ShapeError);
  Embedding<double> embed("embed", {.vocab = 3, .dim = 2}, rng);
  CHECK_THROWS_WITH_AS(embed.infer(std::vector<std::int32_t>{0, 3}), "embedding 'embed': token 3 is outside the vocabulary of 3",
                       ValueError);
}

TEST_CASE("generate: the window slides by half a context once the text is longer than the context") {
  CHECK(window_start(0, 8) == 0);
  CHECK(window_start(8, 8) == 0);   // 8 tokens: all of them
  CHECK(window_start(9, 8) == 4);   // then half a context forward: 5 tokens
  CHECK(window_start(12, 8) == 4);  // ... growing to 8
  CHECK(window_start(13, 8) == 8);
  CHECK(window_start(2, 1) == 1);   // a context of one: the last token
  CHECK(window_start(100, 7) == 93);  // jump 3: 7 tokens, the most that fit
  for (Index context : {1, 2, 5, 8, 64})
    for (Index n = 0; n < 300; ++n) {
      const Index a = window_start(n, context);
      CHECK(n - a <= context);
      CHECK(n - a >= std::min(n, context - std::max<Index>(1, context / 2) + 1));
    }
  CHECK_THROWS_WITH_AS(window_start(3, 0), "window_start: needs n >= 0 and context >= 1, got 3 and 0", ValueError);
}

TEST_CASE("generate: the same text with and without the cache, past the context, both modes, float and double") {
  const std::vector<std::int32_t> prompt = {3, 1, 4};
  for (const auto& [variant, o] : variants()) {
    const std::string& name = variant;  // clang 14 cannot capture a structured binding in CAPTURE's lambda
    CAPTURE(name);
    TinyLm<double> d(o);
    d.eval();
    const auto cached = sample(d, prompt, {.count = 5 * o.context, .seed = 11, .cache = true});
    const auto recomputed = sample(d, prompt, {.count = 5 * o.context, .seed = 11, .cache = false});
    CHECK(cached.size() == static_cast<std::size_t>(5 * o.context));
    CHECK(cached == recomputed);
    // The cost of the cache past the context: one step a drawn token, feeding at most two tokens a token on
    // average (a window fed again at each jump).
    CHECK(d.steps == 5 * o.context);
    CHECK(d.fed <= static_cast<Index>(prompt.size()) + 2 * 5 * o.context);
    TinyLm<float> f(o);
    f.eval();
    CHECK(sample(f, prompt, {.count = 5 * o.context, .seed = 11, .cache = true}) ==
          sample(f, prompt, {.count = 5 * o.context, .seed = 11, .cache = false}));
  }
}

TEST_CASE("generate: a seed fixes the text, the prompt may be longer than the context, refusals") {
  TinyOptions o;
  TinyLm<double> model(o);
  model.eval();
  const std::vector<std::int32_t> long_prompt = random_tokens(3 * o.context + 1, o.vocab, 5);
  const auto a = sample(model, long_prompt, {.count = 30, .seed = 1});
  CHECK(a == sample(model, long_prompt, {.count = 30, .seed = 1}));
  CHECK(a == sample(model, long_prompt, {.count = 30, .seed = 1, .cache = false}));
  CHECK(a != sample(model, long_prompt, {.count = 30, .seed = 2}));
  CHECK(std::all_of(a.begin(), a.end(), [&](std::int32_t t) { return t >= 0 && t < o.vocab; }));
  CHECK(sample(model, long_prompt, {.count = 0}).empty());
  // A cold temperature concentrates the draws on the likeliest token.
  const auto cold = sample(model, std::vector<std::int32_t>{2}, {.count = 1, .seed = 3, .temperature = 1e-3});
  const TensorD logits = model.next_logits(std::vector<std::int32_t>{2});
  CHECK(cold[0] == static_cast<std::int32_t>(std::max_element(logits.data(), logits.data() + o.vocab) - logits.data()));

  CHECK_THROWS_WITH_AS(sample(model, std::vector<std::int32_t>{}, {.count = 3}),
                       "sample: the prompt is empty; give at least one token to start from", ValueError);
  CHECK_THROWS_WITH_AS(sample(model, std::vector<std::int32_t>{1, 11}, {.count = 3}),
                       "sample: prompt token 11 at position 1 is outside the vocabulary of 11", ValueError);
  CHECK_THROWS_WITH_AS(sample(model, std::vector<std::int32_t>{1}, {.count = 3, .temperature = 0}),
                       "sample: the temperature must be positive and finite, got 0", ValueError);
}

TEST_CASE("generate: draw_token is the inverse of the cumulative distribution of softmax(logits / temperature)") {
  const TensorD logits(Shape::mat(1, 3), {0, std::log(3.0), std::log(4.0)});  // p = 1/8, 3/8, 4/8
  CHECK(draw_token(logits, 1.0, 0.0) == 0);
  CHECK(draw_token(logits, 1.0, 0.124) == 0);
  CHECK(draw_token(logits, 1.0, 0.126) == 1);
  CHECK(draw_token(logits, 1.0, 0.499) == 1);
  CHECK(draw_token(logits, 1.0, 0.501) == 2);
  CHECK(draw_token(logits, 1.0, 0.999999) == 2);
  // At temperature 2 the probabilities are proportional to 1, sqrt 3, 2.
  const double p0 = 1 / (1 + std::sqrt(3.0) + 2);
  CHECK(draw_token(logits, 2.0, p0 - 1e-9) == 0);
  CHECK(draw_token(logits, 2.0, p0 + 1e-9) == 1);
}

TEST_CASE("generate: non-finite logits are refused, naming the draw, never drawn as the last token") {
  const TensorD nan_logits(Shape::mat(1, 4), {5, std::numeric_limits<double>::quiet_NaN(), 1, 1});
  CHECK_THROWS_WITH_AS(draw_token(nan_logits, 1.0, 0.5), doctest::Contains("draw_token: the logit of token 1 of 4 is nan"),
                       NonFiniteError);
  const TensorD inf_logits(Shape::mat(1, 3), {0, std::numeric_limits<double>::infinity(), 1});
  CHECK_THROWS_AS(draw_token(inf_logits, 1.0, 0.5), NonFiniteError);
  // Weights that are finite but make the logits overflow, as a forged or diverged checkpoint's can.
  TinyOptions o;
  TinyLm<double> model(o);
  model.eval();
  for (auto* p : model.parameters()) p->value.array() *= 1e200;
  for (const bool cache : {true, false}) {
    CAPTURE(cache);
    CHECK_THROWS_WITH_AS(sample(model, std::vector<std::int32_t>{2, 3}, {.count = 5, .seed = 1, .cache = cache}),
                         doctest::Contains("sample: drawing token 1 of 5 (position 2 of the text), the model's logit of token"),
                         NonFiniteError);
  }
}

TEST_CASE("generate: on_token sees each token as it is drawn, in order, and what it throws ends the sampling") {
  TinyOptions o;
  TinyLm<double> model(o);
  model.eval();
  std::vector<std::int32_t> streamed;
  const auto drawn = sample(model, std::vector<std::int32_t>{1}, {.count = 12, .seed = 4, .on_token = [&](std::int32_t t) {
                                                                   streamed.push_back(t);
                                                                 }});
  CHECK(streamed == drawn);
  CHECK(drawn == sample(model, std::vector<std::int32_t>{1}, {.count = 12, .seed = 4}));  // the same draws without it
  int calls = 0;
  CHECK_THROWS_WITH_AS(sample(model, std::vector<std::int32_t>{1}, {.count = 12, .on_token = [&](std::int32_t) {
                                                                      if (++calls == 3) fail<IoError>("stdout: closed");
                                                                    }}),
                       "stdout: closed", IoError);
  CHECK(calls == 3);
}
