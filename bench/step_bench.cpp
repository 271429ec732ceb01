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
// steady-state step, parameter count) and one with this machine's GEMM peak at the same thread count
// (bench/gemm_peak.hpp). kWorkloads (bench/workloads.hpp) is the one table of the workloads: --list-workloads prints it, and
// bench/compare.py and bench/torch_step.py read it from there.
// bench/compare.py runs it beside PyTorch; run it alone as
//   OMP_NUM_THREADS=1 build/bench/step_bench [--workloads W1,W3] [--seconds 2]
#include <algorithm>
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
#include "timing.hpp"
#include "lesson/toy_model.hpp"
#include "tapegrad/layers/embedding.hpp"
#include "tapegrad/layers/transformer.hpp"
#include "tapegrad/train/optimizer.hpp"

using namespace tapegrad;
using bench::Clock;

namespace {

// Times `step` (after 5 untimed steps that size every buffer) and prints its JSON line.
template <class Step>
void time_steps(const Workload& w, Step step, Index params, double seconds, std::size_t max_steps) {
  for (int i = 0; i < 5; ++i) step();
  std::vector<double> times;
  times.reserve(max_steps + 1);  // the timing must not allocate while allocations are counted
  const long before = test::allocation_count();
  const std::uint64_t regions_before = parallel_regions_started();
  const auto start = Clock::now();
  while (times.size() < 10 || (bench::seconds_since(start) < seconds && times.size() < max_steps)) {
    const auto t0 = Clock::now();
    step();
    times.push_back(bench::seconds_since(t0) * 1e3);  // ms
  }
  const double allocations = static_cast<double>(test::allocation_count() - before) / static_cast<double>(times.size());
  // Parallel regions a step starts: 0 when nothing in it is worth a second thread (core/parallel.hpp).
  const double regions =
      static_cast<double>(parallel_regions_started() - regions_before) / static_cast<double>(times.size());
  const double ms = bench::median(times);
  fmt::print("{{\"kind\": \"step\", \"workload\": \"{}\", \"threads\": {}, \"median_ms\": {:.5f}, \"steps\": {}, "
             "\"gflops\": {:.2f}, \"allocations_per_step\": {}, \"regions_per_step\": {}, \"params\": {}}}\n",
             w.name, num_threads(), ms, times.size(), w.flops() / (ms * 1e-3) / 1e9, allocations, regions, params);
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
  bool skip_peak = false, list = false;
  app.add_option("--max-steps", max_steps, "At most this many timed steps per workload")->capture_default_str();
  app.add_flag("--no-peak", skip_peak, "Do not measure the GEMM peak (for profiling the step alone)");
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
  if (!skip_peak) {
    const bench::GemmPeak peak = bench::gemm_peak();
    std::string tapegrad;
    for (const auto& [n, g] : peak.tapegrad) tapegrad += fmt::format(", \"tapegrad_{}\": {:.1f}", n, g);
    fmt::print("{{\"kind\": \"peak\", \"threads\": {}, \"gemm_gflops\": {:.1f}, \"eigen_1024\": {:.1f}{}, \"kernels\": \"{}\"}}\n",
               threads, peak.best(), peak.eigen_1024, tapegrad, detail::name(detail::gemm_kernels()));
  }
  for (const auto& w : kWorkloads) {
    if (std::find(names.begin(), names.end(), w.name) == names.end()) continue;
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
    auto train = [&](auto& model, auto loss) {
      SGD<float> sgd(model.parameters(), {.lr = 0.01});
      time_steps(
          w,
          [&] {
            sgd.zero_grad();
            tape.reset();
            Var<float> l = loss(model);
            tape.backward(l);
            sgd.step();
          },
          model.parameter_count(), seconds, max_steps);
    };
    if (w.model == "stack") {
      StackModel model(w);
      train(model, [&](StackModel& m) { return m.loss(tape, batch); });
    } else {
      lesson::ToyModel<float> model(attention_config(w));
      train(model, [&](lesson::ToyModel<float>& m) { return m.loss(tape, batch).loss; });
    }
  }
  return 0;
}
