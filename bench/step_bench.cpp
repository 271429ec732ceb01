// One full training step of the benchmark model, timed: zero the gradients, forward, cross-entropy on
// every position, backward, SGD update. The model is the toy model with trainable token embeddings and
// learned positions -> self-attention (Wq, Wk, Wv, Wo, no bias, H heads, no mask) + residual -> linear
// readout with bias over V classes, in float32: the same step as bench/torch_step.py.
//
// Prints one JSON line per workload (median ms per step, achieved GFLOP/s, heap allocations per
// steady-state step) and one with this machine's Eigen GEMM peak at the same thread count.
// kWorkloads below is the one table of the workloads: --list-workloads prints it, and bench/compare.py
// and bench/torch_step.py read it from there.
// bench/compare.py runs it beside PyTorch; run it alone as
//   OMP_NUM_THREADS=1 build/bench/step_bench [--workloads W1,W3] [--seconds 2]
#include <algorithm>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "alloc_counter.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/autograd/small_gemm.hpp"
#include "tapegrad/core/parallel.hpp"
#include "timing.hpp"
#include "lesson/toy_model.hpp"
#include "tapegrad/train/optimizer.hpp"

using namespace tapegrad;
using bench::Clock;

namespace {

struct Workload {
  std::string name;
  Index B, T, d, H, V;
  // Matmul FLOPs of one step: 3x the forward GEMMs (backward is two GEMMs per forward one).
  double flops() const {
    const double b = static_cast<double>(B), t = static_cast<double>(T), dd = static_cast<double>(d),
                 v = static_cast<double>(V);
    return 3 * (8 * b * t * dd * dd + 4 * b * t * t * dd + 2 * b * t * dd * v);
  }
};

const std::vector<Workload> kWorkloads = {
    {"W1", 32, 8, 16, 1, 16}, {"W2", 16, 32, 64, 4, 32}, {"W3", 8, 128, 128, 4, 64}, {"W4", 4, 256, 256, 8, 256}};

// Eigen's single-precision GEMM on 1024 x 1024 matrices: the best this machine does with these
// threads, the yardstick for the step's GFLOP/s. Median of 10 products after 2 for warm-up.
double gemm_peak_gflops() {
  const Index n = 1024;
  RowMatrix<float> a = RowMatrix<float>::Random(n, n), b = RowMatrix<float>::Random(n, n), c(n, n);
  return 2.0 * static_cast<double>(n * n * n) / bench::gemm_seconds(a, b, c, 10, 1, 2) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times one training step of the benchmark model (see bench/compare.py)"};
  std::vector<std::string> all_names;
  for (const auto& w : kWorkloads) all_names.push_back(w.name);
  std::vector<std::string> names = all_names;
  double seconds = 2.0;
  std::size_t max_steps = 5000;
  bool skip_peak = false, list = false;
  app.add_option("--max-steps", max_steps, "At most this many timed steps per workload")->capture_default_str();
  app.add_flag("--no-peak", skip_peak, "Do not measure the GEMM peak (for profiling the step alone)");
  app.add_flag("--list-workloads", list, "Print each workload's name and B, T, d, H, V as a JSON line, and exit");
  app.add_option("--workloads", names, "Workloads to run")->delimiter(',')->check(CLI::IsMember(all_names));
  app.add_option("--seconds", seconds, "Time to spend timing each workload")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (list) {
    for (const auto& w : kWorkloads)
      fmt::print("{{\"kind\": \"workload\", \"workload\": \"{}\", \"B\": {}, \"T\": {}, \"d\": {}, \"H\": {}, \"V\": {}}}\n",
                 w.name, w.B, w.T, w.d, w.H, w.V);
    return 0;
  }

  const int threads = num_threads();
  if (!skip_peak)
    fmt::print("{{\"kind\": \"peak\", \"threads\": {}, \"gemm_gflops\": {:.1f}, \"small_products\": \"{}\"}}\n", threads,
               gemm_peak_gflops(), detail::have_small_gemm() ? "libxsmm" : "eigen");
  for (const auto& w : kWorkloads) {
    if (std::find(names.begin(), names.end(), w.name) == names.end()) continue;
    lesson::ModelConfig config{.vocab = w.V, .labels = w.V, .max_len = w.T, .features = lesson::FeatureKind::learned, .d_embed = w.d,
                       .positions = PositionEncoding::learned, .attention = AttentionMode::learnable, .heads = w.H,
                       .output_projection = true, .residual = true, .seed = 1};
    lesson::ToyModel<float> model(config);
    SGD<float> sgd(model.parameters(), {.lr = 0.01});
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
    auto step = [&] {
      sgd.zero_grad();
      tape.reset();
      Var<float> loss = model.loss(tape, batch).loss;
      tape.backward(loss);
      sgd.step();
      return loss.value()[0];
    };
    for (int i = 0; i < 5; ++i) step();  // sizes every buffer
    std::vector<double> times;
    times.reserve(max_steps + 1);  // the timing must not allocate while allocations are counted
    const long before = test::allocation_count();
    const auto start = Clock::now();
    while (times.size() < 10 || (bench::seconds_since(start) < seconds && times.size() < max_steps)) {
      const auto t0 = Clock::now();
      step();
      times.push_back(bench::seconds_since(t0) * 1e3);  // ms
    }
    const double allocations = static_cast<double>(test::allocation_count() - before) / static_cast<double>(times.size());
    const double ms = bench::median(times);
    fmt::print("{{\"kind\": \"step\", \"workload\": \"{}\", \"threads\": {}, \"median_ms\": {:.5f}, \"steps\": {}, "
               "\"gflops\": {:.2f}, \"allocations_per_step\": {}}}\n",
               w.name, threads, ms, times.size(), w.flops() / (ms * 1e-3) / 1e9, allocations);
  }
  return 0;
}
