#pragma once
// Guards for the tests that split work on purpose (core/parallel.hpp): the thread count, and the crossover
// pinned, each restored when the test ends.

#include "tapegrad/core/parallel.hpp"

namespace tapegrad::test {

// Restores the thread count a test changes.
struct RestoreThreads {
  int saved = num_threads();
  ~RestoreThreads() { set_num_threads(saved); }
};

// Pins the crossover for a test and restores the measured one after. Without a back-off by default, and
// without the rule for sleeping workers: a test that counts regions or pieces must not find its splits run
// on one thread because an earlier split waited for a thread the machine's other load had parked
// (detail::BackOff), or because the pool's worker had slept long (ParallelCrossover::wake_us).
struct PinCrossover {
  ParallelCrossover saved = parallel_crossover();
  explicit PinCrossover(double min_macs, double min_elements, bool back_off = false) {
    ParallelCrossover c = saved;
    c.min_macs = min_macs;
    c.min_elements = min_elements;
    c.back_off = back_off;
    c.wake_us = 0;  // the work's size alone decides, not how long a worker has slept
    set_parallel_crossover(c);
  }
  ~PinCrossover() { set_parallel_crossover(saved); }
  PinCrossover(const PinCrossover&) = delete;
  PinCrossover& operator=(const PinCrossover&) = delete;
};

}  // namespace tapegrad::test
