// train/program/job_pool: independent jobs on worker threads.
#include <doctest/doctest.h>

#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

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

TEST_CASE("job_pool: a thread the system refuses is a ResourceError naming it, the workers started are joined") {
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool sanitized = true;  // the sanitizers' runtime allocates beside each thread: no room to count on
#elif defined(__has_feature)
  constexpr bool sanitized = __has_feature(address_sanitizer);
#else
  constexpr bool sanitized = false;
#endif
  if (sanitized) return;
  // In a child process whose address space has room for a few threads' stacks and no more: the pool asks
  // for 64 workers, the system refuses one of them. A worker started and not joined would end the child
  // (std::terminate); the child's exit status says which check failed.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    pthread_attr_t attr;
    std::size_t stack = 0;
    if (::pthread_getattr_default_np(&attr) != 0 || ::pthread_attr_getstacksize(&attr, &stack) != 0) ::_exit(9);
    long pages = 0;
    std::FILE* statm = std::fopen("/proc/self/statm", "r");
    if (!statm || std::fscanf(statm, "%ld", &pages) != 1) ::_exit(9);
    std::fclose(statm);
    const rlim_t room = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + 3 * stack;
    const rlimit limit{room, room};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(9);
    try {
      JobPool pool(64);
    } catch (const ResourceError& e) {
      // "JobPool: the system refused worker thread <n> of 64 (<the system's reason>); ask for fewer workers"
      const std::string_view message = e.what(), head = "JobPool: the system refused worker thread ";
      int n = 0;
      const auto [rest, ec] = std::from_chars(message.data() + head.size(), message.data() + message.size(), n);
      const std::string_view tail(rest, static_cast<std::size_t>(message.data() + message.size() - rest));
      const bool named = message.starts_with(head) && ec == std::errc() && tail.starts_with(" of 64 (") &&
                         tail.ends_with("); ask for fewer workers");
      ::_exit(!named ? 1 : n < 2 || n > 64 ? 2 : 0);  // n >= 2: a worker had started, and was joined
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(4);  // 64 threads in the room of 3 stacks
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
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
