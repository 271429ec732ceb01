// layers/decoder_lm.hpp: the library's language model. Its parameter count is the built model's (and a
// count worked out by hand here, as the examples' char_lm and gpt had it), for any configuration, counted
// without the configuration's memory; its cached logits equal a full recompute, it
// rebuilds from a checkpoint by its kind, and sample() reads it in evaluation mode and restores the
// caller's. Its gradients are checked with every layer's (tests/catalogue/layer_checks.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "helpers.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/tensor_budget.hpp"
#include "tapegrad/layers/decoder_lm.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"

using namespace tapegrad;

namespace {

Ids ids_of(const std::vector<std::int32_t>& tokens) {
  Ids ids(Shape::mat(1, static_cast<Index>(tokens.size())));
  std::copy(tokens.begin(), tokens.end(), ids.data());
  return ids;
}

// The largest difference between the logits of the whole sequence in one forward and those of the same
// tokens fed one at a time through a cache.
template <class T>
double cached_against_recomputed(DecoderLm<T>& model, const std::vector<std::int32_t>& tokens) {
  Tape<T> tape;
  NoGradGuard<T> off(tape);
  const TensorT<T> full = model.forward(tape, ids_of(tokens), nullptr).value();  // (1, N, V)
  KvCache<T> cache(model.context());
  double worst = 0;
  const Index V = model.vocab();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tape.reset();
    const TensorT<T> step = model.forward(tape, ids_of({tokens[i]}), &cache).value();  // (1, 1, V)
    for (Index v = 0; v < V; ++v)
      worst = std::max(worst, std::abs(static_cast<double>(step.data()[v] - full.data()[static_cast<Index>(i) * V + v])));
  }
  return worst;
}

}  // namespace

TEST_CASE("decoder lm: the parameter count is the built model's, and agrees with one worked out by hand") {
  // 27 symbols, 23 positions, width 64, MLP 256, two learnable blocks, an untied head with a bias:
  // embedding 27*64, positions 23*64, per block attention 4*64*64 + 4*64, MLP 2*64*256 + 256 + 64, two
  // LayerNorms 4*64; the final LayerNorm 2*64; the head 64*27 + 27.
  const DecoderLmConfig c{.vocab = 27, .context = 23, .d_model = 64, .n_heads = 4, .n_layers = 2};
  const Index block = (4 * 64 * 64 + 4 * 64) + (2 * 64 * 256 + 256 + 64) + 4 * 64;
  const Index by_hand = 27 * 64 + 23 * 64 + 2 * block + 2 * 64 + (64 * 27 + 27);
  CHECK(by_hand == 105051);
  CHECK(DecoderLm<float>(c).count_parameters() == by_hand);
  CHECK(DecoderLm<float>::count_parameters_of(c) == by_hand);
  DecoderLmConfig tied = c;
  tied.tie = true;
  tied.head_bias = false;
  tied.positions = PositionEncoding::sinusoidal;  // a fixed table: no parameters
  tied.attention = AttentionMode::parameter_free;
  CHECK(DecoderLm<float>::count_parameters_of(tied) == by_hand - 23 * 64 - 64 * 27 - 27 - 2 * (4 * 64 * 64 + 4 * 64));
}

TEST_CASE("decoder lm: the count equals the built model's for configurations of every kind") {
  Rng rng(17);
  const auto pick = [&rng](Index lo, Index hi) { return lo + static_cast<Index>(rng.uniform() * static_cast<double>(hi - lo + 1)); };
  for (int i = 0; i < 40; ++i) {
    DecoderLmConfig c;
    c.n_heads = pick(1, 4);
    c.d_model = c.n_heads * pick(1, 6);
    c.vocab = pick(1, 40);
    c.context = pick(1, 12);
    c.n_layers = pick(1, 3);
    if (pick(0, 1) == 1) c.d_ff = pick(1, 20);  // or unset: 4 d_model
    c.attention = pick(0, 1) == 0 ? AttentionMode::learnable : AttentionMode::parameter_free;
    const PositionEncoding kinds[] = {PositionEncoding::learned, PositionEncoding::sinusoidal, PositionEncoding::none};
    c.positions = kinds[pick(0, 2)];
    c.tie = pick(0, 1) == 1;
    c.head_bias = pick(0, 1) == 1;
    c.init = pick(0, 1) == 0 ? LmInit::pytorch : LmInit::gpt2;
    CAPTURE(i);
    CHECK(DecoderLm<float>::count_parameters_of(c) == DecoderLm<float>(c).count_parameters());
  }
}

TEST_CASE("decoder lm: a configuration of billions of parameters is counted without its memory") {
  // GPT-3's shape: 96 blocks of width 12288, 50257 tokens, 2048 positions, an untied head with a bias.
  const DecoderLmConfig gpt3{.vocab = 50257, .context = 2048, .d_model = 12288, .n_heads = 96, .n_layers = 96};
  const Index D = 12288, F = 4 * D;
  const Index block = (4 * D * D + 4 * D) + (2 * D * F + F + D) + 4 * D;
  const Index by_hand = 50257 * D + 2048 * D + 96 * block + 2 * D + (D * 50257 + 50257);
  const TensorBudget budget(1 << 20, "counting");  // a megabyte of tensors at most: nothing of its size is built
  CHECK(DecoderLm<float>::count_parameters_of(gpt3) == by_hand);
  CHECK(by_hand > 175'000'000'000);
}

TEST_CASE("decoder lm: configurations that do not fit together are refused, naming why") {
  DecoderLmConfig c{.vocab = 7, .context = 5, .d_model = 6, .n_heads = 4, .n_layers = 1};
  CHECK_THROWS_WITH_AS(DecoderLm<float>{c}, doctest::Contains("not divisible"), ValueError);
  c.n_heads = 2;
  c.positions = PositionEncoding::onehot;
  CHECK_THROWS_WITH_AS(DecoderLm<float>::check_config(c), doctest::Contains("one-hot positions"), ValueError);
  c.positions = PositionEncoding::learned;
  c.vocab = 0;
  CHECK_THROWS_WITH_AS(DecoderLm<float>::check_config(c), doctest::Contains("vocab"), ValueError);
}

TEST_CASE("decoder lm: cached logits equal a full recompute, float64, both modes, tied or not, any positions") {
  for (const AttentionMode mode : {AttentionMode::learnable, AttentionMode::parameter_free})
    for (const PositionEncoding positions : {PositionEncoding::learned, PositionEncoding::sinusoidal, PositionEncoding::none})
      for (const bool tie : {false, true}) {
        CAPTURE(to_string(mode));
        CAPTURE(to_string(positions));
        CAPTURE(tie);
        DecoderLm<double> model({.vocab = 9, .context = 7, .d_model = 8, .n_heads = 2, .n_layers = 2, .attention = mode,
                                 .positions = positions, .tie = tie, .seed = 11});
        model.eval();
        CHECK(cached_against_recomputed(model, {3, 1, 4, 1, 5, 2, 6}) <= 1e-12);
      }
}

TEST_CASE("decoder lm: sample() reads it in evaluation mode, the same text with and without the cache, and restores the mode") {
  DecoderLm<double> model({.vocab = 9, .context = 6, .d_model = 8, .n_heads = 2, .n_layers = 2, .dropout = 0.5, .seed = 2});
  CHECK(model.training());
  const std::vector<std::int32_t> prompt = {1, 2};
  const auto cached = sample(model, prompt, {.count = 20, .seed = 7, .cache = true});
  CHECK(model.training());  // restored
  CHECK(cached.size() == 20);
  // With dropout 0.5 in training mode the two paths would draw other masks; in evaluation mode they agree.
  CHECK(cached == sample(model, prompt, {.count = 20, .seed = 7, .cache = false}));
  CHECK_THROWS_AS(sample(model, {}, {.count = 1}), ValueError);
  CHECK(model.training());  // restored when sampling throws too
}

TEST_CASE("decoder lm: sample() gives each module back its own mode: a stack put in eval mode stays there") {
  DecoderLm<double> model({.vocab = 9, .context = 6, .d_model = 8, .n_heads = 2, .n_layers = 2, .dropout = 0.5, .seed = 2});
  model.stack().eval();  // dropout off in the blocks, the rest of the model training
  (void)sample(model, std::vector<std::int32_t>{1, 2}, {.count = 5, .seed = 7});
  CHECK(model.training());
  CHECK(model.embedding().training());
  CHECK_FALSE(model.stack().training());
  CHECK_FALSE(model.stack().block(1).training());
}

TEST_CASE("decoder lm: a checkpoint rebuilds it by its kind, with its settings and weights") {
  DecoderLm<float> model({.vocab = 11, .context = 8, .d_model = 8, .n_heads = 2, .n_layers = 1,
                          .attention = AttentionMode::parameter_free, .tie = true, .head_bias = false,
                          .init = LmInit::gpt2, .seed = 5});
  const Checkpoint c = snapshot<float>(model);
  CHECK(c.model.kind == "decoder_lm");
  const auto rebuilt = model_from_checkpoint<DecoderLm<float>>(c);
  CHECK(rebuilt->lm_config().init == LmInit::gpt2);
  CHECK(rebuilt->lm_config().tie);
  const auto a = model.parameters(), b = rebuilt->parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i]->name == b[i]->name);
    CHECK(a[i]->value == b[i]->value);
  }
  // A model of another seed draws other weights: the file's, not the seed's, are what the rebuild holds.
  DecoderLmConfig other = model.lm_config();
  other.seed = 6;
  CHECK(DecoderLm<float>(other).parameters()[0]->value != a[0]->value);
}

TEST_CASE("decoder lm: attention_maps are each head's softmax weights, causal, in evaluation mode, and leave the model as it was") {
  for (const AttentionMode mode : {AttentionMode::learnable, AttentionMode::parameter_free}) {
    CAPTURE(to_string(mode));
    DecoderLm<double> model({.vocab = 9, .context = 6, .d_model = 8, .n_heads = 2, .n_layers = 2, .attention = mode,
                             .dropout = 0.5, .seed = 3});
    const std::vector<std::int32_t> tokens = {1, 4, 2, 8};
    const auto maps = model.attention_maps(tokens);
    REQUIRE(maps.size() == 2);
    for (const auto& layer : maps) {
      REQUIRE(layer.size() == 2);
      for (const TensorD& head : layer) {
        REQUIRE(head.shape() == Shape::mat(4, 4));
        for (Index q = 0; q < 4; ++q) {
          double sum = 0;
          for (Index k = 0; k < 4; ++k) {
            if (k > q) CHECK(head.at(q, k) == 0);  // a query never reads a later key
            sum += head.at(q, k);
          }
          CHECK(sum == doctest::Approx(1).epsilon(1e-12));  // no dropout on the weights shown
        }
      }
    }
    // The same maps again: nothing drawn, no state left behind; the model still training, its layers not
    // keeping weights.
    const auto again = model.attention_maps(tokens);
    CHECK(again[1][1].span()[5] == maps[1][1].span()[5]);
    CHECK(model.training());
    CHECK_FALSE(model.stack().block(0).attention().keeps_weights());
    CHECK_THROWS_WITH_AS(model.attention_maps({}), "attention_maps: no tokens; give 1 to 6 (the context)", ValueError);
    CHECK_THROWS_AS(model.attention_maps(std::vector<std::int32_t>(7, 1)), ShapeError);  // past the context
    CHECK_THROWS_AS(model.attention_maps(std::vector<std::int32_t>{9}), ValueError);     // outside the vocabulary
    CHECK(model.training());
    CHECK_FALSE(model.stack().block(1).attention().keeps_weights());
  }
}
