// Tape overhead: what recording one tiny op costs. A chain of N `scale` ops on a one-element tensor is
// recorded (and then walked back) over and over; the time per op is the tape's bookkeeping, since the
// arithmetic (one multiply) is nothing. The same chain as a plain loop is printed beside it, and heap
// allocations are counted over the steady-state steps.
//
//   build/bench/tape_overhead [--ops N] [--repeats R]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "command_line.hpp"
#include "alloc_counter.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "timing.hpp"

using namespace tapegrad;

namespace {

// Median over `repeats` of the time of `rounds` calls of f, in ns per op.
template <class F>
double median_ns_per_op(int repeats, int rounds, int ops, F f) {
  return bench::median_seconds(repeats, rounds, f) * 1e9 / ops;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-op cost of recording on the tapegrad tape"};
  int ops = 1000, repeats = 15, rounds = 200;
  app.add_option("--ops", ops, "Ops per recorded chain")->capture_default_str()->check(CLI::Range(1, 1000000));
  app.add_option("--repeats", repeats, "Timed repeats (the median is reported)")->capture_default_str()->check(CLI::Range(1, 1000000));
  if (const auto stop = examples::parse_command_line(app, "tape_overhead", argc, argv)) return *stop;

  Parameter<float> x("x", Tensor(Shape::scalar(), 1.0f));
  Tape<float> tape;
  float sink = 0;

  auto forward = [&] {
    tape.reset();
    Var<float> v = tape.param(x);
    for (int i = 0; i < ops; ++i) v = scale(v, 1.0001);
    sink += v.value()[0];
    return v;
  };
  auto forward_backward = [&] { tape.backward(forward()); };
  auto no_grad = [&] {
    NoGradGuard<float> guard(tape);
    forward();
  };
  auto plain = [&] {
    float v = x.value[0];
    for (int i = 0; i < ops; ++i) {
      v *= 1.0001f;
      asm volatile("" : "+x"(v));  // keep the loop from being folded away
    }
    sink += v;
  };

  for (int i = 0; i < 3; ++i) forward_backward();  // size every buffer once
  // Allocations are counted over untimed steady-state chains (the timing harness allocates itself).
  const long steps = 1000;
  const long before = test::allocation_count();
  for (long i = 0; i < steps; ++i) {
    forward_backward();
    no_grad();
  }
  const long allocations = test::allocation_count() - before;
  const double record = median_ns_per_op(repeats, rounds, ops, forward);
  const double both = median_ns_per_op(repeats, rounds, ops, forward_backward);
  const double eval = median_ns_per_op(repeats, rounds, ops, no_grad);
  const double bare = median_ns_per_op(repeats, rounds, ops, plain);

  fmt::print("tape overhead: chains of {} scale ops on a one-element float tensor, median of {} x {} chains\n", ops,
             repeats, rounds);
  fmt::print("  record (forward, gradients on)   {:7.1f} ns/op\n", record);
  fmt::print("  record + backward                {:7.1f} ns/op\n", both);
  fmt::print("  record with gradients disabled   {:7.1f} ns/op\n", eval);
  fmt::print("  plain loop, same arithmetic      {:7.1f} ns/op\n", bare);
  fmt::print("  heap allocations in {} steady-state chains (record + backward, then no-grad): {}\n", steps,
             allocations);
  return sink == 0 ? 2 : 0;  // uses sink so nothing is optimised away
}
