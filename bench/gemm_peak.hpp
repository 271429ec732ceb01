// The GEMM peak, shared by the benchmarks that measure against it (step_bench, step_products).
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/autograd/parameter.hpp"
#include "timing.hpp"

namespace tapegrad::bench {

// The GEMM peak, the yardstick for the step's GFLOP/s: the fastest of Eigen's single-precision GEMM on
// 1024 x 1024 matrices and tapegrad's own matmul (its kernels, autograd/gemm.hpp) on square matrices
// of 256, 512 and 1024, with the threads this process has. Each is the median of 10 products after 2
// for warm-up. Eigen's alone was the yardstick until tapegrad's products ran faster than it: a bound
// that the step can beat is no bound.
struct GemmPeak {
  double eigen_1024 = 0;
  std::vector<std::pair<Index, double>> tapegrad;  // (n, GFLOP/s) of an n x n x n matmul
  double best() const {
    double b = eigen_1024;
    for (const auto& [n, g] : tapegrad) b = std::max(b, g);
    return b;
  }
};

inline GemmPeak gemm_peak() {
  GemmPeak peak;
  auto gflops = [](Index n, double seconds) { return 2.0 * static_cast<double>(n * n * n) / seconds / 1e9; };
  {
    const Index n = 1024;
    RowMatrix<float> a = RowMatrix<float>::Random(n, n), b = RowMatrix<float>::Random(n, n), c(n, n);
    peak.eigen_1024 = gflops(n, gemm_seconds(a, b, c, 10, 1, 2));
  }
  Tape<float> tape;
  NoGradGuard<float> no_grad(tape);
  for (const Index n : {256, 512, 1024}) {
    Parameter<float> a("a", Tensor(Shape::mat(n, n), 0.5f)), b("b", Tensor(Shape::mat(n, n), 0.25f));
    const double seconds = median_seconds(10, 1, [&] {
      tape.reset();
      matmul(tape.param(a), tape.param(b));
    }, 2);
    peak.tapegrad.emplace_back(n, gflops(n, seconds));
  }
  return peak;
}

}  // namespace tapegrad::bench
