// The attention op alone (autograd/ops_attention.cpp), and the masked softmax inside it: forward and
// backward of attention(q, k, v) at the shapes of step_bench's workloads W3, W4 and W5 (W5's with its
// causal mask), and softmax_rows over 128-wide rows with no mask and with a causal one, in ns per
// element. What the step benchmark cannot separate: how much of a step the attention op takes, and what
// a mask costs in the softmax.
//
//   OMP_NUM_THREADS=1 build/bench/attention_bench [--repeats R]
#include <algorithm>
#include <cmath>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "command_line.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/parallel.hpp"
#include "tapegrad/core/rng.hpp"
#include "timing.hpp"
#include "workloads.hpp"

using namespace tapegrad;
using bench::Clock;

namespace {

// A (rows, rows) mask blocking every key after the query: the causal mask.
Mask causal_mask(Index rows) {
  Mask m(Shape::mat(rows, rows));
  for (Index r = 0; r < rows; ++r)
    for (Index c = r + 1; c < rows; ++c) m.at(r, c) = 1;
  return m;
}

Tensor random_uniform(Shape s, Rng& rng) {
  Tensor t(s);
  for (Index i = 0; i < t.numel(); ++i) t[i] = static_cast<float>(rng.uniform() - 0.5);
  return t;
}

// Median ms of the forward and of the backward of attention over q, k, v (B, T, d), H heads.
void time_attention(const Workload& w, bool causal, int repeats) {
  Rng rng(1);
  const Shape s = Shape::batched(w.B, w.T, w.d);
  const Tensor q0 = random_uniform(s, rng), k0 = random_uniform(s, rng), v0 = random_uniform(s, rng);
  const Tensor seed = random_uniform(s, rng);
  const Mask mask = causal_mask(w.T);
  const double scale = 1 / std::sqrt(static_cast<double>(w.d / w.H));
  Tape<float> tape;
  std::vector<double> forward, backward;
  for (int i = 0; i < repeats + 3; ++i) {  // 3 untimed, to size every buffer
    tape.reset();
    Var<float> q = tape.input(q0), k = tape.input(k0), v = tape.input(v0);
    const auto t0 = Clock::now();
    Var<float> out = attention(q, k, v, w.H, causal ? &mask : nullptr, scale);
    const auto t1 = Clock::now();
    tape.backward(out, seed);
    if (i < 3) continue;
    forward.push_back(std::chrono::duration<double>(t1 - t0).count() * 1e3);
    backward.push_back(bench::seconds_since(t1) * 1e3);
  }
  // Two products forward (Q K^T, P V), four backward, each 2 B H T^2 (d / H) FLOPs.
  const double flops = 2.0 * static_cast<double>(w.B * w.T * w.T * w.d);
  const double f = bench::median(forward), b = bench::median(backward);
  fmt::print("{:<3} B {:>2}, T {:>3}, d {:>3}, H {}, {:<9} forward {:>7.3f} ms ({:>5.1f} GFLOP/s)  backward {:>7.3f} ms ({:>5.1f} GFLOP/s)\n",
             w.name, w.B, w.T, w.d, w.H, causal ? "causal" : "no mask", f, 2 * flops / f / 1e6, b, 4 * flops / b / 1e6);
}

// Median ns per element of softmax_rows over (B, 128, 128), without and with a causal mask.
void time_softmax(bool causal, int repeats) {
  Rng rng(2);
  const Index rows = 128;
  Parameter<float> x("x", random_uniform(Shape::batched(64, rows, rows), rng));  // read in place, not copied
  const Mask mask = causal_mask(rows);
  Tape<float> tape;
  NoGradGuard<float> no_grad(tape);
  const double seconds = bench::median_seconds(
      repeats, 5,
      [&] {
        tape.reset();  // keeps the output's buffer
        softmax_rows(tape.param(x), causal ? &mask : nullptr, 0.125);
      },
      2);
  fmt::print("softmax_rows over 64 x {} x {}, {:<9} {:.3f} ns per element\n", rows, rows, causal ? "causal:" : "no mask:",
             seconds * 1e9 / static_cast<double>(x.value.numel()));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The attention op and the masked softmax, timed alone"};
  int repeats = 30;
  app.add_option("--repeats", repeats, "Timed repeats (the median is reported)")->capture_default_str()->check(CLI::Range(1, 1000000));
  if (const auto stop = examples::parse_command_line(app, "attention_bench", argc, argv)) return *stop;
  fmt::print("attention(q, k, v) alone, float, {} thread(s), median of {}\n", num_threads(), repeats);
  for (const Workload& w : kWorkloads) {
    if (w.name == "W3" || w.name == "W4") time_attention(w, false, repeats);
    if (w.name == "W5") time_attention(w, true, repeats);  // one block's attention: W5's is causal
  }
  time_softmax(false, repeats);
  time_softmax(true, repeats);
  return 0;
}
