// train/program/job_pool: independent jobs on worker threads.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/train/program/job_pool.hpp"
#include "tapegrad/core/parallel.hpp"
#include "helpers.hpp"

using namespace tapegrad;

namespace {

// A small deterministic computation with a product large enough that Eigen would split it over
// threads: C = A B with A, B filled from `seed`, and the gradient of sum(softmax_rows(C)^2 ...).
TensorT<double> some_gradient(std::uint64_t seed) {
  Rng rng(seed);
  const Index n = 192;
  TensorT<double> a(Shape::mat(n, n)), b(Shape::mat(n, n));
  for (Index i = 0; i < a.numel(); ++i) a[i] = rng.normal();
  for (Index i = 0; i < b.numel(); ++i) b[i] = rng.normal();
  Tape<double> tape;
  Parameter<double> pa("a", a);
  Var<double> c = softmax_rows(matmul(tape.param(pa), tape.constant(b)));
  tape.backward(sum(mul(c, c)));
  return pa.grad;
}

}  // namespace

TEST_CASE("job_pool: refuses fewer than one worker") {
  CHECK_THROWS_WITH_AS(JobPool(0), "JobPool: needs at least 1 worker, got 0", ValueError);
  CHECK(available_cores() >= 1);
}

TEST_CASE("job_pool: every job runs once and its future holds its own result") {
  JobPool pool(2);
  CHECK(pool.workers() == 2);
  std::atomic<int> runs = 0;
  std::vector<std::future<int>> results;
  for (int i = 0; i < 100; ++i)
    results.push_back(pool.submit([i, &runs] {
      ++runs;
      return i * i;
    }));
  for (int i = 0; i < 100; ++i) CHECK(results[static_cast<std::size_t>(i)].get() == i * i);
  CHECK(runs == 100);
}

TEST_CASE("job_pool: a job's exception reaches its future and the pool goes on") {
  JobPool pool(2);
  auto bad = pool.submit([]() -> int { fail<ValueError>("job: bad input"); });
  auto good = pool.submit([] { return 7; });
  CHECK_THROWS_WITH_AS(bad.get(), "job: bad input", ValueError);
  CHECK(good.get() == 7);
}

TEST_CASE("job_pool: jobs run on one thread each and compute what one thread computes") {
  std::vector<TensorT<double>> expected;
  {
    const SingleThreaded one;
    for (std::uint64_t seed = 0; seed < 4; ++seed) expected.push_back(some_gradient(seed));
  }
  JobPool pool(2);
  auto threads = pool.submit([] { return num_threads(); });
  std::vector<std::future<TensorT<double>>> got;
  for (std::uint64_t seed = 0; seed < 4; ++seed) got.push_back(pool.submit([seed] { return some_gradient(seed); }));
  CHECK(threads.get() == 1);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const TensorT<double> g = got[i].get();
    INFO("seed " << i);
    REQUIRE(g.numel() == expected[i].numel());
    bool same = true;
    for (Index j = 0; j < g.numel(); ++j) same = same && g[j] == expected[i][j];
    CHECK(same);
  }
}

TEST_CASE("job_pool: destroying the pool drops the jobs not started, finishes the running one, and does not hang") {
  std::atomic<bool> started = false, release = false;
  auto pool = std::make_unique<JobPool>(1);
  std::future<int> running = pool->submit([&] {
    started = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return 1;
  });
  std::future<int> waiting = pool->submit([] { return 2; });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::jthread destroyer([&] { pool.reset(); });  // blocks until the running job ends
  // The waiting job's future is ready once the destructor has dropped it, while the first still runs.
  const bool dropped = waiting.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  release = true;
  destroyer.join();
  CHECK(dropped);
  CHECK(running.get() == 1);
  CHECK_THROWS_AS(waiting.get(), std::future_error);
}
