// The matrix products of one training step of W3, W4 and W5 (bench/workloads.hpp), each timed alone in the
// form, shape and strides the step runs it in, twice: on operands in cache ("warm": the same operands
// again and again) and on operands that come from L3 or memory ("cold": each call reads the next of
// enough sets to fill 32 MB, as a step's products read tensors that earlier ops pushed out of L2). The list
// of products and their timing are bench/step_shapes.hpp's, which step_bench's x_shape_bound uses too.
// Their sums per step, against the bound compare.py holds the step to (3F / the GEMM peak of
// bench/gemm_peak.hpp; target: the step within 1.25x of it, W5 within 1.15x), say how much of the step's time the
// products alone need at each rate, so what is left for everything else. It also prints how fast one
// core reads memory from L2 and from L3: the rates the warm and cold operands come in at. For W5 it also
// times the Q, K and V projections as one product of three times the width against three, the fusion
// issue 31 proposed, and its feed-forward whole against in row blocks carried from one product to the
// next, the other layout issue 31 proposed (docs/performance.md, "What bounds the step").
//
//   OMP_NUM_THREADS=1 taskset -c 1 build/bench/step_products
//
// Ends with one JSON line per workload (its sums and bound), which bench/compare.py prints under its
// verdicts. One thread: the bound is a one-thread target. The products are detail::gemm calls, the routine
// behind matmul, affine and the attention op; each writes its C (no accumulation), as a first gradient
// write does.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <unsupported/Eigen/SpecialFunctions>

#include "gemm_peak.hpp"
#include "step_shapes.hpp"
#include "timing.hpp"
#include "workloads.hpp"
#include "tapegrad/core/error.hpp"
#include "tapegrad/core/parallel.hpp"

using namespace tapegrad;
using bench::add_linear;
using bench::form_name;
using bench::Product;
using bench::ProductForm;
using bench::step_products;

namespace {

// Issue 31 asked for Q, K and V as one product: (B T, d) rows by (d, 3d) instead of three by (d, d), and so
// in backward dX by one product of depth 3d and dW by one of 3d columns. Their products both ways.
std::vector<Product> qkv_products(const Workload& w, bool packed) {
  const Index bt = w.B * w.T, d = w.d;
  std::vector<Product> p;
  add_linear(p, packed ? "Q K V as one" : "Q K V apart", bt, d, packed ? 3 * d : d, packed ? w.layers : 3 * w.layers);
  return p;
}

// W5's feed-forward, every block's (rows x d -> F, erf GELU, -> d; its own tensors, so a block's inputs come
// from L3 or memory as in the step), forward through the blocks and then backward, in milliseconds (the
// median of 13 after 2): whole tensors, each product as the ops run it; or `rows` at a time through
// up -> GELU -> down and back (dG, dH, dX), with each weight's op(B) packed once into 64-column panels
// and each panel one product, which is what gemm's packed path runs (its blocks are 64 columns wide), so
// a row block reads packed weights without packing them again; the packing is left out of the time (the
// row blocks' best case). The weights' gradients stay whole products. `gelu` false: the products alone.
// Also returns a sum of every block's outputs and gradients, which the row blocks must give bit for bit
// (split at multiples of 64 rows and read from panels, gemm's products keep their bits).
std::pair<double, double> time_feed_forward(const Workload& w, Index rows, bool gelu) {
  const Index n = w.B * w.T, d = w.d, f = w.ffn;
  if (rows < 0 || (rows > 0 && (n % rows != 0 || d % 64 != 0 || f % 64 != 0)))
    fail<Error>("step_products: {} rows of width {} and {} split into blocks of {} rows and 64 columns", n, d, f, rows);
  struct Tensors {
    Eigen::ArrayXf x, h, g, y, dy, dg, dh, dx, w1, w2, b1, b2, dw1, dw2, up, down, up_t, down_t;
  };
  Rng rng(5);
  auto random = [&](Index size) {
    Eigen::ArrayXf a(size);
    for (float& v : a) v = static_cast<float>(rng.uniform()) - 0.5f;
    return a;
  };
  std::vector<Tensors> blocks;
  for (Index l = 0; l < w.layers; ++l)
    blocks.push_back({random(n * d), random(n * f), random(n * f), random(n * d), random(n * d), random(n * f),
                      random(n * f), random(n * d), random(d * f), random(f * d), random(f), random(d), random(d * f),
                      random(f * d), {}, {}, {}, {}});
  // 1 / sqrt(2) and 1 / sqrt(2 pi): the erf form of GELU and its derivative, Phi(x) + x phi(x).
  const float r_sqrt2 = 1 / std::numbers::sqrt2_v<float>, r_sqrt2pi = std::numbers::inv_sqrtpi_v<float> * r_sqrt2;
  auto act = [&](const float* h, float* g, Index size) {
    const Eigen::Map<const Eigen::ArrayXf> x(h, size);
    if (gelu) Eigen::Map<Eigen::ArrayXf>(g, size) = 0.5f * x * (1.0f + (x * r_sqrt2).erf());
  };
  auto act_back = [&](const float* h, const float* dg, float* dh, Index size) {
    const Eigen::Map<const Eigen::ArrayXf> x(h, size), dx(dg, size);
    if (gelu)
      Eigen::Map<Eigen::ArrayXf>(dh, size) =
          dx * (0.5f * (1.0f + (x * r_sqrt2).erf()) + x * r_sqrt2pi * (-0.5f * x * x).exp());
  };
  // op(B) (k x cols; stored cols x k when `transposed`) as 64-column panels, each k x 64.
  auto pack = [](Eigen::ArrayXf& out, const Eigen::ArrayXf& b, Index k, Index cols, bool transposed) {
    out.resize(k * cols);
    for (Index j = 0; j < cols; j += 64)
      for (Index q = 0; q < k; ++q)
        for (Index c = 0; c < 64; ++c) out[j * k + q * 64 + c] = transposed ? b[(j + c) * k + q] : b[q * cols + j + c];
  };
  auto product = [](ProductForm form, Index m, Index cols, Index k, const float* a, Index lda, const float* b,
                    Index ldb, float* c, Index ldc, const float* bias = nullptr) {
    detail::gemm<float>(form, m, cols, k, {a, lda}, {b, ldb}, c, ldc, false, false, bias);
  };
  auto panels = [&](Index m, Index cols, Index k, const float* a, const Eigen::ArrayXf& packed, float* c,
                    const float* bias) {
    for (Index j = 0; j < cols; j += 64)
      product(ProductForm::ab, m, 64, k, a, k, packed.data() + j * k, 64, c + j, cols, bias ? bias + j : nullptr);
  };
  auto forward = [&](Tensors& t) {
    if (rows == 0) {
      product(ProductForm::ab, n, f, d, t.x.data(), d, t.w1.data(), f, t.h.data(), f, t.b1.data());
      act(t.h.data(), t.g.data(), n * f);
      product(ProductForm::ab, n, d, f, t.g.data(), f, t.w2.data(), d, t.y.data(), d, t.b2.data());
      return;
    }
    for (Index i = 0; i < n; i += rows) {
      panels(rows, f, d, t.x.data() + i * d, t.up, t.h.data() + i * f, t.b1.data());
      act(t.h.data() + i * f, t.g.data() + i * f, rows * f);
      panels(rows, d, f, t.g.data() + i * f, t.down, t.y.data() + i * d, t.b2.data());
    }
  };
  auto backward = [&](Tensors& t) {
    if (rows == 0) {
      product(ProductForm::abt, n, f, d, t.dy.data(), d, t.w2.data(), d, t.dg.data(), f);
      act_back(t.h.data(), t.dg.data(), t.dh.data(), n * f);
      product(ProductForm::abt, n, d, f, t.dh.data(), f, t.w1.data(), f, t.dx.data(), d);
    } else {
      for (Index i = 0; i < n; i += rows) {
        panels(rows, f, d, t.dy.data() + i * d, t.down_t, t.dg.data() + i * f, nullptr);
        act_back(t.h.data() + i * f, t.dg.data() + i * f, t.dh.data() + i * f, rows * f);
        panels(rows, d, f, t.dh.data() + i * f, t.up_t, t.dx.data() + i * d, nullptr);
      }
    }
    product(ProductForm::atb, f, d, n, t.g.data(), f, t.dy.data(), d, t.dw2.data(), d);
    product(ProductForm::atb, d, f, n, t.x.data(), d, t.dh.data(), f, t.dw1.data(), f);
  };
  if (rows > 0)
    for (Tensors& t : blocks)
      pack(t.up, t.w1, d, f, false), pack(t.down, t.w2, f, d, false), pack(t.down_t, t.w2, d, f, true),
          pack(t.up_t, t.w1, f, d, true);
  // 64 MB read between the forward and the backward and between steps, as the rest of a step would.
  const Eigen::ArrayXf other = Eigen::ArrayXf::Constant(Index{16} << 20, 1.0f);
  volatile float sink = 0;
  std::vector<double> samples;
  for (int rep = 0; rep < 15; ++rep) {
    sink = sink + other.sum();
    const auto start = bench::Clock::now();
    for (Tensors& t : blocks) forward(t);
    double seconds = bench::seconds_since(start);
    sink = sink + other.sum();
    const auto back = bench::Clock::now();
    for (auto t = blocks.rbegin(); t != blocks.rend(); ++t) backward(*t);
    seconds += bench::seconds_since(back);
    if (rep >= 2) samples.push_back(seconds);
  }
  double sum = 0;
  for (const Tensors& t : blocks)
    for (const Eigen::ArrayXf* a : {&t.y, &t.dx, &t.dw1, &t.dw2}) sum += a->cast<double>().sum();
  return {bench::median(std::move(samples)) * 1e3, sum};
}

// Median microseconds per call of `p`, warm (one operand set) and cold (sets filling 32 MB, in turn), each
// the median of 15 samples of the same number of calls.
std::pair<double, double> time_product(const Product& p) {
  const int sets = bench::cold_sets(p), rounds = std::max(sets, static_cast<int>(4e7 / p.flops()));
  return {bench::product_us(p, 1, rounds, 15, 2), bench::product_us(p, sets, rounds, 15, sets)};
}

// GB/s of a plain read of `megabytes` of floats (their sum), the median of 15 after 2 for warm-up: at
// 1 MB from L2, at 32 MB from L3, the rates a product's operands come in at warm and cold.
double read_gbps(Index megabytes) {
  const Eigen::ArrayXf data = Eigen::ArrayXf::Constant(megabytes * (Index{1} << 20) / 4, 1.0f);
  volatile float sink = 0;
  const double seconds = bench::median_seconds(15, 1, [&] { sink = sink + data.sum(); }, 2);
  return static_cast<double>(megabytes) * (1 << 20) / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (bench::refused_arguments("step_products", argc, argv)) return 2;
  if (num_threads() != 1)
    fmt::print("step_products: {} threads; the bound is a one-thread target, so run it with OMP_NUM_THREADS=1\n",
               num_threads());
  const bench::GemmPeak peak = bench::gemm_peak();
  fmt::print("GEMM peak at {} thread(s): {:.1f} GFLOP/s ({}'s kernels; the fastest of Eigen's 1024^3 {:.1f}", num_threads(),
             peak.best(), detail::name(detail::gemm_kernels()), peak.eigen_1024);
  for (const auto& [n, g] : peak.tapegrad) fmt::print(", tapegrad's {}^3 {:.1f}", n, g);
  fmt::print(")\nreading memory: {:.1f} GB/s from 1 MB (L2), {:.1f} GB/s from 32 MB (L3 or memory)\n", read_gbps(1),
             read_gbps(32));
  std::string json;
  for (const Workload& w : kWorkloads) {
    if (w.name != "W3" && w.name != "W4" && w.name != "W5") continue;
    const std::vector<Product> products = step_products(w);
    double flops = 0, warm_us = 0, cold_us = 0;
    fmt::print("\n{}: B {}, T {}, d {}, H {}, V {}; per step:\n", w.name, w.B, w.T, w.d, w.H, w.V);
    fmt::print("{:<26} {:>5} {:>5} {:>5} {:>5} {:>6} {:>10} {:>7} {:>10} {:>7} {:>9}\n", "product", "form", "m", "n", "k",
               "count", "warm us", "GFLOP/s", "cold us", "GFLOP/s", "cold ms");
    for (const Product& p : products) {
      const auto [warm, cold] = time_product(p);
      const double n = static_cast<double>(p.count);
      flops += n * p.flops();
      warm_us += n * warm;
      cold_us += n * cold;
      fmt::print("{:<26} {:>5} {:>5} {:>5} {:>5} {:>6} {:>10.2f} {:>7.1f} {:>10.2f} {:>7.1f} {:>9.3f}\n", p.what,
                 form_name(p.form), p.m, p.n, p.k, p.count, warm, p.flops() / warm / 1e3, cold, p.flops() / cold / 1e3,
                 n * cold / 1e3);
    }
    const double bound_ms = w.flops() / (peak.best() * 1e9) * 1e3;
    fmt::print("products alone: {:.2f} ms warm ({:.1f} GFLOP/s), {:.2f} ms cold ({:.1f} GFLOP/s); bound 3F / peak "
               "{:.2f} ms: warm products are {:.2f}x, cold {:.2f}x the bound\n",
               warm_us / 1e3, flops / warm_us / 1e3, cold_us / 1e3, flops / cold_us / 1e3, bound_ms,
               warm_us / 1e3 / bound_ms, cold_us / 1e3 / bound_ms);
    if (w.model == "stack") {
      // What the packed projections would save: each way's cold microseconds a step.
      double apart = 0, packed = 0;
      for (const bool pack : {false, true})
        for (const Product& p : qkv_products(w, pack))
          (pack ? packed : apart) += static_cast<double>(p.count) * time_product(p).second;
      fmt::print("Q, K, V projections and their gradients, cold: {:.3f} ms a step as three products each, {:.3f} ms as "
                 "one ({:+.1f}% of the products' time)\n",
                 apart / 1e3, packed / 1e3, (packed - apart) / cold_us * 100);
      // The feed-forward's products: 2 rows d F FLOPs each, two a block, three per step (forward, dX, dW).
      const double ff_flops = 12.0 * static_cast<double>(w.B * w.T * w.d * w.ffn * w.layers);
      const double ff_bound_ms = ff_flops / (peak.best() * 1e9) * 1e3;
      fmt::print("feed-forward of the {} blocks, forward and backward, from L3 or memory (bound {:.2f} ms):\n",
                 w.layers, ff_bound_ms);
      double whole_sum[2] = {0, 0};
      for (const Index rows : {Index{0}, Index{64}, Index{128}, Index{256}})
        for (const bool gelu : {true, false}) {
          const auto [ms, sum] = time_feed_forward(w, rows, gelu);
          if (rows == 0) whole_sum[gelu] = sum;
          if (sum != whole_sum[gelu])
            fail<Error>("step_products: the feed-forward in rows of {} computed a sum of {} where whole tensors "
                        "computed {}", rows, sum, whole_sum[gelu]);
          const std::string layout = rows == 0 ? std::string("whole tensors") : fmt::format("rows of {}", rows);
          fmt::print("  {:<36} {:>8.3f} ms, {:.2f}x the bound\n",
                     fmt::format("{}, {}", layout, gelu ? "with GELU" : "products alone"), ms, ms / ff_bound_ms);
        }
    }
    json += fmt::format("{{\"kind\": \"products\", \"workload\": \"{}\", \"threads\": {}, \"peak_gflops\": {:.1f}, "
                        "\"warm_ms\": {:.3f}, \"cold_ms\": {:.3f}, \"bound_ms\": {:.3f}}}\n",
                        w.name, num_threads(), peak.best(), warm_us / 1e3, cold_us / 1e3, bound_ms);
  }
  fmt::print("\n{}", json);  // for bench/compare.py
  return 0;
}
