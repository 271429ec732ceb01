// What waking a sleeping thread costs, by how long it has slept: the pool's idle workers sleep in
// std::atomic::wait (a futex on Linux), and a split whose worker sleeps pays for the call that wakes it and
// then waits for the worker to come (core/parallel.cpp, kSpin). One thread keeps
// its core busy for `asleep` microseconds (a worker's caller is busy with the step), then wakes the other
// and times its own call and the time until the other runs; 101 times a length, medians and the 10th
// and 90th percentiles. On a virtual machine the cost steps up where the host stops polling for the idle
// virtual CPU's next work and deschedules it (KVM: `halt_poll_ns`, 200 us by default); on a machine of its
// own, where a core's idle state deepens.
//
//   build/bench/wake_latency
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "timing.hpp"

using Clock = std::chrono::steady_clock;

namespace {
double percentile(std::vector<double> v, double p) {
  const auto at = v.begin() + static_cast<std::ptrdiff_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), at, v.end());
  return *at;
}
}  // namespace

int main(int argc, char** argv) {
  if (tapegrad::bench::refused_arguments("wake_latency", argc, argv, "")) return 2;
  std::atomic<unsigned> bell{0};
  std::atomic<Clock::rep> woke{0};
  constexpr unsigned kStop = ~0u;
  std::thread sleeper([&] {
    for (unsigned seen = 0;;) {
      bell.wait(seen, std::memory_order_acquire);
      seen = bell.load(std::memory_order_acquire);
      if (seen == kStop) return;
      woke.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
    }
  });
  fmt::print("asleep_us  wake_call_us (p10 median p90)  until_it_runs_us (p10 median p90)\n");
  for (const int asleep : {20, 60, 100, 150, 200, 300, 600, 1000}) {
    std::vector<double> call, runs;
    for (int i = 0; i < 101; ++i) {
      const auto busy = Clock::now();
      while (Clock::now() - busy < std::chrono::microseconds(asleep)) {
      }
      const auto start = Clock::now();
      bell.fetch_add(1, std::memory_order_release);
      bell.notify_all();
      const auto called = Clock::now();
      while (woke.load(std::memory_order_acquire) < start.time_since_epoch().count()) {
      }
      call.push_back(std::chrono::duration<double, std::micro>(called - start).count());
      runs.push_back(std::chrono::duration<double, std::micro>(
                         Clock::duration(woke.load(std::memory_order_acquire)) - start.time_since_epoch())
                         .count());
    }
    fmt::print("{:9}  {:6.1f} {:6.1f} {:6.1f}               {:6.1f} {:6.1f} {:6.1f}\n", asleep, percentile(call, 0.1),
               percentile(call, 0.5), percentile(call, 0.9), percentile(runs, 0.1), percentile(runs, 0.5),
               percentile(runs, 0.9));
  }
  bell.store(kStop, std::memory_order_release);
  bell.notify_all();
  sleeper.join();
}
