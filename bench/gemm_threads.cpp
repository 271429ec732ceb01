// Where does a second thread start to pay for a matrix product? Times tapegrad's matmul (recorded on a
// tape, gradients off) at one thread and at num_threads() threads, over products from 2^18 to 2^28
// multiply-adds in the shapes the toy model and the benchmark workloads use, and prints the ratio beside
// whether tapegrad's policy (core/parallel.hpp) splits the product. Splitting changes speed only: the
// products are bit-identical at any thread count. Where tapegrad runs libxsmm's kernels, it also times
// Eigen's (autograd/gemm.hpp) at one thread, and prints the two kernels' ratio. "cold" is the one-thread time when each product reads one of 16 sets of operands
// in turn, so that they come from L3 or memory as a training step's do, not from the core's caches.
//
//   OMP_NUM_THREADS=2 build/bench/gemm_threads
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/parallel.hpp"
#include "tapegrad/autograd/gemm.hpp"  // internal: which kernels
#include "timing.hpp"

using namespace tapegrad;

int main(int argc, char** argv) {
  if (bench::refused_arguments("gemm_threads", argc, argv, "OMP_NUM_THREADS=2 ")) return 2;
  const int threads = num_threads();
  if (threads < 2) {
    fmt::print("gemm_threads: one thread available ({}); set OMP_NUM_THREADS=2 to compare\n",
               have_openmp() ? "OMP_NUM_THREADS or the CPU count" : "built without OpenMP");
    return 0;
  }
  fmt::print("tapegrad splits a product from {:.0f} multiply-adds on two threads (core/parallel.hpp, kMinMacs), one "
             "more thread for each further half of it\n",
             parallel_crossover().min_macs);
  // m x k times k x n
  const std::vector<std::array<Index, 3>> shapes = {
      {64, 64, 64},    {256, 33, 33},   {128, 128, 128}, {512, 64, 64},     {256, 256, 32},    {256, 32, 256},
      {256, 128, 128}, {512, 128, 128}, {2048, 64, 64},  {1024, 128, 128}, {1024, 256, 256}, {1024, 256, 1024}};
  const bool compare_kernels = detail::gemm_kernels() == detail::GemmKernels::libxsmm;
  fmt::print("tapegrad matmul (float) with {}'s kernels, median of 15, {} threads against 1 (below 1: the threads win){}\n",
             detail::name(detail::gemm_kernels()), threads,
             compare_kernels ? "; Eigen's kernels at 1 thread, and libxsmm's time over theirs" : "");
  fmt::print("{:>6} {:>6} {:>6} {:>12} {:>10} {:>10} {:>10} {:>7}{}  tapegrad splits\n", "m", "k", "n", "m*n*k", "1 thr us",
             "cold us", fmt::format("{} thr us", threads), "ratio",
             compare_kernels ? fmt::format(" {:>10} {:>7}", "Eigen us", "ratio") : "");
  Tape<float> tape;
  NoGradGuard<float> no_grad(tape);
  for (const auto& shape : shapes) {
    const Index m = shape[0], k = shape[1], n = shape[2];
    const double work = static_cast<double>(m * n * k);
    const int rounds = std::max(1, static_cast<int>(2e7 / work));
    // The product of operand set `next`, then the next of the first `sets` sets: set 0 again and again
    // (operands in cache), or each of kSets in turn (operands from L3 or memory: "cold").
    constexpr int kSets = 16;
    std::vector<Parameter<float>> as, bs;
    for (int i = 0; i < kSets; ++i) {
      as.emplace_back("a", Tensor(Shape::mat(m, k), 0.5f));
      bs.emplace_back("b", Tensor(Shape::mat(k, n), 0.25f));
    }
    int sets = 1, next = 0;
    auto product = [&] {
      tape.reset();
      matmul(tape.param(as[next]), tape.param(bs[next]));
      next = (next + 1) % sets;
    };
    set_num_threads(1);
    const double one = bench::median_seconds(15, rounds, product, 1) * 1e6;
    sets = kSets;
    const double cold = bench::median_seconds(15, std::max(rounds, kSets), product, kSets) * 1e6;
    sets = 1;
    next = 0;
    std::string kernels;
    if (compare_kernels) {
      detail::set_gemm_kernels(detail::GemmKernels::eigen);
      const double eigen = bench::median_seconds(15, rounds, product, 1) * 1e6;
      detail::set_gemm_kernels(detail::GemmKernels::libxsmm);
      kernels = fmt::format(" {:>10.2f} {:>7.2f}", eigen, one / eigen);
    }
    set_num_threads(threads);
    const double many = bench::median_seconds(15, rounds, product, 1) * 1e6;
    // Whether it split, as counted, not as predicted from the shape (the rules for rows and tiles are the
    // library's): the regions one more product starts, its panels' copy included.
    const std::uint64_t regions = parallel_regions_started();
    product();
    const std::uint64_t started = parallel_regions_started() - regions;
    fmt::print("{:>6} {:>6} {:>6} {:>12} {:>10.2f} {:>10.2f} {:>10.2f} {:>7.2f}{}  {}\n", m, k, n, m * n * k, one, cold,
               many, many / one, kernels, started == 0 ? std::string("no") : fmt::format("yes ({} region{})", started, started == 1 ? "" : "s"));
  }
  return 0;
}
