// Timing helpers shared by the benchmarks: the median of samples, the median time of a call, and the
// median time of one Eigen single-precision GEMM.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tapegrad/core/escape.hpp"
#include "tapegrad/core/tensor.hpp"

namespace tapegrad::bench {

using Clock = std::chrono::steady_clock;

// The middle sample (the upper of the two middle ones for an even count); `samples` is taken by value
// because nth_element reorders it.
inline double median(std::vector<double> samples) {
  const auto middle = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2);
  std::nth_element(samples.begin(), middle, samples.end());
  return *middle;
}

// Seconds from `start` to now.
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Median over `repeats` samples of the time per call of f in seconds, each sample timing `rounds`
// calls in a row, after `warmup` untimed calls.
template <class F>
double median_seconds(int repeats, int rounds, F&& f, int warmup = 0) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(repeats));
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < rounds; ++i) f();
    samples.push_back(seconds_since(start) / rounds);
  }
  return median(std::move(samples));
}

// Median seconds of one c = a b in Eigen's sgemm, with every thread Eigen is given; see median_seconds.
inline double gemm_seconds(const RowMatrix<float>& a, const RowMatrix<float>& b, RowMatrix<float>& c, int repeats,
                           int rounds, int warmup = 0) {
  return median_seconds(repeats, rounds, [&] { c.noalias() = a * b; }, warmup);
}

// For a benchmark without a command line: an argument is refused (one line naming it, and the caller exits
// 2), not taken as leave to run the whole benchmark. True when it refused. `env`: what its usage line sets.
inline bool refused_arguments(std::string_view name, int argc, char** argv,
                              std::string_view env = "OMP_NUM_THREADS=1 ") {
  if (argc <= 1) return false;
  fmt::print(stderr, "{}: takes no arguments, got '{}'\nusage: {}{}\n", name, escaped(argv[1]), env, escaped(argv[0]));
  return true;
}

}  // namespace tapegrad::bench
