#pragma once
// A straggle on demand, for the tests of the pool's back-off (core/parallel.hpp, detail::BackOff): a split
// of two threads in which a worker's piece sleeps, as a thread the scheduler parks does, three times as
// long as it took to start plus 30 ms, while the caller's pieces wait only until the worker has started.
// The caller then waits far longer for the worker's piece than any piece of its own took.

#include <atomic>
#include <chrono>
#include <thread>

#include "tapegrad/core/parallel.hpp"

namespace tapegrad::test {

// Whether one split straggled (parallel_straggles() rose by one). Call with two threads and the back-off
// on. Waits out a back-off already running first (its splits run on the caller alone, where no worker
// would come); a worker that has not come within 2 s (a machine loaded past use) makes it return false.
inline bool cause_straggle() {
  using Clock = std::chrono::steady_clock;
  std::this_thread::sleep_until(detail::parallel_back_off().until + std::chrono::milliseconds(1));
  const std::uint64_t before = parallel_straggles();
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> worker_started{false};
  const auto start = Clock::now();
  parallel_for(Index{8}, 2, [&](Index, Index) {
    if (std::this_thread::get_id() == caller) {
      while (!worker_started.load(std::memory_order_acquire) && Clock::now() - start < std::chrono::seconds(2))
        std::this_thread::yield();
      return;
    }
    if (worker_started.exchange(true, std::memory_order_acq_rel)) return;  // its first piece only
    std::this_thread::sleep_for(3 * (Clock::now() - start) + std::chrono::milliseconds(30));
  });
  return parallel_straggles() == before + 1;
}

}  // namespace tapegrad::test
