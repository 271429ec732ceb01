// Data-parallel training over MPI (train/collective.hpp, train/mpi/mpi_collective.hpp). ctest runs each
// TEST_CASE as its own test under mpirun with 2 ranks (tests/CMakeLists.txt): every case runs on every
// rank, in the same order, and checks what its rank sees. The one-process reference runs on each rank
// too, without the collective: the single-process loop, exactly as a program without --data-parallel.
//
// Tolerance of "the same curve as one process": kCurveTolerance (relative, on every curve value) and
// kWeightTolerance (on every parameter) below. The ranks sum w_r g_r in float32 (MPI_Allreduce) where
// one process's backward sums the whole batch at once: the same terms added in another order, so the
// results differ in the last bits and those differences are carried through the steps (Adam divides by
// the root of the squared gradient's mean, which amplifies them most where that mean is small); the
// evaluation sums are split the same way. Each case prints the largest difference it measured (about
// 4e-8 on the curve, 1e-6 on the weights, on the development machine).
#define DOCTEST_CONFIG_IMPLEMENT
#include "run_cases.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>

#include "alloc_counter.hpp"
#include "helpers.hpp"
#include "lesson/tasks.hpp"
#include "lesson/toy_run.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/crc32.hpp"
#include "tapegrad/train/mpi/mpi_collective.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "user_models.hpp"

using namespace tapegrad;
using namespace tapegrad::lesson;
namespace fs = std::filesystem;

namespace {

MpiCollective* world = nullptr;
constexpr double kCurveTolerance = 1e-5;   // relative, every value of the curve
constexpr double kWeightTolerance = 1e-4;  // see parameter_difference

const TaskSplit& cycle_data() {
  static const TaskSplit split = [] {
    const auto task = make_task("cycle");
    return make_task_split(*task, 600, 0, 200, 1);
  }();
  return split;
}

ToyRunConfig toy_config(Index batch, Index steps = 60, double dropout = 0) {
  const auto task = make_task("cycle");
  ModelConfig model{.vocab = task->tokens().size(), .labels = task->labels().size(), .max_len = task->length(),
                    .heads = dropout > 0 ? 3 : 1, .seed = 3};
  if (dropout > 0) {
    model.layers = 2;
    model.mlp = true;
    model.layernorm = true;
    model.dropout = dropout;
  }
  return {.model = model, .training = {.steps = steps, .batch = batch, .eval_every = 10, .eval_batch = 64, .seed = 7}};
}

// Largest relative difference |a - b| / max(|b|, 1e-3) over every value of every curve point (NaN where
// both are NaN: the first point's training loss).
double curve_difference(const std::vector<CurvePoint>& a, const std::vector<CurvePoint>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].step == b[i].step);
    REQUIRE(a[i].values.size() == b[i].values.size());
    for (std::size_t k = 0; k < a[i].values.size(); ++k) {
      const double x = a[i].values[k].value, y = b[i].values[k].value;
      if (std::isnan(x) && std::isnan(y)) continue;
      worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), 1e-3));
    }
  }
  return worst;
}

// Largest |a - b| / max(|b|, 1) over every weight: relative for large weights, absolute for small ones,
// whose relative difference says nothing (Adam moves a weight whose gradient is about 0 by up to lr
// either way, depending on the gradient's last bits).
double parameter_difference(Module<float>& a, Module<float>& b) {
  double worst = 0;
  const auto pa = a.parameters(), pb = b.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i)
    for (Index j = 0; j < pa[i]->value.numel(); ++j)
      worst = std::max(worst, std::abs(static_cast<double>(pa[i]->value[j]) - pb[i]->value[j]) /
                                  std::max(std::abs(static_cast<double>(pb[i]->value[j])), 1.0));
  return worst;
}

std::uint32_t weights_crc(Module<float>& m) {
  Crc32 crc;
  for (const auto* p : m.parameters()) crc.add(p->value.data(), static_cast<std::size_t>(p->value.numel()) * sizeof(float));
  return crc.value();
}

// Every rank's value of x.
std::vector<std::uint32_t> gathered(std::uint32_t x) {
  std::vector<std::uint32_t> all(static_cast<std::size_t>(world->size()));
  world->all_gather(std::span<const std::uint32_t>(&x, 1), all);
  return all;
}

// A folder every rank sees: rank 0's scratch folder, named by its pid.
fs::path shared_dir(std::string_view name) {
  std::int64_t pid = ::getpid();
  world->broadcast(std::as_writable_bytes(std::span(&pid, 1)), 0);
  const fs::path dir = fs::temp_directory_path() / fmt::format("tapegrad_mpi_test_{}_{}", name, pid);
  if (world->rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  world->barrier();
  return dir;
}

// Trains with every rank's collective, and the same run in one process on this rank alone; checks that
// the curves and weights agree within kCurveTolerance.
void check_against_one_process(const ToyRunConfig& config) {
  const TaskSplit& data = cycle_data();
  ToyRun parallel(config, data.train, &data.test), single(config, data.train, &data.test);
  parallel.trainer().set_collective(world);
  parallel.trainer().run();
  single.trainer().run();
  const double curve = curve_difference(parallel.trainer().curve(), single.trainer().curve());
  const double weights = parameter_difference(parallel.model(), single.model());
  MESSAGE(fmt::format("rank {}: batch {} over {} ranks: curve differs by at most {:.3g} (relative), weights by {:.3g}",
                      world->rank(), config.training.batch, world->size(), curve, weights));
  CHECK(curve <= kCurveTolerance);
  CHECK(weights <= kWeightTolerance);
  CHECK(parallel.trainer().steps_done() == config.training.steps);
  // The global batch order is the one process's: the samplers end in the same state.
  CHECK(parallel.trainer().state().data_order.cursor == single.trainer().state().data_order.cursor);
  CHECK(parallel.trainer().state().data_order.order == single.trainer().state().data_order.order);
  const auto crcs = gathered(weights_crc(parallel.model()));
  CHECK(std::all_of(crcs.begin(), crcs.end(), [&](std::uint32_t c) { return c == crcs[0]; }));
}

}  // namespace

TEST_CASE("data-parallel: the ranks follow the one-process loss curve, and end with identical parameters") {
  check_against_one_process(toy_config(32));
}

TEST_CASE("data-parallel: uneven shards (a batch of 33) still give the global batch's mean") {
  check_against_one_process(toy_config(33));
}

TEST_CASE("data-parallel: a rank whose shard is empty (a batch of 1) adds nothing and no NaN") {
  check_against_one_process(toy_config(1, 30));
}

TEST_CASE("data-parallel: the replicas are compared every check_every steps and a divergence names the step and rank") {
  const TaskSplit& data = cycle_data();
  ToyRun run(toy_config(32), data.train, &data.test);
  run.trainer().set_collective(world, {.check_every = 5});
  for (int i = 0; i < 3; ++i) run.trainer().step();
  if (world->rank() == 1) run.model().parameters()[0]->value[0] += 1e-3f;  // one replica drifts
  run.trainer().step();  // step 4: not yet compared
  CHECK_THROWS_WITH_AS(run.trainer().step(),
                       doctest::Contains("data-parallel: after step 5 the parameters of rank 1 differ from rank 0's"),
                       DivergenceError);
}

TEST_CASE("data-parallel: ranks started with another configuration are refused, naming the rank and what differs") {
  const TaskSplit& data = cycle_data();
  ToyRunConfig config = toy_config(32);
  if (world->rank() == 1) config.training.seed = 8;
  ToyRun run(config, data.train, &data.test);
  run.trainer().set_collective(world);
  CHECK_THROWS_WITH_AS(run.trainer().run(),
                       doctest::Contains("data-parallel: the ranks were started with different training options: rank 1 differs "
                                         "from rank 0"),
                       ValueError);
  CHECK(run.trainer().steps_done() == 0);

  ToyRunConfig other = toy_config(32);
  if (world->rank() == 1) other.model.heads = 3;  // another shape of the same parameters
  ToyRun run2(other, data.train, &data.test);
  run2.trainer().set_collective(world);
  CHECK_THROWS_WITH_AS(run2.trainer().step(), doctest::Contains("different model: rank 1 differs from rank 0"), ValueError);

  // What a rank has is shown escaped and bounded: here metric names with a terminal's control bytes, and
  // on rank 1 more than 300 bytes of them, a two-byte character across the cut.
  ToyRun run3(toy_config(32), data.train, &data.test);
  const auto none = [](const Tensor&, const SequenceBatch&) { return Tally{}; };
  run3.trainer().add_metric(world->rank() == 1 ? "fit\x1b[2J!" : "fit", none);
  for (int k = 0; k < 6 && world->rank() == 1; ++k) {
    std::string name = std::to_string(k);
    for (int c = 0; c < 30; ++c) name += "\u00e9";
    run3.trainer().add_metric(name, none);
  }
  run3.trainer().set_collective(world);
  const std::string message = test::message_of([&] { run3.trainer().step(); });
  if (world->rank() == 1) {
    CHECK(message.find("different metrics: rank 1 differs from rank 0 (rank 1 has: accuracy, fit\\x1b[2J!, 0\u00e9") !=
          std::string::npos);
    // 396 bytes, cut at 300, inside a two-byte character: that character left out whole, none of it shown.
    CHECK(message.find("\u00e9... (97 more bytes)); rank 0 has: accuracy, fit") != std::string::npos);
  } else {
    CHECK(message.find("different metrics: rank 1 differs from rank 0; rank 0 has: accuracy, fit") != std::string::npos);
  }
}

TEST_CASE("data-parallel: a NaN on one rank stops every rank at the same step, before anything changes") {
  const TensorSource data = test::classification_data(64, 5);
  test::Mlp model({.in = 2, .hidden = 4, .out = 2, .seed = 1});
  SGD<float> opt(model.parameters(), {.lr = 0.1});
  Index calls = 0;
  Trainer trainer(model, opt, data, [&](Tape<float>& t, const TensorBatch& batch) -> StepOutput<float> {
    Var<float> loss = cross_entropy(model.forward(t.constant(batch.features)), batch.labels);
    // Rank 1's third training batch has a NaN (evaluation does not call this: no evaluation data).
    return ++calls == 3 && world->rank() == 1 ? scale(loss, std::numeric_limits<float>::quiet_NaN()) : loss;
  }, {.steps = 10, .batch = 16});
  trainer.set_collective(world);
  trainer.step();
  trainer.step();
  const std::uint32_t before = weights_crc(model);
  CHECK_THROWS_WITH_AS(trainer.step(), doctest::Contains("train: the loss is NaN at step 3"), NonFiniteError);
  CHECK(trainer.steps_done() == 2);
  CHECK(weights_crc(model) == before);
}

TEST_CASE("data-parallel: a checkpoint resumed on as many ranks is bit-identical, dropout included") {
  const TaskSplit& data = cycle_data();
  const ToyRunConfig config = toy_config(32, 60, 0.2);
  ToyRun straight(config, data.train, &data.test);
  straight.trainer().set_collective(world);
  std::optional<Checkpoint> at35;
  straight.trainer().run({.on_step = [&](Index step) {
    if (step == 35) at35 = snapshot(straight.trainer());
  }, .on_evaluation = {}});
  REQUIRE(at35);
  ToyRun resumed(config, data.train, &data.test);
  restore(*at35, resumed.trainer());
  resumed.trainer().set_collective(world);
  resumed.trainer().run();
  CHECK(weights_crc(resumed.model()) == weights_crc(straight.model()));
  CHECK(curve_difference(resumed.trainer().curve(), straight.trainer().curve()) == 0);
}

TEST_CASE("data-parallel: a 2-rank checkpoint resumes in one process and a one-process checkpoint on 2 ranks") {
  const TaskSplit& data = cycle_data();
  const ToyRunConfig config = toy_config(32, 60);
  const fs::path dir = shared_dir("resume");
  // The references: 60 steps on the ranks, and 60 steps in one process.
  ToyRun parallel(config, data.train, &data.test), single(config, data.train, &data.test);
  parallel.trainer().set_collective(world);
  parallel.trainer().run({.on_step = [&](Index step) {
    if (step == 35 && world->rank() == 0) save_checkpoint(dir / "ranks.tgck", snapshot(parallel.trainer()));
  }, .on_evaluation = {}});
  single.trainer().run({.on_step = [&](Index step) {
    if (step == 35 && world->rank() == 0) save_checkpoint(dir / "single.tgck", snapshot(single.trainer()));
  }, .on_evaluation = {}});
  world->barrier();  // rank 0 has written both files

  SUBCASE("the ranks' checkpoint, one process") {
    ToyRun resumed(config, data.train, &data.test);  // no collective: the one-process loop
    restore(read_checkpoint(dir / "ranks.tgck"), resumed.trainer());
    resumed.trainer().run();
    const double difference = curve_difference(resumed.trainer().curve(), parallel.trainer().curve());
    MESSAGE(fmt::format("rank {}: 2 ranks to step 35, then one process: curve within {:.3g} of 2 ranks'", world->rank(), difference));
    CHECK(difference <= kCurveTolerance);
    CHECK(parameter_difference(resumed.model(), single.model()) <= kWeightTolerance);
    CHECK(resumed.trainer().state().data_order.order == single.trainer().state().data_order.order);
    CHECK(resumed.trainer().state().data_order.cursor == single.trainer().state().data_order.cursor);
  }
  SUBCASE("one process's checkpoint, the ranks") {
    ToyRun resumed(config, data.train, &data.test);
    restore(read_checkpoint(dir / "single.tgck"), resumed.trainer());
    resumed.trainer().set_collective(world);
    resumed.trainer().run();
    const double difference = curve_difference(resumed.trainer().curve(), single.trainer().curve());
    MESSAGE(fmt::format("rank {}: one process to step 35, then 2 ranks: curve within {:.3g} of one process's", world->rank(),
                        difference));
    CHECK(difference <= kCurveTolerance);
    CHECK(parameter_difference(resumed.model(), single.model()) <= kWeightTolerance);
    CHECK(resumed.trainer().state().data_order.order == single.trainer().state().data_order.order);
    CHECK(resumed.trainer().state().data_order.cursor == single.trainer().state().data_order.cursor);
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST_CASE("data-parallel: a steady-state step allocates nothing (operator new; MPI's own mallocs are not counted)") {
  const TaskSplit& data = cycle_data();
  ToyRun run(toy_config(32, 100), data.train);
  run.trainer().set_collective(world);
  run.trainer().step();
  run.trainer().step();
  const long before = test::allocation_count();
  for (int i = 0; i < 20; ++i) run.trainer().step();  // no replica check in these steps (every 100)
  CHECK(test::allocation_count() - before == 0);
}

int main(int argc, char** argv) {
  MpiCollective mpi(&argc, &argv);
  world = &mpi;
  doctest::Context context(argc, argv);
  return run_test_cases(context, argc, argv);  // every rank reports its own failures
}
