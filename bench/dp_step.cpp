// Data-parallel training steps of the benchmark workloads (bench/workloads.hpp; W4 and W5 by default),
// timed through the library's Trainer, the all-reduce of the gradients timed apart inside the step. Run
// under mpirun, each process is a rank (MPI, when built with it); run alone, it is the one-process loop:
//
//   OMP_NUM_THREADS=2 build/bench/dp_step                                              # 1 process x 2 threads
//   OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 build/bench/dp_step  # 2 ranks x 1 thread
//
// The step is the Trainer's: the next global batch from the sampler (this rank's shard of it), forward,
// cross-entropy on every position, backward, the all-reduce of one fused buffer (ranks > 1), SGD. Prints,
// from rank 0, one JSON line per workload: median ms per step, median ms of the step's all-reduce and its
// share of the step, bytes reduced per step, heap allocations (operator new) per steady-state step.
#include <algorithm>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "command_line.hpp"
#include "alloc_counter.hpp"
#include "tapegrad/core/parallel.hpp"
#include "tapegrad/train/trainer.hpp"
#include "timing.hpp"
#include "workloads.hpp"
#ifdef TAPEGRAD_HAVE_MPI
#include "tapegrad/train/mpi/mpi_collective.hpp"
#endif

using namespace tapegrad;
using bench::Clock;

namespace {

// A collective that times the gradients' all-reduce (the float one: one per step) of the one it wraps.
class TimedCollective final : public Collective {
 public:
  explicit TimedCollective(Collective& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce_sum(std::span<float> data) override {
    const auto start = Clock::now();
    inner_.all_reduce_sum(data);
    last_ms = bench::seconds_since(start) * 1e3;
    bytes = static_cast<double>(data.size_bytes());
  }
  void all_reduce_sum(std::span<double> data) override { inner_.all_reduce_sum(data); }
  void broadcast(std::span<std::byte> data, int root) override { inner_.broadcast(data, root); }
  void all_gather(std::span<const std::uint32_t> mine, std::span<std::uint32_t> all) override { inner_.all_gather(mine, all); }
  void barrier() override { inner_.barrier(); }

  double last_ms = 0;  // of the last float all-reduce
  double bytes = 0;

 private:
  Collective& inner_;
};

// 8 global batches of random tokens with a random label at every position, as step_bench's batch.
Dataset random_sequences(const Workload& w) {
  Dataset d;
  d.name = w.name;
  for (Index v = 0; v < w.V; ++v) {
    d.tokens.add(fmt::format("t{}", v));
    d.labels.add(fmt::format("l{}", v));
  }
  Rng rng(2);
  for (Index i = 0; i < 8 * w.B; ++i) {
    Example e;
    for (Index t = 0; t < w.T; ++t) {
      e.tokens.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(w.V))));
      e.labels.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(w.V))));
    }
    d.examples.push_back(std::move(e));
  }
  return d;
}

// Times trainer.step() (after 5 untimed steps) for `seconds` and prints rank 0's JSON line. Every rank
// takes the same number of steps (rank 0 decides when to stop, once a step).
void time_steps(const Workload& w, TrainerBase& trainer, TimedCollective* timed, double seconds) {
  for (int i = 0; i < 5; ++i) trainer.step();
  std::vector<double> step_ms, reduce_ms;
  step_ms.reserve(100000);
  reduce_ms.reserve(100000);
  const long before = test::allocation_count();
  const auto start = Clock::now();
  for (;;) {
    double go = bench::seconds_since(start) < seconds || step_ms.size() < 10 ? 1 : 0;
    if (timed) timed->all_reduce_sum(std::span<double>(&go, 1));  // rank 0's clock decides for all
    if (go < static_cast<double>(timed ? timed->size() : 1)) break;
    const auto t0 = Clock::now();
    trainer.step();
    step_ms.push_back(bench::seconds_since(t0) * 1e3);
    reduce_ms.push_back(timed ? timed->last_ms : 0);
  }
  const double allocations = static_cast<double>(test::allocation_count() - before) / static_cast<double>(step_ms.size());
  if (timed && timed->rank() != 0) return;
  const double ms = bench::median(step_ms), reduce = bench::median(reduce_ms);
  fmt::print("{{\"kind\": \"dp_step\", \"workload\": \"{}\", \"ranks\": {}, \"threads\": {}, \"median_ms\": {:.3f}, "
             "\"allreduce_ms\": {:.3f}, \"allreduce_share\": {:.3f}, \"bytes_per_step\": {:.0f}, \"steps\": {}, "
             "\"allocations_per_step\": {}, \"params\": {}}}\n",
             w.name, timed ? timed->size() : 1, num_threads(), ms, reduce, reduce / ms, timed ? timed->bytes : 0.0,
             step_ms.size(), allocations, trainer.model().count_parameters());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times data-parallel training steps of the benchmark workloads (run under mpirun for ranks)"};
  std::vector<std::string> all_names, names = {"W4", "W5"};
  for (const auto& w : kWorkloads) all_names.push_back(w.name);
  double seconds = 3.0;
  app.add_option("--workloads", names, "Workloads to run")->delimiter(',')->check(CLI::IsMember(all_names))->capture_default_str();
  app.add_option("--seconds", seconds, "Time to spend timing each workload")->capture_default_str();
  if (const auto stop = examples::parse_command_line(app, "dp_step", argc, argv)) return *stop;

  std::unique_ptr<TimedCollective> timed;
#ifdef TAPEGRAD_HAVE_MPI
  std::unique_ptr<MpiCollective> world;
  if (started_by_mpi_launcher()) {
    world = std::make_unique<MpiCollective>(&argc, &argv);
    timed = std::make_unique<TimedCollective>(*world);
  }
#endif
  for (const auto& w : kWorkloads) {
    if (std::find(names.begin(), names.end(), w.name) == names.end()) continue;
    const Dataset data = random_sequences(w);
    const SequenceSource source(data, w.T);
    const TrainOptions options{.steps = 1 << 30, .batch = w.B, .eval_every = 1 << 30};
    auto bench_model = [&](Module<float>& model, auto loss) {
      SGD<float> sgd(model.parameters(), {.lr = 0.01});
      Trainer trainer(model, sgd, source, loss, options);
      trainer.set_collective(timed.get());
      time_steps(w, trainer, timed.get(), seconds);
    };
    if (w.model == "stack") {
      StackModel model(w);
      bench_model(model, [&](Tape<float>& tape, const SequenceBatch& b) { return StepOutput<float>(model.loss(tape, b)); });
    } else {
      lesson::ToyModel<float> model(attention_config(w));
      bench_model(model, [&](Tape<float>& tape, const SequenceBatch& b) { return model.loss(tape, b); });
    }
  }
  return 0;
}
