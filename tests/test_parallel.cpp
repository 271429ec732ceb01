// core/parallel: thread settings, and the products that use them.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tapegrad/autograd/kernels.hpp"
#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/gemm.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/cpu.hpp"
#include "tapegrad/core/parallel.hpp"
#include "tapegrad/train/optimizer.hpp"
#include "helpers.hpp"
#include "pin_crossover.hpp"

using namespace tapegrad;

namespace {

using test::PinCrossover;
using test::RestoreKernels;
using test::RestoreThreads;

// a (m x k) times b (k x n) through the tape, and the gradient of sum(a b) with respect to a.
std::pair<TensorT<double>, TensorT<double>> product_and_grad(const TensorT<double>& a, const TensorT<double>& b) {
  Tape<double> tape;
  Parameter<double> pa("a", a);
  Var<double> c = matmul(tape.param(pa), tape.constant(b));
  tape.backward(sum(c));
  return {c.value(), pa.grad};
}

}  // namespace

TEST_CASE("parallel: set_num_threads refuses fewer than one thread") {
  CHECK_THROWS_WITH_AS(set_num_threads(0), "set_num_threads: needs at least 1 thread, got 0", ValueError);
}

TEST_CASE("parallel: SingleThreaded keeps the calling thread's regions on one thread, then restores the count") {
  if (!have_openmp()) {
    CHECK(num_threads() == 1);
    return;
  }
  RestoreThreads restore;
  set_num_threads(2);
  {
    const SingleThreaded one;
    CHECK(num_threads() == 1);
  }
  CHECK(num_threads() == 2);
  {
    const SingleThreaded not_now(false);
    CHECK(num_threads() == 2);
  }
}

TEST_CASE("parallel: products small and large give the same values and gradients on 1 and 2 threads") {
  RestoreThreads restore;
  Rng rng(17);
  // 32 x 32 x 32 runs on one thread whatever the setting; 512 x 128 x 128 (2^23 multiply-adds) is
  // split over the threads when there are several.
  for (const auto& mkn : {std::array<Index, 3>{32, 32, 32}, std::array<Index, 3>{512, 128, 128}}) {
    const Index m = mkn[0], k = mkn[1], n = mkn[2];  // not a structured binding: clang 14 cannot CAPTURE one
    CAPTURE(m);
    const auto a = test::random_tensor(Shape::mat(m, k), rng), b = test::random_tensor(Shape::mat(k, n), rng);
    set_num_threads(1);
    const auto [c1, g1] = product_and_grad(a, b);
    set_num_threads(2);
    const auto [c2, g2] = product_and_grad(a, b);
    CHECK_TENSOR_NEAR(c2, c1, 1e-12, 1e-12);
    CHECK_TENSOR_NEAR(g2, g1, 1e-12, 1e-12);
    // and both against a plain triple loop, element by element
    double worst = 0;
    for (Index i = 0; i < m; ++i)
      for (Index j = 0; j < n; ++j) {
        double s = 0;
        for (Index p = 0; p < k; ++p) s += a.at(i, p) * b.at(p, j);
        worst = std::max(worst, std::abs(c2.at(i, j) - s));
      }
    CHECK(worst < 1e-11);
  }
}

namespace {


// Values and input gradients of a small attention-like graph in float: a 2-D product, a shared-weight
// product, batched a b^T and a b, a^T b, and softmax with and without a mask, reduced by random
// projections so every gradient element matters.
std::vector<Tensor> attention_like(int threads) {
  set_num_threads(threads);
  Rng rng(5);
  const Index B = 4, T = 95, D = 64, V = 27;  // 27 classes, 95 rows: halves that are no whole number of packets
  Parameter<float> x("x", test::random_tensor<float>(Shape::batched(B, T, D), rng));
  Parameter<float> w("w", test::random_tensor<float>(Shape::mat(D, D), rng));
  Parameter<float> m("m", test::random_tensor<float>(Shape::mat(T * B, D), rng));
  Parameter<float> pos("pos", test::random_tensor<float>(Shape::mat(T, D), rng));
  Parameter<float> head("head", test::random_tensor<float>(Shape::mat(D + 1, V), rng, 0.1));
  Parameter<float> bias("bias", test::random_tensor<float>(Shape::vec(V), rng));
  Parameter<float> gain("gain", test::random_tensor<float>(Shape::vec(D), rng));
  Parameter<float> shift("shift", test::random_tensor<float>(Shape::vec(D), rng));
  Mask causal(Shape::mat(T, T));
  for (Index i = 0; i < T; ++i)
    for (Index j = 0; j < T; ++j) causal.at(i, j) = j > i;
  Ids targets(Shape::vec(B * T));
  for (Index i = 0; i < targets.numel(); ++i) targets[i] = static_cast<std::int32_t>(rng.below(V));
  std::vector<Parameter<float>*> params = {&x, &w, &m, &pos, &head, &bias, &gain, &shift};
  AdamW<float> adamw({&x, &w, &m}, {.lr = 0.01, .weight_decay = 0.1});
  SGD<float> sgd({&pos, &head, &bias, &gain, &shift}, {.lr = 0.1, .momentum = 0.9});
  Tensor last;
  for (int step = 0; step < 3; ++step) {
    adamw.zero_grad();
    sgd.zero_grad();
    Tape<float> tape;
    Var<float> xv = add(tape.param(x), tape.param(pos));               // (B, T, D) + (T, D): batch broadcast
    Var<float> q = matmul(xv, tape.param(w));                          // (B, T, D) x (D, D): shared weight
    Var<float> s = matmul_bt(q, xv);                                   // (B, T, T)
    Var<float> a1 = softmax_rows(s, &causal, 0.125);                   // masked rows
    Var<float> a2 = softmax_rows(s, nullptr, 0.125);                   // open rows
    Var<float> o = matmul(add(a1, a2), xv);                            // (B, T, D)
    Var<float> g = matmul_at(tape.param(m), tape.param(m));            // (D, D): a^T b over B*T rows
    Var<float> h0 = matmul(reshape(o, Shape::mat(B * T, D)), g);       // (B*T, D) x (D, D)
    Var<float> h = layer_norm(gelu(h0), tape.param(gain), tape.param(shift));
    Var<float> parts[] = {slice_cols(h, 0, 21), slice_cols(h, 21, D - 21), row_mean(h)};
    Var<float> c = concat_cols(std::span<const Var<float>>(parts));    // (B*T, D + 1)
    Var<float> r = div(mul(c, row_max(c)), add(row_sum(c), tape.constant(Tensor(Shape::mat(B * T, 1), 1000.0f))));
    // The broadcast operand on the left: a column in mul, sub and div (over c^2 + 1), the bias row in add.
    Var<float> u = mul(div(row_mean(c), add(mul(c, c), tape.constant(Tensor(Shape::mat(B * T, D + 1), 1.0f)))),
                       sub(row_max(c), c));
    Var<float> logits = add(tape.param(bias), matmul(sub(add(r, mul(row_mean(c), u)), c), tape.param(head)));
    Var<float> loss = cross_entropy(logits, targets);
    tape.backward(loss);
    adamw.step();
    sgd.step();
    last = loss.value();
  }
  std::vector<Tensor> out = {last};
  for (auto* p : params) {
    out.push_back(p->value);
    out.push_back(p->grad);
  }
  return out;
}

}  // namespace

TEST_CASE("parallel: split products, softmax, elementwise ops, layer norm, losses and updates are bit-identical to one thread") {
  RestoreThreads restore;
  const auto one = attention_like(1);
  for (const double min : {0.0, 1e5, 1e300}) {  // split everything; the measured kind of value; nothing
    const PinCrossover pin(min, min);
    CAPTURE(min);
    if (have_openmp()) {
      set_num_threads(2);
      CHECK((threads_for_product(1e6) > 1) == (min <= 1e6));
      CHECK((threads_for_elements(1e6) > 1) == (min <= 1e6));
    }
    const auto two = attention_like(2);
    REQUIRE(two.size() == one.size());
    for (std::size_t i = 0; i < one.size(); ++i) {
      CAPTURE(i);
      CHECK(two[i] == one[i]);
    }
  }
}

TEST_CASE("parallel: the unary ops split over the threads give one thread's values and gradients, bit for bit") {
  // Every unary op runs in element ranges over the threads (ops_elementwise.cpp): vectorised exp, tanh, erf
  // and their scalar tails must fall on the elements a pass over the whole tensor gives them.
  RestoreThreads restore;
  const PinCrossover pin(0, 0);  // split every pass there are threads for
  auto run = [](int threads) {
    set_num_threads(threads);
    Rng rng(11);
    const Tensor x0 = test::random_tensor<float>(Shape::mat(37, 29), rng, 3.0);  // 1073: no whole packets a half
    const Tensor r0 = test::random_tensor<float>(Shape::mat(37, 29), rng);
    Tape<float> tape;
    const Var<float> x = tape.input(x0);
    const Var<float> y = relu(x) + tanh(x) + exp(x) + sigmoid(x) + silu(x) + gelu(x) + log(sqrt(x * x + 1.0));
    tape.backward(sum(y * tape.constant(r0)));
    return std::vector<Tensor>{y.value(), tape.grad(x)};
  };
  const auto one = run(1), two = run(2);
  CHECK(two[0] == one[0]);
  CHECK(two[1] == one[1]);
}

TEST_CASE("parallel: parallel_for covers every index once, in pieces, and a negative crossover is refused") {
  RestoreThreads restore;
  set_num_threads(2);
  for (const Index n : {Index{0}, Index{1}, Index{2}, Index{7}, Index{1000}}) {
    std::vector<int> seen(static_cast<std::size_t>(n), 0);
    parallel_for(n, 2, [&](Index first, Index last) {
      for (Index i = first; i < last; ++i) ++seen[static_cast<std::size_t>(i)];
    });
    CAPTURE(n);
    CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  }
  ParallelCrossover bad = parallel_crossover();
  bad.min_macs = -1;
  const std::string expected =
      fmt::format("set_parallel_crossover: the minimums must be >= 0, got -1 multiply-adds and {} elements", bad.min_elements);
  CHECK_THROWS_WITH_AS(set_parallel_crossover(bad), expected.c_str(), ValueError);
  bad = parallel_crossover();
  bad.min_elements = std::nan("");
  CHECK_THROWS_AS(set_parallel_crossover(bad), ValueError);
}

TEST_CASE("parallel: split products of many shapes and all three forms are bit-identical to one thread") {
  // With either kind of kernel (autograd/gemm.hpp): a split starts on one of its block or panel boundaries.
  RestoreThreads restore;
  const PinCrossover pin(0, 0);  // split every product there are threads for
  test::with_each_kernel([] {
    Rng rng(11);
    for (int trial = 0; trial < 60; ++trial) {
      const Index m = 2 + static_cast<Index>(rng.below(300)), n = 2 + static_cast<Index>(rng.below(300)),
                  k = 1 + static_cast<Index>(rng.below(600));
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(k);
      const Tensor a = test::random_tensor<float>(Shape::mat(m, k), rng), at = test::random_tensor<float>(Shape::mat(k, m), rng);
      const Tensor b = test::random_tensor<float>(Shape::mat(k, n), rng), bt = test::random_tensor<float>(Shape::mat(n, k), rng);
      auto products = [&](int threads) {
        set_num_threads(threads);
        Tape<float> tape;
        NoGradGuard<float> no_grad(tape);
        return std::vector<Tensor>{matmul(tape.constant(a), tape.constant(b)).value(),
                                   matmul_at(tape.constant(at), tape.constant(b)).value(),
                                   matmul_bt(tape.constant(a), tape.constant(bt)).value()};
      };
      const auto one = products(1), two = products(2);
      for (std::size_t i = 0; i < one.size(); ++i) {
        CAPTURE(i);
        CHECK(two[i] == one[i]);
      }
    }
  });
}

TEST_CASE("parallel: a product of few row blocks splits into tiles of columns, bit-identical to one thread with a bias or added into C") {
  // libxsmm's grid (autograd/gemm.cpp): with fewer than two row blocks of 64 a thread, a split product's rows
  // are cut into groups of column blocks too, so a weight's gradient (d_in rows) keeps many threads busy.
  if (!detail::have_libxsmm()) return;
  const RestoreKernels kernels;
  detail::set_gemm_kernels(detail::GemmKernels::libxsmm);
  RestoreThreads restore;
  const PinCrossover pin(0, 0);
  Rng rng(41);
  using detail::ProductForm;
  for (const ProductForm form : {ProductForm::ab, ProductForm::atb, ProductForm::abt})
    for (const Index m : {40, 64, 130, 256, 300})
      for (const Index n : {64, 200, 700})
        for (const Index k : {33, 300}) {
          CAPTURE(static_cast<int>(form));
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(k);
          const Index a_cols = form == ProductForm::atb ? m : k, b_cols = form == ProductForm::abt ? k : n;
          const Tensor a = test::random_tensor<float>(form == ProductForm::atb ? Shape::mat(k, m) : Shape::mat(m, k), rng);
          const Tensor b = test::random_tensor<float>(form == ProductForm::abt ? Shape::mat(n, k) : Shape::mat(k, n), rng);
          const Tensor bias = test::random_tensor<float>(Shape::vec(n), rng), c0 = test::random_tensor<float>(Shape::mat(m, n), rng);
          const Tensor other = test::random_tensor<float>(b.shape(), rng);
          auto run = [&](int threads, bool accumulate) {
            // First a product of another b on one thread: it leaves its own op(B) panels in the scratch, so a
            // split that skipped copying a panel would read those, not a leftover copy of this b's.
            set_num_threads(1);
            Tensor scrub(Shape::mat(m, n));
            detail::gemm<float>(form, m, n, k, {a.data(), a_cols}, {other.data(), b_cols}, scrub.data(), n, false);
            set_num_threads(threads);
            Tensor c = accumulate ? c0 : Tensor(Shape::mat(m, n));
            detail::gemm<float>(form, m, n, k, {a.data(), a_cols}, {b.data(), b_cols}, c.data(), n, accumulate, true,
                                accumulate ? nullptr : bias.data());
            return c;
          };
          for (const bool accumulate : {false, true}) {
            CAPTURE(accumulate);
            const Tensor one = run(1, accumulate);
            for (const int threads : {2, 3, 8, 16}) {
              CAPTURE(threads);
              CHECK(run(threads, accumulate).flat() == one.flat());
            }
          }
        }
  // One row block of 700 columns on 8 threads: split (by columns), where a split of rows alone could not.
  set_num_threads(8);
  const Tensor a = test::random_tensor<float>(Shape::mat(64, 300), rng), b = test::random_tensor<float>(Shape::mat(300, 700), rng);
  Tensor c(Shape::mat(64, 700));
  const std::uint64_t regions = parallel_regions_started();
  detail::gemm<float>(ProductForm::ab, 64, 700, 300, {a.data(), 300}, {b.data(), 700}, c.data(), 700, false);
  CHECK(parallel_regions_started() == regions + (have_openmp() ? 1 : 0));  // none without OpenMP's threads
}

TEST_CASE("parallel: affine is add(matmul(x, w), b) bit for bit, values and gradients, with either kernel, on 1 and 2 threads") {
  // The bias is added inside the product, to each block of rows as it completes (autograd/gemm.hpp):
  // shapes below, on and across libxsmm's 64-row blocks and its packing at 256 rows, with an empty depth.
  RestoreThreads restore;
  const PinCrossover pin(0, 0);  // split every product there are threads for
  struct Case {
    Shape x, w, b;
  };
  const std::vector<Case> cases = {
      {Shape::mat(5, 3), Shape::mat(3, 4), Shape::vec(4)},
      {Shape::batched(2, 150, 70), Shape::mat(70, 130), Shape::mat(1, 130)},
      {Shape::mat(300, 257), Shape::mat(257, 65), Shape::vec(65)},
      {Shape::batched(4, 64, 33), Shape::mat(33, 64), Shape::vec(64)},
      {Shape::mat(7, 0), Shape::mat(0, 5), Shape::vec(5)},
  };
  test::with_each_kernel([&] {
    Rng rng(5);
    for (const auto& c : cases) {
      CAPTURE(c.x);
      CAPTURE(c.w);
      const Tensor x0 = test::random_tensor<float>(c.x, rng), w0 = test::random_tensor<float>(c.w, rng),
                   b0 = test::random_tensor<float>(c.b, rng);
      Shape ys = c.x;
      ys.cols = c.w.cols;
      const Tensor r = test::random_tensor<float>(ys, rng);  // a random projection to a scalar loss
      auto run = [&](bool fused, int threads) {
        set_num_threads(threads);
        Tape<float> tape;
        Parameter<float> x("x", x0), w("w", w0), b("b", b0);
        Var<float> y = fused ? affine(tape.param(x), tape.param(w), tape.param(b))
                             : add(matmul(tape.param(x), tape.param(w)), tape.param(b));
        tape.backward(sum(mul(y, tape.constant(r))));
        return std::vector<Tensor>{y.value(), x.grad, w.grad, b.grad};
      };
      const auto reference = run(false, 1);
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        const auto fused = run(true, threads);
        for (std::size_t i = 0; i < reference.size(); ++i) {
          CAPTURE(i);
          CHECK(fused[i] == reference[i]);
        }
      }
    }
  });
}

// ---- the CPU a build is for (core/cpu.hpp) ----------------------------------------------------------

namespace {
const char* g_cpu_lacks = nullptr;  // the one feature the fake CPU below lacks
bool cpu_lacking_one(const char* feature) { return g_cpu_lacks == nullptr || std::string_view(feature) != g_cpu_lacks; }
bool cpu_of_sse2_only(const char*) { return false; }
}  // namespace

TEST_CASE("cpu: each level's features are checked, and only its own") {
  g_cpu_lacks = nullptr;
  CHECK(missing_cpu_features("x86-64-v3", cpu_lacking_one).empty());
  g_cpu_lacks = "fma";
  CHECK(missing_cpu_features("x86-64-v3", cpu_lacking_one) == "fma");
  CHECK(missing_cpu_features("x86-64-v4", cpu_lacking_one) == "fma");
  CHECK(missing_cpu_features("x86-64-v2", cpu_lacking_one).empty());  // v2 needs no FMA
  g_cpu_lacks = "avx512f";
  CHECK(missing_cpu_features("x86-64-v3", cpu_lacking_one).empty());
  CHECK(missing_cpu_features("x86-64-v4", cpu_lacking_one) == "avx512f");
  // A bare SSE2 CPU: everything above x86-64, named in order; the baseline and native have nothing to check.
  CHECK(missing_cpu_features("x86-64-v3", cpu_of_sse2_only) == "sse3, ssse3, sse4.1, sse4.2, popcnt, avx, avx2, fma, bmi, bmi2");
  CHECK(missing_cpu_features("x86-64", cpu_of_sse2_only).empty());
  CHECK(missing_cpu_features("native", cpu_of_sse2_only).empty());
  // The suite runs, so the CPU under it has what this build needs.
  CHECK(missing_cpu_features().empty());
}

TEST_CASE("parallel: a small model's products and passes stay on one thread by default, larger ones split") {
  // A split moves its operands and results between cores' caches: on 2 threads W2's step (512 x 64
  // activations) was slower than on 1 while its products and its residual add's gradients split (issue 56).
  if (!have_openmp()) return;
  RestoreThreads restore;
  const PinCrossover defaults(kMinMacs, kMinElements);
  set_num_threads(2);
  CHECK(threads_for_product(512.0 * 64 * 64) == 1);     // W2's projections and their gradients
  CHECK(threads_for_product(2 * 64 * 32.0 * 32 * 32) == 1);  // W2's attention backward: 64 items of 32 x 32
  CHECK(threads_for_elements(2 * 512.0 * 64) == 1);     // W2's residual add backward: both gradients
  CHECK(threads_for_elements(4 * 512.0 * 32) == 1);     // W2's cross-entropy: 4 operations an element
  CHECK(threads_for_product(1024.0 * 128 * 128) == 2);  // W3's projections
  CHECK(threads_for_elements(4096.0 * 512) == 2);       // W6's activations
}

TEST_CASE("parallel: each piece of work gets the threads its size is worth, and parallel_for runs on that many") {
  // Two threads at the crossover, one more for each further half of it, never more than there are.
  RestoreThreads restore;
  const PinCrossover pin(1000, 400);
  set_num_threads(8);  // a count, not cores: OpenMP starts 8 threads on any machine
  if (!have_openmp()) {
    CHECK(threads_for_product(1e9) == 1);
    return;
  }
  CHECK(threads_for_product(0) == 1);
  CHECK(threads_for_product(999) == 1);
  CHECK(threads_for_product(1000) == 2);
  CHECK(threads_for_product(1499) == 2);
  CHECK(threads_for_product(1500) == 3);
  CHECK(threads_for_product(3999) == 7);
  CHECK(threads_for_product(4000) == 8);
  CHECK(threads_for_product(1e12) == 8);
  CHECK(threads_for_elements(399) == 1);
  CHECK(threads_for_elements(600) == 3);
  CHECK(threads_for_elements(1e9) == 8);
  set_num_threads(3);
  CHECK(threads_for_product(1e12) == 3);
  set_num_threads(1);
  CHECK(threads_for_product(1e12) == 1);
  {
    const PinCrossover every(0, 0);  // 0: every thread for any work
    set_num_threads(5);
    CHECK(threads_for_product(1) == 5);
    CHECK(threads_for_elements(0) == 5);
  }

  // parallel_for runs pieces that cover [0, n) once and start on multiples of the grain, about four for
  // each thread it was given, fewer when there are fewer grains; never more threads than num_threads().
  set_num_threads(4);
  using Chunks = std::vector<std::pair<Index, Index>>;
  auto chunks = [](Index n, int threads, Index grain) {
    Chunks seen;
    seen.reserve(256);  // more pieces than asked, should there be
    std::mutex m;
    parallel_for(
        n, threads,
        [&](Index first, Index last) {
          const std::lock_guard<std::mutex> hold(m);
          seen.emplace_back(first, last);
        },
        grain);
    std::sort(seen.begin(), seen.end());
    return seen;
  };
  auto tiles = [](const Chunks& c, Index n, Index grain) {
    bool ok = !c.empty() && c.front().first == 0 && c.back().second == n;
    for (std::size_t i = 0; i < c.size(); ++i) {
      ok = ok && c[i].first < c[i].second && c[i].first % grain == 0;
      if (i + 1 < c.size()) ok = ok && c[i].second == c[i + 1].first;
    }
    return ok;
  };
  CHECK(chunks(100, 1, 1) == Chunks{{0, 100}});
  const Chunks three = chunks(100, 3, 1), four = chunks(100, 4, 1), eight = chunks(100, 8, 1);
  CHECK(tiles(three, 100, 1));
  CHECK(three.size() == 12);  // 12 pieces of 9 (the last one short)
  CHECK(tiles(four, 100, 1));
  CHECK(four.size() == 15);   // 16 wanted, 15 of 7 cover 100
  CHECK(eight == four);       // no more than num_threads()
  CHECK(chunks(100, 3, 40) == Chunks{{0, 40}, {40, 80}, {80, 100}});  // 3 grains of 40 (the last one short)
  CHECK(chunks(100, 4, 40).size() == 3);
  CHECK(chunks(1, 4, 1) == Chunks{{0, 1}});
  const Chunks grains = chunks(1000, 2, 16);
  CHECK(tiles(grains, 1000, 16));
  CHECK(grains.size() == 8);

  // Each split starts one counted region (bench/step_bench's regions_per_step); work on one thread none.
  const auto regions_for = [](Index n, int threads, Index grain) {
    const std::uint64_t before = parallel_regions_started();
    parallel_for(n, threads, [](Index, Index) {}, grain);
    return parallel_regions_started() - before;
  };
  CHECK(regions_for(100, 3, 1) == 1);
  CHECK(regions_for(100, 1, 1) == 0);   // one thread asked
  CHECK(regions_for(1, 4, 1) == 0);     // one index
  CHECK(regions_for(100, 4, 100) == 0);  // one grain
  set_num_threads(1);
  CHECK(regions_for(100, 4, 1) == 0);   // one thread there
}

TEST_CASE("parallel: work split inside a piece runs on that piece's thread, and the pool follows the thread count") {
  RestoreThreads restore;
  for (const int threads : {4, 2, 3, 2}) {  // the pool is resized each time
    set_num_threads(threads);
    CAPTURE(threads);
    std::atomic<int> inner_calls{0}, whole{0};
    const std::uint64_t before = parallel_regions_started();
    std::vector<int> seen(64 * 64, 0);
    parallel_for(Index{64}, threads, [&](Index first, Index last) {
      for (Index row = first; row < last; ++row)
        parallel_for(Index{64}, threads, [&](Index b, Index e) {
          ++inner_calls;
          if (b == 0 && e == 64) ++whole;
          for (Index i = b; i < e; ++i) ++seen[static_cast<std::size_t>(row * 64 + i)];
        });
    });
    // the outer split only (none without OpenMP's threads)
    CHECK(parallel_regions_started() - before == (have_openmp() ? 1u : 0u));
    CHECK(inner_calls == 64);
    CHECK(whole == 64);  // each inner loop ran in one call, on its thread
    CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  }
}

TEST_CASE("parallel: training steps beside a thread that keeps a core busy are bit-identical to one thread") {
  // A competitor that never sleeps: on a machine of two cores, one of the two threads of each split is
  // parked half the time, and its pieces go to the other. The schedule changes; the bits must not.
  RestoreThreads restore;
  const PinCrossover every_split(0, 0);  // pieces on either thread
  const auto one = attention_like(1);
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    volatile std::uint64_t x = 0;
    while (!stop.load(std::memory_order_relaxed)) x = x + 1;
  });
  std::vector<std::vector<Tensor>> two;
  for (int run = 0; run < 3; ++run) two.push_back(attention_like(2));
  stop = true;
  spinner.join();
  for (const auto& t : two) {
    REQUIRE(t.size() == one.size());
    for (std::size_t i = 0; i < one.size(); ++i) {
      CAPTURE(i);
      CHECK(t[i] == one[i]);
    }
  }
}

TEST_CASE("parallel: column sums (a bias's, layer norm's gamma and beta gradients) split over threads keep their bits") {
  RestoreThreads restore;
  const PinCrossover pin(0, 0);
  Rng rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const Index rows = 1 + static_cast<Index>(rng.below(300)), cols = 1 + static_cast<Index>(rng.below(300));
    CAPTURE(rows);
    CAPTURE(cols);
    const Tensor x = test::random_tensor<float>(Shape::mat(rows, cols), rng);
    const Tensor y = test::random_tensor<float>(Shape::mat(rows, cols), rng);
    const Tensor start = test::random_tensor<float>(Shape::mat(1, cols), rng);
    auto sums = [&](int threads) {
      set_num_threads(threads);
      Tensor assigned(Shape::mat(1, cols)), added = start;
      detail::write_column_sums(GradWrite<float>{&assigned, false}, x.flat().array());
      detail::write_column_sums(GradWrite<float>{&added, true}, x.flat().array() * y.flat().array());  // an expression, added
      return std::pair{assigned, added};
    };
    const auto one = sums(1);
    const auto two = sums(2);
    if (have_openmp()) REQUIRE(threads_for_elements(1) == 2);  // the pass was split
    CHECK(two.first == one.first);
    CHECK(two.second == one.second);
    Tensor serial(Shape::mat(1, cols));  // and Eigen's own column sums, the bits before the split
    serial.flat() = x.flat().colwise().sum();
    CHECK(one.first == serial);
  }
}

namespace {
// y = x; its gradient written through the ranged add by a part that throws on the chunk holding the last
// element: a user's mistake (here a ValueError) on whichever thread runs that chunk.
struct ThrowsInPart {
  static constexpr const char* name = "throws_in_part";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const { out.make(x.shape()).array() = x.array(); }
  static void backward(const Output<double>& out, const OpInput<double>& x) {
    const Index n = x.value.numel();
    x.grad.add([&](Index from, Index count) {
      if (from + count == n) fail<ValueError>("throws_in_part: refused the chunk ending at {}", n);
      return out.grad().array().segment(from, count);
    });
  }
};
}  // namespace

TEST_CASE("parallel: an exception thrown by any thread of a split comes out on the calling thread, once") {
  RestoreThreads restore;
  const PinCrossover every_split(0, 0);
  set_num_threads(2);
  const std::uint64_t regions_before = parallel_regions_started();
  // Thrown by the last piece only, then by every piece: one exception comes out, the other pieces are
  // still run to their end.
  std::vector<int> seen(1000, 0);
  CHECK_THROWS_WITH_AS(parallel_for(Index{1000}, 2, [&](Index first, Index last) {
                         for (Index i = first; i < last; ++i) ++seen[static_cast<std::size_t>(i)];
                         if (last == 1000) fail<ValueError>("body: refused chunk [{}, {})", first, last);
                       }),
                       doctest::Contains("body: refused chunk ["), ValueError);
  CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  CHECK_THROWS_AS(parallel_for(Index{1000}, 2, [](Index, Index) { fail<UsageError>("body: every chunk refuses"); }),
                  UsageError);
  // A Function's ranged add part (a user's code): the backward pass ends in the part's own error.
  Tape<double> tape;
  Rng rng(3);
  Var<double> x = tape.input(test::random_tensor<double>(Shape::mat(64, 64), rng));
  Var<double> y = sum(apply(ThrowsInPart{}, {x}));
  CHECK_THROWS_WITH_AS(tape.backward(y), "throws_in_part: refused the chunk ending at 4096", ValueError);
  if (have_openmp()) CHECK(parallel_regions_started() > regions_before);  // the work was split
}

TEST_CASE("parallel: a residual add's backward takes one region, layer_norm's two, an optimizer's update one") {
  // Each region is a start and a wait for every thread (a parked one holds it up): issue 41 fused these.
  if (!have_openmp()) return;
  RestoreThreads restore;
  set_num_threads(2);
  const PinCrossover pin(0, 0);  // everything that can be split is
  Rng rng(41);
  const Shape s = Shape::batched(2, 48, 64);
  Parameter<float> a("a", test::random_tensor<float>(s, rng)), b("b", test::random_tensor<float>(s, rng));
  Parameter<float> gain("gain", test::random_tensor<float>(Shape::vec(64), rng));
  Parameter<float> shift("shift", test::random_tensor<float>(Shape::vec(64), rng));
  const Tensor seed = test::random_tensor<float>(s, rng);
  auto regions_of_backward = [&](auto record) {
    Tape<float> tape;
    Var<float> y = record(tape);
    const std::uint64_t before = parallel_regions_started();
    tape.backward(y, seed);  // only y's own rule runs: its inputs are leaves
    return parallel_regions_started() - before;
  };
  CHECK(regions_of_backward([&](Tape<float>& t) { return add(t.param(a), t.param(b)); }) == 1);
  CHECK(regions_of_backward([&](Tape<float>& t) { return sub(t.param(a), t.param(b)); }) == 1);
  CHECK(regions_of_backward([&](Tape<float>& t) { return layer_norm(t.param(a), t.param(gain), t.param(shift)); }) == 2);

  std::vector<Parameter<float>*> params = {&a, &b, &gain, &shift};
  Adam<float> adam(params, {.lr = 0.01});
  SGD<float> sgd(params, {.lr = 0.01, .momentum = 0.9, .nesterov = true});
  for (Optimizer<float>* opt : std::initializer_list<Optimizer<float>*>{&adam, &sgd}) {
    const std::uint64_t before = parallel_regions_started();
    opt->step();
    CHECK(parallel_regions_started() - before == 1);
  }
}

TEST_CASE("parallel: an optimizer's one-region update equals each parameter updated alone, bit for bit") {
  // The parameters are laid end to end and cut in pieces across them (Optimizer::for_each_slice): every
  // element must be updated once, by its own parameter's rule, as a pass over that parameter alone does.
  RestoreThreads restore;
  const PinCrossover pin(0, 0);
  Rng rng(42);
  const std::vector<Shape> shapes = {Shape::vec(1), Shape::mat(0, 3), Shape::vec(17), Shape::mat(33, 7),
                                     Shape::vec(16), Shape::mat(64, 65), Shape::vec(5)};
  auto make = [&](std::vector<std::unique_ptr<Parameter<float>>>& out, Rng r) {
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      out.push_back(std::make_unique<Parameter<float>>(fmt::format("p{}", i), test::random_tensor<float>(shapes[i], r)));
      out.back()->grad = test::random_tensor<float>(shapes[i], r);
    }
  };
  for (int kind = 0; kind < 3; ++kind) {
    CAPTURE(kind);
    std::vector<std::unique_ptr<Parameter<float>>> together, alone;
    make(together, rng);
    make(alone, rng);
    auto optimizer = [&](std::vector<Parameter<float>*> ps) -> std::unique_ptr<Optimizer<float>> {
      if (kind == 0) return std::make_unique<Adam<float>>(ps, AdamOptions{.lr = 0.01, .weight_decay = 0.1});
      if (kind == 1) return std::make_unique<AdamW<float>>(ps, AdamOptions{.lr = 0.01, .weight_decay = 0.1});
      return std::make_unique<SGD<float>>(ps, SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
    };
    std::vector<Parameter<float>*> all;
    for (auto& p : together) all.push_back(p.get());
    set_num_threads(have_openmp() ? 2 : 1);
    auto joint = optimizer(all);
    for (int step = 0; step < 3; ++step) joint->step();
    set_num_threads(1);
    for (auto& p : alone) {
      auto single = optimizer({p.get()});
      for (int step = 0; step < 3; ++step) single->step();
    }
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      CAPTURE(i);
      CHECK(together[i]->value == alone[i]->value);
    }
  }
}
