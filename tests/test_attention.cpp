// autograd/ops_attention: the fused multi-head attention op against the composition it replaces
// (slice_cols, matmul_bt, softmax_rows, matmul, concat_cols), its masks, NaN handling, the weights it
// hands out, its errors, and its results on one and two threads. (Its gradient check is in the op
// catalogue, tests/catalogue/op_checks.cpp; a PyTorch golden in tests/data/golden_ops.txt.)
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/parallel.hpp"
#include "helpers.hpp"
#include "pin_crossover.hpp"

using namespace tapegrad;
using test::random_tensor;

namespace {

struct Config {
  const char* name;
  Index batch, tq, tk, heads, dk, dv;
  int mask;  // 0 none, 1 causal (Tq, Tk) shared, 2 per item (B, Tq, Tk) with a fully blocked row, 3 per item:
             // causal and key padding (item b's last 5 + 20 b keys blocked), 4 per item: causal, and item
             // 1's first 70 queries see no key
  bool one_input;  // q = k = v (parameter-free attention)
  double scale;
};

Mask make_mask(const Config& c) {
  if (c.mask == 1) {
    Mask m(Shape::mat(c.tq, c.tk));
    for (Index r = 0; r < c.tq; ++r)
      for (Index j = r + 1; j < c.tk; ++j) m.at(r, j) = 1;
    return m;
  }
  Mask m(Shape::batched(c.batch, c.tq, c.tk));
  for (Index b = 0; b < c.batch; ++b)
    for (Index r = 0; r < c.tq; ++r)
      for (Index j = 0; j < c.tk; ++j)
        m.at(b, r, j) = c.mask == 3   ? j > r || j >= c.tk - 5 - 20 * b
                        : c.mask == 4 ? j > r || (b == 1 && r < 70)
                                      : (j + b) % 3 == 0 || (b == 1 && r == 2);  // row 2 of item 1: all
  return m;
}

// softmax(s Q_h K_h^T) V_h per head from the primitive ops, heads side by side; the weights per head.
template <class T>
Var<T> composed(Var<T> q, Var<T> k, Var<T> v, const Config& c, const Mask* mask, std::vector<TensorT<T>>* weights) {
  std::vector<Var<T>> heads;
  for (Index h = 0; h < c.heads; ++h) {
    Var<T> scores = matmul_bt(slice_cols(q, h * c.dk, c.dk), slice_cols(k, h * c.dk, c.dk));
    Var<T> p = softmax_rows(scores, mask, c.scale);
    if (weights) weights->push_back(p.value());
    heads.push_back(matmul(p, slice_cols(v, h * c.dv, c.dv)));
  }
  return c.heads == 1 ? heads[0] : concat_cols(std::span<const Var<T>>(heads));
}

const std::vector<Config> kConfigs = {
    {"2 heads, no mask", 2, 8, 8, 2, 3, 4, 0, false, 0.5},
    {"odd sizes: 5 queries over 7 keys, 3 heads", 2, 5, 7, 3, 2, 3, 0, false, 1.0},
    {"cross: 4 queries over 12 keys, 3 heads", 2, 4, 12, 3, 2, 3, 0, false, 1.0},
    {"causal, 1 head", 3, 8, 8, 1, 4, 4, 1, false, 0.5},
    {"per-item mask with a fully blocked row, 2 heads", 2, 4, 8, 2, 3, 2, 2, false, 0.7},
    {"q = k = v, 4 heads, causal", 2, 6, 6, 4, 2, 2, 1, true, 0.7},
    {"long rows (vectorised softmax), 2 heads, causal", 2, 40, 40, 2, 8, 8, 1, false, 0.35},
    {"long rows, no mask, 32 queries over 40 keys", 2, 32, 40, 2, 8, 5, 0, false, 0.35},
    // Long masked rows that end early (causal, key padding): the softmax stops at each row's last open key.
    {"causal over three blocks of queries (the last short), 2 heads", 2, 144, 144, 2, 8, 8, 1, false, 0.35},
    {"causal and key padding over three blocks, 3 heads", 2, 144, 144, 3, 4, 8, 3, false, 0.35},
    {"q = k = v, causal and key padding over three blocks", 2, 144, 144, 2, 4, 4, 3, true, 0.35},
    {"an irregular per-item mask over 144 queries and 100 keys", 2, 144, 100, 2, 4, 4, 2, false, 0.35},
    // Masks that leave whole blocks of 64 products zero, which the op skips (ops_attention.cpp, block_reach):
    // a block of queries that sees no key, and key blocks that no query of a block sees.
    {"causal, item 1's first 70 queries see no key, 2 heads", 2, 144, 144, 2, 4, 4, 4, false, 0.35},
    {"q = k = v, causal, item 1's first 70 queries see no key", 2, 144, 144, 2, 4, 4, 4, true, 0.35},
    {"causal over 200 queries and keys, 4 heads of 16", 1, 200, 200, 4, 16, 16, 1, false, 0.25},
};

}  // namespace

TEST_CASE("attention: equals the composition of slices, products, softmax_rows and concat_cols, values and gradients") {
  Rng rng(41);
  for (const Config& c : kConfigs) {
    CAPTURE(std::string(c.name));
    const Mask mask = c.mask ? make_mask(c) : Mask();
    const Mask* m = c.mask ? &mask : nullptr;
    const TensorD q0 = random_tensor(Shape::batched(c.batch, c.tq, c.heads * c.dk), rng);
    const TensorD k0 = random_tensor(Shape::batched(c.batch, c.tk, c.heads * c.dk), rng);
    const TensorD v0 = random_tensor(Shape::batched(c.batch, c.tk, c.heads * c.dv), rng);
    const TensorD seed = random_tensor(Shape::batched(c.batch, c.tq, c.heads * c.dv), rng);
    Tape<double> t1, t2;
    Var<double> q1 = t1.input(q0), k1 = c.one_input ? q1 : t1.input(k0), v1 = c.one_input ? q1 : t1.input(v0);
    Var<double> q2 = t2.input(q0), k2 = c.one_input ? q2 : t2.input(k0), v2 = c.one_input ? q2 : t2.input(v0);
    std::vector<TensorD> fused_weights(static_cast<std::size_t>(c.heads)), composed_weights;
    Var<double> fused = attention(q1, k1, v1, c.heads, m, c.scale, std::span<TensorD>(fused_weights));
    Var<double> reference = composed(q2, k2, v2, c, m, &composed_weights);
    CHECK_TENSOR_NEAR(fused.value(), reference.value(), 1e-15, 1e-13);
    for (std::size_t h = 0; h < fused_weights.size(); ++h) CHECK_TENSOR_NEAR(fused_weights[h], composed_weights[h], 1e-16, 1e-14);
    t1.backward(fused, seed);
    t2.backward(reference, seed);
    CHECK_TENSOR_NEAR(q1.grad(), q2.grad(), 1e-14, 1e-12);
    if (!c.one_input) {
      CHECK_TENSOR_NEAR(k1.grad(), k2.grad(), 1e-14, 1e-12);
      CHECK_TENSOR_NEAR(v1.grad(), v2.grad(), 1e-14, 1e-12);
    }
  }
}

TEST_CASE("attention: in float, the values are bit for bit the composition's, and the input gradients too") {
  // Each head's products are the same products, read in place instead of from copies, and the softmax is
  // the same code (autograd/kernels.hpp). Its vectorised exp is exact to the bit only where its
  // packets fall on the same elements: where a block of Tq x Tk weights is a whole number of 64-byte
  // lines, as batch item b's block sits at b Tq Tk in softmax_rows' input and on a line boundary here.
  // Other sizes differ in the last bits (the float64 test above covers them). With q, k and v apart each
  // gradient element has one part, so no order of additions differs. With either kind of kernel.
  test::with_each_kernel([] {
    Rng rng(42);
    for (const Config& c : kConfigs) {
      if (c.one_input || c.tq * c.tk % 16 != 0) continue;
      CAPTURE(std::string(c.name));
      const Mask mask = c.mask ? make_mask(c) : Mask();
      const Mask* m = c.mask ? &mask : nullptr;
      const Tensor q0 = random_tensor<float>(Shape::batched(c.batch, c.tq, c.heads * c.dk), rng);
      const Tensor k0 = random_tensor<float>(Shape::batched(c.batch, c.tk, c.heads * c.dk), rng);
      const Tensor v0 = random_tensor<float>(Shape::batched(c.batch, c.tk, c.heads * c.dv), rng);
      const Tensor seed = random_tensor<float>(Shape::batched(c.batch, c.tq, c.heads * c.dv), rng);
      Tape<float> t1, t2;
      Var<float> q1 = t1.input(q0), k1 = t1.input(k0), v1 = t1.input(v0);
      Var<float> q2 = t2.input(q0), k2 = t2.input(k0), v2 = t2.input(v0);
      Var<float> fused = attention(q1, k1, v1, c.heads, m, c.scale);
      Var<float> reference = composed<float>(q2, k2, v2, c, m, nullptr);
      CHECK(fused.value() == reference.value());
      t1.backward(fused, seed);
      t2.backward(reference, seed);
      CHECK(q1.grad() == q2.grad());
      CHECK(k1.grad() == k2.grad());
      CHECK(v1.grad() == v2.grad());
    }
  });
}

TEST_CASE("attention: the values are the same bits whether the op is recorded for backward or not") {
  // Recorded, each block of weights is kept for backward; not recorded (evaluation), it is computed in
  // scratch. Both sit on a 64-byte line (see ops_attention.cpp), so an odd block size changes nothing.
  Rng rng(45);
  for (const Config& c : kConfigs) {
    CAPTURE(std::string(c.name));
    const Mask mask = c.mask ? make_mask(c) : Mask();
    const Tensor q = random_tensor<float>(Shape::batched(c.batch, c.tq, c.heads * c.dk), rng);
    const Tensor k = random_tensor<float>(Shape::batched(c.batch, c.tk, c.heads * c.dk), rng);
    const Tensor v = random_tensor<float>(Shape::batched(c.batch, c.tk, c.heads * c.dv), rng);
    Tape<float> recorded, evaluation;
    const Tensor trained = attention(recorded.input(q), recorded.input(k), recorded.input(v), c.heads, c.mask ? &mask : nullptr, c.scale).value();
    NoGradGuard<float> no_grad(evaluation);
    const Tensor evaluated = attention(evaluation.input(q), evaluation.input(k), evaluation.input(v), c.heads, c.mask ? &mask : nullptr, c.scale).value();
    CHECK(trained == evaluated);
  }
}

TEST_CASE("attention: a query that sees no key gets a zero output and no gradient, and a NaN is not hidden") {
  const Config c{"blocked row", 2, 5, 6, 2, 3, 2, 2, false, 0.7};
  const Mask mask = make_mask(c);
  Rng rng(43);
  Tape<double> t;
  Var<double> q = t.input(random_tensor(Shape::batched(2, 5, 6), rng)), k = t.input(random_tensor(Shape::batched(2, 6, 6), rng));
  Var<double> v = t.input(random_tensor(Shape::batched(2, 6, 4), rng));
  Var<double> out = attention(q, k, v, 2, &mask, 0.7);
  CHECK(out.value().mat(1).row(2).isZero(0.0));  // item 1, query 2: every key blocked
  t.backward(sum(mul(out, out)));
  CHECK(q.grad().mat(1).row(2).isZero(0.0));
  CHECK(all_finite(q.grad()));
  CHECK(all_finite(k.grad()));

  // A NaN in one key's row makes the outputs of every query that sees it NaN, and only those.
  TensorD k_nan = random_tensor(Shape::batched(1, 4, 2), rng);
  k_nan.at(0, 2, 0) = std::numeric_limits<double>::quiet_NaN();
  Mask causal(Shape::mat(4, 4));
  for (Index r = 0; r < 4; ++r)
    for (Index j = r + 1; j < 4; ++j) causal.at(r, j) = 1;
  Tape<double> t2;
  const TensorD& y = attention(t2.constant(random_tensor(Shape::batched(1, 4, 2), rng)), t2.constant(k_nan),
                               t2.constant(random_tensor(Shape::batched(1, 4, 2), rng)), 1, &causal)
                         .value();
  CHECK(y.mat(0).topRows(2).allFinite());  // queries 0 and 1 see keys 0 and 1
  CHECK(y.mat(0).bottomRows(2).array().isNaN().all());  // queries 2 and 3 see key 2
}

TEST_CASE("attention: no keys gives zero outputs and no queries an empty one, forward and backward") {
  Rng rng(46);
  Tape<double> t;
  Var<double> q = t.input(random_tensor(Shape::batched(2, 3, 4), rng)), none_k = t.input(TensorD(Shape::batched(2, 0, 4)));
  Var<double> none_v = t.input(TensorD(Shape::batched(2, 0, 6)));
  Var<double> out = attention(q, none_k, none_v, 2);
  CHECK(out.shape() == Shape::batched(2, 3, 6));
  CHECK(out.value().array().isZero(0.0));
  t.backward(sum(out));
  CHECK(q.grad().array().isZero(0.0));
  Var<double> no_q = t.input(TensorD(Shape::batched(2, 0, 4)));
  Var<double> k = t.input(random_tensor(Shape::batched(2, 5, 4), rng)), v = t.input(random_tensor(Shape::batched(2, 5, 6), rng));
  CHECK(attention(no_q, k, v, 2).shape() == Shape::batched(2, 0, 6));
}

TEST_CASE("attention and softmax_rows with a mask over empty shapes: no batch item, no query, no key") {
  // The mask's rows are read before any block is computed: with nothing to read they must read nothing.
  Rng rng(48);
  Tape<double> t;
  for (const Index batch : {0, 2})
    for (const Index tq : {0, 3})
      for (const Index tk : {0, 4}) {
        CAPTURE(batch);
        CAPTURE(tq);
        CAPTURE(tk);
        const Mask shared(Shape::mat(tq, tk), 1), per_item(Shape::batched(batch, tq, tk), 1);  // all blocked
        Var<double> q = t.input(random_tensor(Shape::batched(batch, tq, 4), rng));
        Var<double> k = t.input(random_tensor(Shape::batched(batch, tk, 4), rng));
        Var<double> v = t.input(random_tensor(Shape::batched(batch, tk, 2), rng));
        for (const Mask* mask : {&shared, &per_item}) {
          Var<double> out = attention(q, k, v, 2, mask);
          CHECK(out.shape() == Shape::batched(batch, tq, 2));
          CHECK(out.value().array().isZero(0.0));  // every key blocked, or none to attend to
          const Var<double> scores = t.input(random_tensor(Shape::batched(batch, tq, tk), rng));
          CHECK(softmax_rows(scores, mask).shape() == Shape::batched(batch, tq, tk));
        }
      }
}

TEST_CASE("attention: errors name the shapes and leave the tape as it was") {
  Tape<double> t;
  Var<double> q = t.constant(TensorD(Shape::batched(2, 4, 6))), k = t.constant(TensorD(Shape::batched(2, 5, 6)));
  Var<double> v = t.constant(TensorD(Shape::batched(2, 5, 4))), v_short = t.constant(TensorD(Shape::batched(2, 3, 4)));
  Var<double> flat = t.constant(TensorD(Shape::mat(4, 6))), other_batch = t.constant(TensorD(Shape::batched(3, 5, 6)));
  const std::size_t before = t.size();
  CHECK_THROWS_WITH_AS(attention(q, k, v_short, 2), "attention: k is 2x5x6 but v is 2x3x4; keys and values must have the same tokens",
                       ShapeError);
  CHECK_THROWS_WITH_AS(attention(q, k, v, 4),
                       "attention: q is 2x4x6, k is 2x5x6 and v is 2x5x4 for 4 heads; q and k must have the same width, and "
                       "q's and v's widths must be multiples of the heads",
                       ShapeError);
  CHECK_THROWS_WITH_AS(attention(flat, k, v, 2),
                       "attention: q is 4x6, k is 2x5x6 and v is 2x5x4; they must all be (batch, tokens, width) or all "
                       "(tokens, width), with one batch size",
                       ShapeError);
  CHECK_THROWS_AS(attention(q, other_batch, v, 2), ShapeError);
  CHECK_THROWS_WITH_AS(attention(q, k, v, 0), "attention: heads must be >= 1, got 0", ValueError);
  const Mask wrong(Shape::mat(4, 4));
  CHECK_THROWS_WITH_AS(attention(q, k, v, 2, &wrong),
                       "attention: the mask is 4x4 but q is 2x4x6 and k is 2x5x6; it must be 4x5 (shared by the batch) or 2x4x5",
                       ShapeError);
  CHECK_THROWS_WITH_AS(attention(q, k, v, 2, nullptr, 0.0), "attention: the scale must be positive and finite, got 0",
                       ValueError);
  std::vector<TensorD> three(3);
  CHECK_THROWS_WITH_AS(attention(q, k, v, 2, nullptr, 1.0, std::span<TensorD>(three)),
                       "attention: 3 tensors given for the weights of 2 heads", ValueError);
  CHECK(t.size() == before);
}

TEST_CASE("attention: values and gradients are bit-identical on one and two threads, split at every size") {
  const test::RestoreThreads restore;
  const test::PinCrossover always(0, 0);
  Rng rng(44);
  for (const Index batch : {1, 3}) {  // one item: its products and softmax split; several: items split
    CAPTURE(batch);
    const Mask causal = make_mask({"", batch, 70, 70, 1, 1, 1, 1, false, 1});
    const Tensor q0 = random_tensor<float>(Shape::batched(batch, 70, 24), rng);
    const Tensor seed = random_tensor<float>(Shape::batched(batch, 70, 24), rng);
    auto run = [&](int threads) {
      set_num_threads(threads);
      Tape<float> t;
      Var<float> q = t.input(q0), k = scale(q, 0.5), v = tanh(q);
      Var<float> out = attention(q, k, v, 3, &causal, 0.4);
      t.backward(out, seed);
      return std::pair{out.value(), q.grad()};
    };
    const auto one = run(1), two = run(2);
    CHECK(one.first == two.first);
    CHECK(one.second == two.second);
  }
}
