// One full training step of a benchmark model, timed: zero the gradients, forward, cross-entropy on every
// position, backward, SGD update, in float32: the same step as bench/torch_step.py.
// W1-W4 ("attention"): the toy model with trainable token embeddings and learned positions ->
// self-attention (Wq, Wk, Wv, Wo, no bias, H heads, no mask) + residual -> linear readout with bias
// over V classes.
// W5 ("stack"): token embedding + learned positions -> L pre-norm transformer blocks (causal
// learnable attention with biases, LayerNorm, FFN d -> F -> d with GELU, dropout 0) -> final LayerNorm
// -> linear head over V: PyTorch's nn.TransformerEncoderLayer(norm_first=True, activation="gelu").
//
// Prints one JSON line per workload (median ms per step, achieved GFLOP/s, heap allocations per
// steady-state step, parameter count, memory, and the step's time over its two bounds) and one with this
// machine's GEMM peak at the same thread count (bench/gemm_peak.hpp). kWorkloads (bench/workloads.hpp) is
// the one table of the workloads: --list-workloads prints it, and bench/compare.py and bench/torch_step.py
// read it from there.
// Memory: "peak_rss_mb" is the process's high-water mark after the workload, which never goes down, so with
// several workloads in one run it is the largest so far (the GEMM peak's matrices included); "rss_growth_mb"
// is how much this workload raised it. A workload's own peak is that of a run of it alone without the GEMM
// peak, `--workloads W5 --no-peak`, which is how bench/compare.py runs each. "tape_bytes" is what the
// tape holds after a steady-state step (Tape::bytes: values, gradients, saved state).
// Bounds: "x_bound" is the step's time over 3F / the square-GEMM peak; "x_shape_bound" over the time of
// the step's own products each at its warm rate, alone, at its own shape (bench/step_shapes.hpp), measured
// after the step with its model and tape gone, so that it changes neither the step's time nor its memory.
// bench/compare.py runs it beside PyTorch; run it alone as
//   OMP_NUM_THREADS=1 build/bench/step_bench [--workloads W1,W3] [--seconds 2]
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "command_line.hpp"
#include "alloc_counter.hpp"
#include "workloads.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/autograd/gemm.hpp"
#include "tapegrad/core/parallel.hpp"
#include "gemm_peak.hpp"
#include "peak_rss.hpp"
#include "step_shapes.hpp"
#include "timing.hpp"
#include "lesson/toy_model.hpp"
#include "tapegrad/layers/embedding.hpp"
#include "tapegrad/layers/transformer.hpp"
#include "tapegrad/train/optimizer.hpp"

using namespace tapegrad;
using bench::Clock;

namespace {

struct StepTiming {
  double median_ms = 0;
  std::size_t steps = 0;
  double allocations = 0, regions = 0;  // per step
  double against_ms = 0;  // with --against-threads: the median step at that thread count
};

// Times `step` (after 5 untimed steps that size every buffer). With `against` > 0, also at `against`
// threads, in turns: blocks of steps at num_threads() and at `against` alternate, each block's first step
// untimed (it wakes or idles the pool's workers), so that both counts meet the same moments of a shared
// machine, whose speed can change by a third from one minute to the next (docs/performance.md,
// "Threads"); the counters are the main count's steps. Runs of separate processes a minute
// apart compare two machines, not two thread counts.
template <class Step>
StepTiming time_steps(Step step, double seconds, std::size_t max_steps, int against) {
  const int threads = num_threads();
  const int turns = against > 0 ? 2 : 1;
  const int count[2] = {threads, against};
  for (int turn = 0; turn < turns; ++turn) {
    set_num_threads(count[turn]);
    for (int i = 0; i < 5; ++i) step();
  }
  set_num_threads(threads);
  // Steps a block: one alone; about 20 ms of them in turns (at least 1, at most 100).
  const auto warm = Clock::now();
  step();
  const double warm_ms = bench::seconds_since(warm) * 1e3;
  const auto block = turns == 1 ? std::size_t{1} : static_cast<std::size_t>(std::clamp(20 / warm_ms, 1.0, 100.0));
  std::vector<double> times[2];
  for (auto& t : times) t.reserve(max_steps + block);  // the timing must not allocate while allocations are counted
  const long allocations_before = test::allocation_count();
  std::uint64_t regions = 0;  // over the timed steps at the main count
  std::size_t untimed = 0;
  const auto start = Clock::now();
  while (times[0].size() < 10 || (bench::seconds_since(start) < seconds && times[0].size() < max_steps)) {
    for (int turn = 0; turn < turns; ++turn) {
      if (turns > 1) {
        set_num_threads(count[turn]);
        ++untimed;
        step();  // untimed: the first step after a change of count wakes or idles the pool's workers
      }
      const std::uint64_t before = parallel_regions_started();
      for (std::size_t i = 0; i < block; ++i) {
        const auto t0 = Clock::now();
        step();
        times[turn].push_back(bench::seconds_since(t0) * 1e3);  // ms
      }
      if (turn == 0) regions += parallel_regions_started() - before;
    }
  }
  set_num_threads(threads);
  const auto steps = static_cast<double>(times[0].size());
  const double all_steps = steps + static_cast<double>(times[1].size() + untimed);
  const double allocations = static_cast<double>(test::allocation_count() - allocations_before) / all_steps;
  StepTiming r;
  r.median_ms = bench::median(std::move(times[0]));
  r.steps = static_cast<std::size_t>(steps);
  r.allocations = allocations;  // a step of either count, the untimed ones included
  // Parallel regions a step starts: 0 when nothing in it is worth a second thread (core/parallel.hpp).
  r.regions = static_cast<double>(regions) / steps;
  if (turns > 1) r.against_ms = bench::median(std::move(times[1]));
  return r;
}

struct Measured {
  StepTiming timing;
  Index params = 0;
  std::size_t tape_bytes = 0;  // after the last timed step, its recording and gradients in place
};

// Builds w's model, batch and tape, times its step and returns with all of them freed.
// The tape releases gradients as a Trainer's does, unless keep_grads; stack workloads recompute every
// checkpoint_every-th block in backward (0: none).
Measured measure(const Workload& w, double seconds, std::size_t max_steps, bool keep_grads, Index checkpoint_every,
                 int against) {
  SequenceBatch batch;
  Rng rng(2);
  batch.tokens.resize(Shape::mat(w.B, w.T));
  batch.labels.resize(Shape::mat(w.B, w.T));
  batch.padding.resize(Shape::mat(w.B, w.T));
  for (Index i = 0; i < batch.tokens.numel(); ++i) {
    batch.tokens[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(w.V)));
    batch.labels[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(w.V)));
  }
  Tape<float> tape;
  tape.set_release_grads(!keep_grads);
  auto train = [&](auto& model, auto loss) {
    SGD<float> sgd(model.parameters(), {.lr = 0.01});
    const StepTiming timing = time_steps(
        [&] {
          sgd.zero_grad();
          tape.reset();
          Var<float> l = loss(model);
          tape.backward(l);
          sgd.step();
        },
        seconds, max_steps, against);
    return Measured{timing, model.count_parameters(), tape.bytes()};
  };
  if (w.model == "stack") {
    StackModel model(w, checkpoint_every);
    return train(model, [&](StackModel& m) { return m.loss(tape, batch); });
  }
  lesson::ToyModel<float> model(attention_config(w));
  return train(model, [&](lesson::ToyModel<float>& m) { return m.loss(tape, batch).loss; });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times one training step of the benchmark model (see bench/compare.py)"};
  std::vector<std::string> all_names;
  std::vector<std::string> names;  // by default the workloads that run by default
  for (const auto& w : kWorkloads) {
    all_names.push_back(w.name);
    if (w.by_default) names.push_back(w.name);
  }
  double seconds = 2.0;
  std::size_t max_steps = 5000;
  bool skip_peak = false, skip_shape_bound = false, list = false, keep_grads = false;
  Index checkpoint_every = 0;
  int against = 0;
  app.add_option("--max-steps", max_steps, "At most this many timed steps per workload")->capture_default_str();
  app.add_flag("--no-peak", skip_peak, "Do not measure the square-GEMM peak (nor print x_bound)");
  app.add_flag("--no-shape-bound", skip_shape_bound,
               "Do not time the step's products at their own shapes (nor print x_shape_bound); with --no-peak, for "
               "profiling the step alone");
  app.add_flag("--keep-grads", keep_grads,
               "Keep every node's gradient to the end of the step (Tape::set_release_grads(false)); by default the tape "
               "releases them as a Trainer's does");
  app.add_option("--checkpoint-every", checkpoint_every,
                 "Stack workloads: recompute every K-th block in backward instead of keeping its activations (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(Index{0}, Index{64}));
  app.add_option("--against-threads", against,
                 "Also time each step at this many threads, in turns with OMP_NUM_THREADS' count (blocks of about 20 ms), "
                 "and print both medians and their ratio: a comparison that a shared machine's changes of speed "
                 "do not skew as they do two separate runs")
      ->check(CLI::Range(1, 256));
  app.add_flag("--list-workloads", list, "Print each workload's name and B, T, d, H, V as a JSON line, and exit");
  app.add_option("--workloads", names, "Workloads to run")->delimiter(',')->check(CLI::IsMember(all_names));
  app.add_option("--seconds", seconds, "Time to spend timing each workload")->capture_default_str();
  if (const auto stop = examples::parse_command_line(app, "step_bench", argc, argv)) return *stop;

  if (list) {
    for (const auto& w : kWorkloads)
      fmt::print("{{\"kind\": \"workload\", \"workload\": \"{}\", \"B\": {}, \"T\": {}, \"d\": {}, \"H\": {}, \"V\": {}, "
                 "\"model\": \"{}\", \"layers\": {}, \"ffn\": {}, \"by_default\": {}}}\n",
                 w.name, w.B, w.T, w.d, w.H, w.V, w.model, w.layers, w.ffn, w.by_default);
    return 0;
  }

  const int threads = num_threads();
  std::optional<double> peak_gflops;
  if (!skip_peak) {
    const bench::GemmPeak peak = bench::gemm_peak();
    peak_gflops = peak.best();
    std::string tapegrad;
    for (const auto& [n, g] : peak.tapegrad) tapegrad += fmt::format(", \"tapegrad_{}\": {:.1f}", n, g);
    fmt::print("{{\"kind\": \"peak\", \"threads\": {}, \"gemm_gflops\": {:.1f}, \"eigen_1024\": {:.1f}{}, \"kernels\": \"{}\"}}\n",
               threads, peak.best(), peak.eigen_1024, tapegrad, detail::name(detail::gemm_kernels()));
  }
  for (const auto& w : kWorkloads) {
    if (std::find(names.begin(), names.end(), w.name) == names.end()) continue;
    const double rss_before = bench::peak_rss_mb();
    const Measured m = measure(w, seconds, max_steps, keep_grads, checkpoint_every, against);
    const double rss = bench::peak_rss_mb();  // before the shape bound's operands
    const double ms = m.timing.median_ms;
    std::string bounds;
    if (peak_gflops) bounds += fmt::format(", \"x_bound\": {:.3f}", ms / (w.flops() / (*peak_gflops * 1e9) * 1e3));
    if (against > 0)
      bounds += fmt::format(", \"against_threads\": {}, \"against_ms\": {:.5f}, \"x_against\": {:.3f}", against,
                            m.timing.against_ms, ms / m.timing.against_ms);
    if (!skip_shape_bound) {
      const double shape_ms = bench::shape_bound_ms(w);
      bounds += fmt::format(", \"shape_bound_ms\": {:.5f}, \"x_shape_bound\": {:.3f}", shape_ms, ms / shape_ms);
    }
    fmt::print("{{\"kind\": \"step\", \"workload\": \"{}\", \"threads\": {}, \"median_ms\": {:.5f}, \"steps\": {}, "
               "\"gflops\": {:.2f}, \"allocations_per_step\": {}, \"regions_per_step\": {}, \"params\": {}, "
               "\"peak_rss_mb\": {:.1f}, \"rss_growth_mb\": {:.1f}, \"tape_bytes\": {}, \"release_grads\": {}, "
               "\"checkpoint_every\": {}{}}}\n",
               w.name, threads, ms, m.timing.steps, w.flops() / (ms * 1e-3) / 1e9, m.timing.allocations,
               m.timing.regions, m.params, rss, rss - rss_before, m.tape_bytes, !keep_grads,
               w.model == "stack" ? checkpoint_every : 0, bounds);
    std::fflush(stdout);  // a line per workload as it ends, for a reader of a long run
  }
  return 0;
}
