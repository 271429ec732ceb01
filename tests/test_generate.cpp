// layers/kv_cache.hpp and layers/generate.hpp: generation through the layers' one forward with gradients
// off, the cache of keys and values against a full recompute, in float64 and float32, both attention
// modes, with dropout in evaluation mode, and for a user's own block (RMSNorm as a Function, SwiGLU) with
// no code for generation; positions at an offset; the sliding window past the context, sampling with and
// without the cache, and the refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "helpers.hpp"
#include "tapegrad/autograd/function.hpp"
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

  // The one forward, for training and generation alike.
  Var<T> forward(Tape<T>& tape, const Ids& tokens, KvCache<T>* cache) override {
    if (cache) {
      ++steps;
      fed += tokens.numel();
    }
    Var<T> x = pos_->forward(embed_.forward(tape, tokens), cache);
    return head_->forward(stack_.forward(x, nullptr, cache));
  }
  Index vocab() const override { return o_.vocab; }
  Index context() const override { return o_.context; }

  TransformerStack<T>& stack() { return stack_; }
  Index steps = 0, fed = 0;  // cached forwards, and the tokens they fed

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

Ids ids_of(std::span<const std::int32_t> tokens) {
  Ids ids(Shape::mat(1, static_cast<Index>(tokens.size())));
  std::copy(tokens.begin(), tokens.end(), ids.data());
  return ids;
}

// The logits (1, L, V) of a language model's forward over `tokens`, gradients off.
template <class T>
TensorT<T> forward_all(LanguageModel<T>& model, std::span<const std::int32_t> tokens) {
  Tape<T> tape;
  NoGradGuard<T> off(tape);
  return model.forward(tape, ids_of(tokens), nullptr).value();
}

// The newest tokens through the cache: the logits (1, V) after the last of them.
template <class T>
TensorT<T> step(LanguageModel<T>& model, std::span<const std::int32_t> tokens, KvCache<T>& cache) {
  Tape<T> tape;
  NoGradGuard<T> off(tape);
  const TensorT<T>& all = model.forward(tape, ids_of(tokens), &cache).value();
  const Index V = model.vocab();
  return TensorT<T>(Shape::mat(1, V), std::span<const T>(all.data() + all.numel() - V, static_cast<std::size_t>(V)));
}

// The largest |cached - recomputed| over every logit of every position of a sequence of `context` tokens:
// row t of one forward of the whole sequence against the step that feeds token t, the first three tokens
// fed in one step (a prompt), the rest one at a time.
template <class T>
double cached_against_recomputed(LanguageModel<T>& model, Index n_layers) {
  const Index context = model.context(), vocab = model.vocab();
  const std::vector<std::int32_t> tokens = random_tokens(context, vocab, 7);
  const TensorT<T> all = forward_all(model, tokens);  // (1, L, V)
  KvCache<T> cache(context);
  double worst = 0;
  for (Index t = 2; t < context; ++t) {
    const auto fed = std::span<const std::int32_t>(tokens).subspan(t == 2 ? 0 : static_cast<std::size_t>(t), t == 2 ? 3 : 1);
    const TensorT<T> row = step(model, fed, cache);  // (1, V): after token t
    for (Index v = 0; v < vocab; ++v)
      worst = std::max(worst, std::abs(static_cast<double>(row[v]) - static_cast<double>(all[t * vocab + v])));
  }
  CHECK(cache.length() == context);
  CHECK(cache.full());
  // The whole sequence in one step: its last row, and the same keys and values in every layer.
  KvCache<T> at_once(context);
  const TensorT<T> last = step(model, tokens, at_once);
  for (Index v = 0; v < vocab; ++v)
    worst = std::max(worst, std::abs(static_cast<double>(last[v]) - static_cast<double>(all[(context - 1) * vocab + v])));
  CHECK(at_once.layers() == n_layers);
  CHECK(cache.layers() == n_layers);
  for (Index layer = 0; layer < n_layers; ++layer)
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

TEST_CASE("positions: a forward at an offset gives the rows a forward from 0 gives those positions") {
  Rng rng(3);
  const TensorD x = random_tensor(Shape::batched(1, 5, 6), rng);
  Tape<double> tape;
  NoGradGuard<double> guard(tape);
  const Var<double> vx = tape.constant(x);
  const Var<double> tail_x = tape.constant(TensorD(Shape::batched(1, 3, 6), std::span<const double>(x.data() + 12, 18)));
  for (PositionEncoding kind : {PositionEncoding::none, PositionEncoding::onehot, PositionEncoding::learned,
                                PositionEncoding::sinusoidal}) {
    CAPTURE(to_string(kind));
    Positions<double> pos("pos", {.kind = kind, .max_len = 7, .d_model = 6}, rng);
    const TensorD all = pos.forward(vx).value();  // (1, 5, width): rows at positions 0 .. 4
    const TensorD tail = pos.forward_from(tail_x, 2).value();  // rows at positions 2 .. 4
    const Index w = pos.output_width();
    CHECK(tail == TensorD(Shape::batched(1, 3, w), std::span<const double>(all.data() + 2 * w, static_cast<std::size_t>(3 * w))));
    if (kind != PositionEncoding::none)
      CHECK_THROWS_WITH_AS(pos.forward_from(tail_x, 5), "positions 'pos': positions 5 to 7 go past the longest sequence, max_len 7",
                           ValueError);
  }
}

namespace {

// A user's own causal language model, from the public headers only: its blocks normalise with RMSNorm, a
// Function op of the user's (as examples/first_steps/4_custom_op.cpp writes it), and feed forward through
// SwiGLU, down(silu(gate h) * up h); the one thing a block does for generation is hand the cache to its
// SelfAttention.
template <class T>
struct UserRmsNorm {  // y = x r g, r = 1 / sqrt(mean(x^2) + eps) per row
  static constexpr const char* name = "user_rms_norm";
  static constexpr const char* inputs[] = {"x", "gain"};
  struct Saved {
    TensorT<T> inv_rms, coefficient;  // (rows, 1)
  };
  void forward(Output<T, Saved>& out, const TensorT<T>& x, const TensorT<T>& gain) const {
    TensorT<T>& y = out.make(x.shape());
    TensorT<T>& r = out.saved().inv_rms;
    r.resize(Shape::mat(x.shape().flat_rows(), 1));
    const auto X = x.flat().array();
    r.array() = (X.square().rowwise().mean() + T(1e-6)).rsqrt();
    y.flat().array() = (X.colwise() * r.array()).rowwise() * gain.array().transpose();
  }
  // dgain += sum over rows of dy x r;  dx += r (g dy) - x r^3 mean(g dy x)
  static void backward(const Output<T, Saved>& out, const OpInput<T>& x, const OpInput<T>& gain) {
    Saved& saved = out.saved();
    const auto X = x.value.flat().array();
    const auto dY = out.grad().flat().array();
    const auto r = saved.inv_rms.array();
    gain.grad.add(((dY * X).colwise() * r).colwise().sum());
    if (!x.grad) return;
    const auto g_dy = dY.rowwise() * gain.value.array().transpose();
    saved.coefficient.resize(saved.inv_rms.shape());
    saved.coefficient.array() = r.cube() * (g_dy * X).rowwise().mean();
    x.grad.add(g_dy.colwise() * r - X.colwise() * saved.coefficient.array());
  }
};

template <class T>
class UserBlock : public Module<T> {
 public:
  UserBlock(std::string name, Index d, Index heads, Rng& rng)
      : Module<T>(std::move(name)),
        attn_("attn", {.d_model = d, .n_heads = heads, .bias = true, .output_projection = true, .causal = true}, rng),
        gate_("gate", {.in = d, .out = 2 * d}, rng), up_("up", {.in = d, .out = 2 * d}, rng),
        down_("down", {.in = 2 * d, .out = d}, rng) {
    for (Module<T>* child : std::initializer_list<Module<T>*>{&attn_, &gate_, &up_, &down_}) this->register_child(*child);
    g1_ = &this->register_parameter("norm1", random_tensor<T>(Shape::vec(d), rng, 0.3));
    g2_ = &this->register_parameter("norm2", random_tensor<T>(Shape::vec(d), rng, 0.3));
  }
  Var<T> forward(Var<T> x, KvCache<T>* cache) {
    Tape<T>& t = *x.tape;
    x = x + attn_.forward(apply(UserRmsNorm<T>{}, {x, t.param(*g1_)}), nullptr, cache);
    const Var<T> h = apply(UserRmsNorm<T>{}, {x, t.param(*g2_)});
    const Var<T> a = gate_.forward(h);
    return x + down_.forward(a * sigmoid(a) * up_.forward(h));
  }

 private:
  SelfAttention<T> attn_;
  Linear<T> gate_, up_, down_;
  Parameter<T>* g1_ = nullptr;
  Parameter<T>* g2_ = nullptr;
};

template <class T>
class UserLm : public Module<T>, public LanguageModel<T> {
 public:
  static constexpr Index kVocab = 13, kWidth = 8, kContext = 10;
  UserLm()
      : rng_(21), embed_("embed", {.vocab = kVocab, .dim = kWidth, .init = Initializer::normal(0.5)}, rng_),
        pos_("pos", {.kind = PositionEncoding::learned, .max_len = kContext, .d_model = kWidth}, rng_),
        block0_("block0", kWidth, 2, rng_), block1_("block1", kWidth, 2, rng_),
        head_("head", {.d_model = kWidth, .vocab = kVocab}, rng_) {
    for (Module<T>* child : std::initializer_list<Module<T>*>{&embed_, &pos_, &block0_, &block1_, &head_})
      this->register_child(*child);
  }
  Var<T> forward(Tape<T>& tape, const Ids& tokens, KvCache<T>* cache) override {
    Var<T> x = pos_.forward(embed_.forward(tape, tokens), cache);
    x = block0_.forward(x, cache);
    x = block1_.forward(x, forget_cache ? nullptr : cache);
    return head_.forward(x);
  }
  Index vocab() const override { return kVocab; }
  Index context() const override { return kContext; }
  bool forget_cache = false;  // a bug of the kind a user writes: block1 is not handed the cache

 private:
  Rng rng_;
  Embedding<T> embed_;
  Positions<T> pos_;
  UserBlock<T> block0_, block1_;
  LmHead<T> head_;
};

}  // namespace

TEST_CASE("kv cache: a user's own blocks (RMSNorm as a Function, SwiGLU) generate through the cache by their forward alone") {
  UserLm<double> model;
  model.eval();
  CHECK(cached_against_recomputed(model, 2) <= 1e-12);
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  // The logits each token is drawn from, through the cache and recomputed, side by side (on_logits).
  std::vector<std::vector<double>> seen[2];
  const auto keep = [&](int path) { return [&seen, path](std::span<const double> l) { seen[path].emplace_back(l.begin(), l.end()); }; };
  const Index count = 4 * UserLm<double>::kContext;
  const auto cached = sample(model, prompt, {.count = count, .seed = 5, .cache = true, .on_logits = keep(0)});
  CHECK(cached == sample(model, prompt, {.count = count, .seed = 5, .cache = false, .on_logits = keep(1)}));
  REQUIRE(seen[0].size() == static_cast<std::size_t>(count));
  REQUIRE(seen[1].size() == static_cast<std::size_t>(count));
  double worst = 0;
  for (std::size_t i = 0; i < seen[0].size(); ++i) {
    REQUIRE(seen[0][i].size() == static_cast<std::size_t>(UserLm<double>::kVocab));
    for (std::size_t v = 0; v < seen[0][i].size(); ++v) worst = std::max(worst, std::abs(seen[0][i][v] - seen[1][i][v]));
  }
  CHECK(worst <= 1e-12);
  // ... and it trains: the same forward on a tape with gradients, reading every parameter.
  Tape<double> tape;
  tape.backward(sum(model.forward(tape, ids_of(prompt), nullptr)));
  CHECK(tape.parameters_read().size() == model.parameters().size());
  CHECK(model.parameters().front()->grad.array().abs().maxCoeff() > 0);
}

TEST_CASE("generate: a model whose block is not handed the cache is refused, naming why, not sampled from silently") {
  UserLm<double> model;
  model.eval();
  model.forget_cache = true;
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  CHECK_THROWS_WITH_AS(sample(model, prompt, {.count = 4, .seed = 5, .cache = true}),
                       doctest::Contains("sample: the model's forward with a cache gives other logits than without one "
                                         "(largest difference "),
                       UsageError);
  CHECK_THROWS_WITH_AS(sample(model, prompt, {.count = 4, .seed = 5, .cache = true}),
                       doctest::Contains("): a layer that reads earlier tokens must take the cache (SelfAttention does), "
                                         "or sample with cache = false"),
                       UsageError);
  CHECK(sample(model, prompt, {.count = 4, .seed = 5, .cache = false}).size() == 4);  // recomputing needs no cache
  model.forget_cache = false;
  CHECK(sample(model, prompt, {.count = 4, .seed = 5, .cache = true}) ==
        sample(model, prompt, {.count = 4, .seed = 5, .cache = false}));
}

TEST_CASE("kv cache: the cached logits equal a full recompute, float64 within 1e-12, every variant") {
  for (const auto& [variant, o] : variants()) {
    const std::string& name = variant;  // clang 14 cannot capture a structured binding in CAPTURE's lambda
    CAPTURE(name);
    TinyLm<double> model(o);
    model.eval();
    CHECK(cached_against_recomputed(model, o.n_layers) <= 1e-12);
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
      const double worst = cached_against_recomputed(model, o.n_layers);
      CAPTURE(worst);
      CHECK(worst <= 2e-5);
    }
  });
}

TEST_CASE("kv cache: what it holds, and what it refuses") {
  KvCache<double> cache(3);
  CHECK(cache.layers() == 0);  // a layer's entry is made when it first appends
  CHECK(cache.capacity() == 3);
  CHECK(cache.length() == 0);
  const int first_layer = 0, second_layer = 0;  // two layers' addresses, as SelfAttention passes `this`
  AttentionCache<double>& layer = cache.of(&first_layer);
  CHECK(&cache.of(&first_layer) == &layer);  // the same layer, the same entry
  AttentionCache<double>& other = cache.of(&second_layer);
  CHECK(cache.layers() == 2);
  const TensorD k(Shape::mat(1, 4), {1, 2, 3, 4}), v(Shape::mat(1, 2), {5, 6});
  layer.append(k, v);
  CHECK(layer.length() == 1);
  CHECK(layer.keys().shape() == Shape::batched(1, 1, 4));  // the positions held, one sequence
  CHECK(layer.values().at(0, 0, 1) == 6);
  const double* keys_at = layer.keys().data();
  CHECK(cache.length() == 0);  // the fewest any layer holds: the position of the next token, until all appended
  other.append(k, v);
  CHECK(cache.length() == 1);
  CHECK_THROWS_WITH_AS(layer.append(TensorD(Shape::mat(1, 5)), v),
                       "attention_cache: the keys are 1x5 and the values 1x2 but the cache holds rows of 4 and 2", ShapeError);
  CHECK_THROWS_WITH_AS(layer.append(TensorD(Shape::mat(2, 4)), v),
                       "attention_cache: the keys are 2x4 and the values 1x2; they must be rows of as many positions of "
                       "one sequence",
                       ShapeError);
  CHECK_THROWS_WITH_AS(layer.append(TensorD(Shape::mat(3, 4)), TensorD(Shape::mat(3, 2))),
                       "attention_cache: 3 more positions do not fit: it holds 1 of 3 (the longest sequence it was made "
                       "for); clear it and feed a shorter window",
                       UsageError);
  layer.append(TensorD(Shape::mat(2, 4), {1, 2, 3, 4, 5, 6, 7, 8}), TensorD(Shape::mat(2, 2), {9, 10, 11, 12}));
  CHECK(layer.full());
  CHECK(layer.keys().at(0, 2, 3) == 8);
  CHECK(layer.values().at(0, 1, 0) == 9);
  CHECK(layer.keys().data() == keys_at);  // appends within the capacity move nothing a recording read in place
  CHECK_THROWS_WITH_AS(layer.append(k, v),
                       "attention_cache: 1 more position does not fit: it holds 3 of 3 (the longest sequence it was made "
                       "for); clear it and feed a shorter window",
                       UsageError);
  cache.clear();
  CHECK(layer.length() == 0);
  CHECK(cache.layers() == 2);  // cleared, not forgotten
  CHECK_THROWS_WITH_AS(cache.layer(2), "kv_cache: layer 2 asked of a cache that 2 layers have used", ValueError);
  CHECK_THROWS_WITH_AS(KvCache<float>(0), "kv_cache: capacity must be positive, got 0", ValueError);

  TinyOptions o;
  TinyLm<double> model(o);
  model.eval();
  const std::vector<std::int32_t> one = {3}, six = random_tokens(6, o.vocab, 1);
  KvCache<double> full(o.context);
  step(model, six, full);
  CHECK(full.layers() == o.n_layers);  // one entry per attention layer, made by the model's own forward
  // The positions run out first: a learned table has max_len rows.
  CHECK_THROWS_WITH_AS(step(model, six, full), "positions 'pos': positions 6 to 11 go past the longest sequence, max_len 8",
                       ValueError);
  step(model, std::span<const std::int32_t>(six).first(2), full);
  CHECK(full.full());
  CHECK_THROWS_WITH_AS(step(model, one, full), "positions 'pos': position 8 is past the longest sequence, max_len 8",
                       ValueError);
  Tape<double> tape;
  NoGradGuard<double> off(tape);
  CHECK_THROWS_WITH_AS(model.stack().block(0).forward(tape.constant(TensorD(Shape::batched(1, 1, o.d_model))), nullptr,
                                                      &full),
                       "attention_cache: 1 more position does not fit: it holds 8 of 8 (the longest sequence it was made "
                       "for); clear it and feed a shorter window",
                       UsageError);
}

TEST_CASE("kv cache: refusals name the layer: a non-causal layer, gradients on, a batch or padding") {
  Rng rng(2);
  SelfAttention<double> open("attn", {.d_model = 4, .causal = false}, rng);
  SelfAttention<double> causal("attn", {.d_model = 4, .causal = true}, rng);
  KvCache<double> cache(4);
  Tape<double> tape;
  const Var<double> x = tape.constant(TensorD(Shape::batched(1, 1, 4)));
  CHECK_THROWS_WITH_AS(causal.forward(x, nullptr, &cache),
                       "self_attention 'attn': a cached forward takes no gradient (the cache's keys are values, not a "
                       "recording); run it with gradients off (NoGradGuard)",
                       UsageError);
  NoGradGuard<double> off(tape);
  CHECK_THROWS_WITH_AS(open.forward(x, nullptr, &cache),
                       "self_attention 'attn': a cache feeds the newest tokens only, which needs a causal layer (here "
                       "every token attends to later ones too)",
                       UsageError);
  CHECK_THROWS_WITH_AS(causal.forward(tape.constant(TensorD(Shape::batched(2, 1, 4))), nullptr, &cache),
                       "self_attention 'attn': a cached forward reads one sequence's newest tokens, (1, tokens, 4) and no "
                       "padding; x is 2x1x4",
                       ShapeError);
  CHECK(cache.length() == 0);  // nothing appended by a refused forward
  causal.forward(x, nullptr, &cache);
  CHECK(cache.layers() == 1);
  CHECK(cache.length() == 1);
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
  const TensorD logits = forward_all(model, std::vector<std::int32_t>{2});  // (1, 1, V)
  CHECK(cold[0] == static_cast<std::int32_t>(std::max_element(logits.data(), logits.data() + o.vocab) - logits.data()));

  CHECK_THROWS_WITH_AS(sample(model, std::vector<std::int32_t>{}, {.count = 3}),
                       "sample: the prompt is empty; give at least one token to start from", ValueError);
  CHECK_THROWS_WITH_AS(sample(model, std::vector<std::int32_t>{1, 11}, {.count = 3}),
                       "sample: prompt token 11 at position 1 is outside the vocabulary of 11", ValueError);
  CHECK_THROWS_WITH_AS(sample(model, std::vector<std::int32_t>{1}, {.count = 3, .temperature = 0}),
                       "sample: the temperature must be positive and finite, got 0", ValueError);
}

TEST_CASE("generate: a model in training mode is sampled in evaluation mode, then left in training mode") {
  TinyOptions o;
  o.dropout = 0.3;
  TinyLm<double> model(o);
  Rng masks(9);
  model.set_rng(&masks);  // as a Trainer sets one: in training mode the dropout layers would draw masks
  model.eval();
  model.stack().train();  // one subtree back in training mode: the sampler must not leave it switched
  const std::vector<std::int32_t> prompt = random_tokens(3, o.vocab, 4);
  const auto in_training = sample(model, prompt, {.count = 20, .seed = 5});
  CHECK(model.stack().training());
  CHECK_FALSE(model.training());
  model.eval();
  CHECK(in_training == sample(model, prompt, {.count = 20, .seed = 5}));
  CHECK(in_training == sample(model, prompt, {.count = 20, .seed = 5, .cache = false}));
  // The modes come back also when sampling throws.
  model.train();
  CHECK_THROWS_AS(sample(model, prompt, {.count = 5, .on_token = [](std::int32_t) { fail<ValueError>("stop"); }}),
                  ValueError);
  CHECK(model.training());
  CHECK(model.stack().training());
}

namespace {

// A model whose forward without a cache overflows (NaN logits) while its cached forward does not.
struct NanWithoutCache : TinyLm<double> {
  using TinyLm<double>::TinyLm;
  Var<double> forward(Tape<double>& tape, const Ids& tokens, KvCache<double>* cache) override {
    const Var<double> logits = TinyLm<double>::forward(tape, tokens, cache);
    return cache ? logits : scale(logits, std::numeric_limits<double>::quiet_NaN());
  }
};

// A language model that holds its modules instead of being one: the sampler cannot switch their modes.
struct NotAModule : LanguageModel<double> {
  TinyLm<double> inner{TinyOptions{.dropout = 0.3}};
  Var<double> forward(Tape<double>& tape, const Ids& tokens, KvCache<double>* cache) override {
    return inner.forward(tape, tokens, cache);
  }
  Index vocab() const override { return inner.vocab(); }
  Index context() const override { return inner.context(); }
};

}  // namespace

TEST_CASE("generate: a language model that is not a Module is sampled as its forward runs, its modes untouched") {
  NotAModule model;  // its dropout in training mode, with no stream: its forward refuses
  CHECK_THROWS_WITH_AS(sample(model, std::vector<std::int32_t>{1, 2}, {.count = 3}),
                       doctest::Contains("training mode with p 0.3 needs a random stream"), UsageError);
  CHECK(model.inner.training());
  model.inner.eval();
  CHECK(sample(model, std::vector<std::int32_t>{1, 2}, {.count = 3}) ==
        sample(model.inner, std::vector<std::int32_t>{1, 2}, {.count = 3}));
}

TEST_CASE("generate: logits recomputed without the cache that are not finite are refused, naming where") {
  NanWithoutCache model(TinyOptions{});
  CHECK_THROWS_WITH_AS(sample(model, std::vector<std::int32_t>{1, 2}, {.count = 3}),
                       "sample: recomputing the cached logits without the cache, the model's logit of token 0 of 11 "
                       "is nan; its weights make the logits overflow, and no token can be drawn from them",
                       NonFiniteError);
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

TEST_CASE("generate: a stop token ends the text once drawn, streams of one seed draw apart, and refusals") {
  TinyOptions o;
  TinyLm<double> model(o);
  model.eval();
  const std::vector<std::int32_t> prompt = {1};
  const auto whole = sample(model, prompt, {.count = 40, .seed = 6});
  // Stop at the first token that occurs after the first draw: the text is the whole one's prefix through it.
  const std::int32_t stop = whole[3];
  const auto first = static_cast<std::size_t>(std::find(whole.begin(), whole.end(), stop) - whole.begin());
  for (const bool cache : {true, false}) {
    CAPTURE(cache);
    const auto stopped = sample(model, prompt, {.count = 40, .seed = 6, .stop = stop, .cache = cache});
    CHECK(stopped == std::vector<std::int32_t>(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(first) + 1));
  }
  // Stream 0 is the seed's own stream; other streams draw other texts, each fixed by (seed, stream).
  CHECK(sample(model, prompt, {.count = 40, .seed = 6, .stream = 0}) == whole);
  const auto other = sample(model, prompt, {.count = 40, .seed = 6, .stream = 1});
  CHECK(other != whole);
  CHECK(other == sample(model, prompt, {.count = 40, .seed = 6, .stream = 1, .cache = false}));
  CHECK_THROWS_WITH_AS(sample(model, prompt, {.count = 3, .stop = static_cast<std::int32_t>(o.vocab)}),
                       "sample: the stop token 11 is outside the vocabulary of 11", ValueError);
  CHECK_THROWS_WITH_AS(sample(model, prompt, {.count = 3, .stop = -1}),
                       "sample: the stop token -1 is outside the vocabulary of 11", ValueError);  // no token means none
}

namespace {

// Finding 09: attention written by hand from the ops (matmul_bt, softmax_rows, matmul), parameter-free and
// causal, that does not take the cache, after a SelfAttention that does (optional). With the SelfAttention
// the cache holds the tokens read, so the sampler feeds only the newest one, which is all the hand-written
// attention then sees.
template <class T>
class HandWrittenLm : public Module<T>, public LanguageModel<T> {
 public:
  static constexpr Index kVocab = 9, kWidth = 6, kContext = 8;
  explicit HandWrittenLm(bool self_attention)
      : rng_(4), embed_("embed", {.vocab = kVocab, .dim = kWidth, .init = Initializer::normal(0.5)}, rng_),
        pos_("pos", {.kind = PositionEncoding::learned, .max_len = kContext, .d_model = kWidth}, rng_),
        head_("head", {.d_model = kWidth, .vocab = kVocab}, rng_) {
    this->register_children(embed_, pos_, head_);
    if (self_attention) {
      attn_ = std::make_unique<SelfAttention<T>>("attn", SelfAttentionOptions{.d_model = kWidth, .causal = true}, rng_);
      this->register_child(*attn_);
    }
  }
  Var<T> forward(Tape<T>& tape, const Ids& tokens, KvCache<T>* cache) override {
    Var<T> x = pos_.forward(embed_.forward(tape, tokens), cache);  // (1, N, D)
    if (attn_) x = x + attn_->forward(x, nullptr, cache);
    const Index n = x.shape().rows;
    causal_.resize(Shape::mat(n, n));
    for (Index i = 0; i < n; ++i)
      for (Index j = 0; j < n; ++j) causal_.at(i, j) = static_cast<std::uint8_t>(j > i);
    const Var<T> weights = softmax_rows(matmul_bt(x, x), &causal_, 1 / std::sqrt(static_cast<double>(kWidth)));
    return head_.forward(x + matmul(weights, x));  // softmax(x x^T / sqrt(D)) x over the tokens given only
  }
  Index vocab() const override { return kVocab; }
  Index context() const override { return kContext; }

 private:
  Rng rng_;
  Embedding<T> embed_;
  Positions<T> pos_;
  LmHead<T> head_;
  std::unique_ptr<SelfAttention<T>> attn_;
  Mask causal_;
};

}  // namespace

TEST_CASE("generate: a model whose attention is written by hand and does not take the cache is refused (finding 09)") {
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  HandWrittenLm<double> d(true);
  d.eval();
  CHECK(cached_against_recomputed(d, 1) > 1e-2);  // what the cache would sample from is not the model's
  CHECK_THROWS_WITH_AS(sample(d, prompt, {.count = 6, .seed = 5}),
                       doctest::Contains("sample: the model's forward with a cache gives other logits than without one"),
                       UsageError);
  CHECK(sample(d, prompt, {.count = 6, .seed = 5, .cache = false}).size() == 6);
  HandWrittenLm<float> f(true);
  f.eval();
  CHECK_THROWS_AS(sample(f, prompt, {.count = 6, .seed = 5}), UsageError);
  // Without a layer that takes the cache it holds nothing, so every step feeds the whole window: the same text.
  HandWrittenLm<double> alone(false);
  alone.eval();
  CHECK(sample(alone, prompt, {.count = 20, .seed = 5}) == sample(alone, prompt, {.count = 20, .seed = 5, .cache = false}));
}
