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

// Pins the crossover for a test and restores the one before after.
struct PinCrossover {
  ParallelCrossover saved = parallel_crossover();
  PinCrossover(double min_macs, double min_elements) {
    set_parallel_crossover({.min_macs = min_macs, .min_elements = min_elements});
  }
  ~PinCrossover() { set_parallel_crossover(saved); }
  PinCrossover(const PinCrossover&) = delete;
  PinCrossover& operator=(const PinCrossover&) = delete;
};

}  // namespace tapegrad::test
