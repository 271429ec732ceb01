// The matrix products of one training step of a workload (bench/workloads.hpp), in the form, shape and
// strides the step runs them in, and the time of one of them alone: shared by step_products, which times
// each on operands in cache and from L3 or memory, and step_bench, whose bound at the step's own shapes
// (x_shape_bound) is the step's products at their warm rates.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "timing.hpp"
#include "workloads.hpp"
#include "tapegrad/autograd/gemm.hpp"  // internal: the products as the ops call them
#include "tapegrad/core/error.hpp"
#include "tapegrad/core/rng.hpp"

namespace tapegrad::bench {

using detail::ProductForm;

// One product of the step: C (m x n) = op(A) op(B), A's, B's and C's rows `lda`, `ldb`, `ldc` apart,
// run `count` times per step.
struct Product {
  std::string what;
  ProductForm form;
  Index m, n, k, lda, ldb, ldc, count;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
  // A's and B's rows and columns as stored (a^T b stores A as k x m, a b^T stores B as n x k).
  Index a_rows() const { return form == ProductForm::atb ? k : m; }
  Index a_cols() const { return form == ProductForm::atb ? m : k; }
  Index b_rows() const { return form == ProductForm::abt ? n : k; }
  Index b_cols() const { return form == ProductForm::abt ? k : n; }
};

// One set of operands of a product in its strides: A and B uniform in [-0.5, 0.5) from `rng`, C zeros.
struct Operands {
  std::vector<float> a, b, c;
};
inline Operands random_operands(const Product& p, Rng& rng) {
  Operands o{std::vector<float>(static_cast<std::size_t>(p.a_rows() * p.lda)),
             std::vector<float>(static_cast<std::size_t>(p.b_rows() * p.ldb)),
             std::vector<float>(static_cast<std::size_t>(p.m * p.ldc))};
  for (float& x : o.a) x = static_cast<float>(rng.uniform()) - 0.5f;
  for (float& x : o.b) x = static_cast<float>(rng.uniform()) - 0.5f;
  return o;
}

inline const char* form_name(ProductForm f) {
  return f == ProductForm::ab ? "a b" : f == ProductForm::atb ? "a^T b" : "a b^T";
}

// A linear map Y = X W of (rows, in) by (in, out), `count` times a step: its product, and backward
// dX = dY W^T and dW = X^T dY.
inline void add_linear(std::vector<Product>& p, const std::string& what, Index rows, Index in, Index out, Index count) {
  p.push_back({what, ProductForm::ab, rows, out, in, in, out, out, count});
  p.push_back({what + " dX = dY W^T", ProductForm::abt, rows, in, out, out, out, in, count});
  p.push_back({what + " dW = X^T dY", ProductForm::atb, in, out, rows, in, out, out, count});
}

// Attention over `items` (batch item, head) pairs of whole T x T scores (a causal mask is applied in the
// softmax), heads of h columns read in place from rows d apart: S = Q K^T, O = P V; backward
// (ops_attention.cpp) dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q.
inline void add_attention(std::vector<Product>& p, Index t, Index h, Index d, Index items) {
  p.push_back({"scores Q K^T", ProductForm::abt, t, t, h, d, d, t, items});
  p.push_back({"P V", ProductForm::ab, t, h, t, t, d, d, items});
  p.push_back({"dP = dO V^T", ProductForm::abt, t, t, h, d, d, t, items});
  p.push_back({"dV = P^T dO", ProductForm::atb, t, h, t, t, d, d, items});
  p.push_back({"dQ = dS K", ProductForm::ab, t, h, t, t, d, d, items});
  p.push_back({"dK = dS^T Q", ProductForm::atb, t, h, t, t, d, d, items});
}

// W1-W4's step (lesson/toy_model, attention_config): the Q, K, V and O projections of (B T, d) rows by
// (d, d), attention over B H items, the readout (B T, d) by (d, V). W5-W7's ("stack": L pre-norm blocks,
// then the head): per block the projections, the attention and the feed-forward's (d, F) and (F, d)
// maps, then the head once. A causal step skips some attention products (ops_attention.cpp,
// block_reach); they are listed whole here, as Workload::flops counts them.
inline std::vector<Product> step_products(const Workload& w) {
  const bool stack = w.model == "stack";
  const Index bt = w.B * w.T, d = w.d, blocks = stack ? w.layers : 1;
  std::vector<Product> p;
  add_linear(p, "Q K V O projections", bt, d, d, 4 * blocks);
  if (stack) {
    add_linear(p, "feed-forward up", bt, d, w.ffn, blocks);
    add_linear(p, "feed-forward down", bt, w.ffn, d, blocks);
  }
  add_linear(p, stack ? "head" : "readout", bt, d, w.V, 1);
  add_attention(p, w.T, d / w.H, d, w.B * w.H * blocks);
  // The list is the step's products exactly when their FLOPs are the ones step_bench counts.
  double flops = 0;
  for (const Product& q : p) flops += static_cast<double>(q.count) * q.flops();
  if (std::abs(flops - w.flops()) > 1e-9 * w.flops())
    fail<Error>("step_products: {}'s products add up to {} FLOPs, but the workload counts {}", w.name, flops,
                w.flops());
  return p;
}

// Median microseconds of one call of `p` over `repeats` samples of `rounds` calls each, after `warmup`
// calls, the calls reading `sets` operand sets in turn: 1 set stays in cache ("warm"); sets that fill
// 32 MB make each call read its operands from L3 or memory ("cold"), as a step's products read tensors
// that earlier ops pushed out of L2.
inline double product_us(const Product& p, int sets, int rounds, int repeats, int warmup) {
  std::vector<Operands> set;
  Rng rng(3);
  for (int i = 0; i < sets; ++i) set.push_back(random_operands(p, rng));
  int next = 0;
  return median_seconds(repeats, rounds, [&] {
    Operands& o = set[static_cast<std::size_t>(next)];
    detail::gemm<float>(p.form, p.m, p.n, p.k, {o.a.data(), p.lda}, {o.b.data(), p.ldb}, o.c.data(), p.ldc, false);
    next = (next + 1) % sets;
  }, warmup) * 1e6;
}

// The operand sets that fill 32 MB for `p` (16 to 1024): product_us's cold measurement.
inline int cold_sets(const Product& p) {
  const Index set_bytes = static_cast<Index>(sizeof(float)) * (p.a_rows() * p.lda + p.b_rows() * p.ldb + p.m * p.ldc);
  return static_cast<int>(std::clamp<Index>((Index{32} << 20) / set_bytes, 16, 1024));
}

// The bound at the step's own shapes: milliseconds the step's products take, each at the rate it runs
// alone on operands in cache (its shape's peak: form, strides and all), with this process's threads.
// Cheaper than step_products's measurement (7 samples, each at least 20 MFLOP of one product, warm
// only): a few percent of step_bench's time for a workload.
inline double shape_bound_ms(const Workload& w) {
  double us = 0;
  for (const Product& p : step_products(w)) {
    const int rounds = std::max(1, static_cast<int>(2e7 / p.flops()));
    us += static_cast<double>(p.count) * product_us(p, 1, rounds, 7, 1);
  }
  return us / 1e3;
}

}  // namespace tapegrad::bench
