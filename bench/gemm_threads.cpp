// Where does a second thread start to pay for a matrix product? Times Eigen's single-precision GEMM
// (row-major, as tapegrad stores matrices) at one thread and at num_threads() threads, over products
// from 2^18 to 2^26 multiply-adds in the shapes the toy model and the benchmark workloads use, and
// prints the ratio. tapegrad runs products below kMinParallelProduct (core/parallel.hpp) on one thread;
// this is the measurement behind that constant.
//
//   OMP_NUM_THREADS=2 build/bench/gemm_threads
#include <algorithm>
#include <array>
#include <vector>

#include <fmt/format.h>

#include "tapegrad/core/parallel.hpp"
#include "tapegrad/core/tensor.hpp"
#include "timing.hpp"

using namespace tapegrad;

namespace {

// Median time of one c = a b over 15 samples, in microseconds, with Eigen free to use every thread it
// is given; each sample times enough products for about 2e7 multiply-adds.
double product_us(const RowMatrix<float>& a, const RowMatrix<float>& b, RowMatrix<float>& c) {
  const double flop = static_cast<double>(a.rows() * a.cols() * b.cols());
  const int rounds = std::max(1, static_cast<int>(2e7 / flop));
  return bench::gemm_seconds(a, b, c, 15, rounds) * 1e6;
}

}  // namespace

int main() {
  const int threads = num_threads();
  if (threads < 2) {
    fmt::print("gemm_threads: one thread available ({}); set OMP_NUM_THREADS=2 to compare\n",
               have_openmp() ? "OMP_NUM_THREADS or the CPU count" : "built without OpenMP");
    return 0;
  }
  // m x k times k x n
  const std::vector<std::array<Index, 3>> shapes = {
      {64, 64, 64},   {256, 33, 33},   {128, 128, 128},  {512, 64, 64},   {256, 256, 32},  {256, 32, 256},
      {256, 128, 128}, {512, 128, 128}, {2048, 64, 64},  {1024, 128, 128}, {1024, 256, 256}};
  fmt::print("Eigen sgemm, median of 15, {} threads against 1 (below 1: the threads win)\n", threads);
  fmt::print("{:>6} {:>6} {:>6} {:>12} {:>10} {:>10} {:>7}  tapegrad uses\n", "m", "k", "n", "m*n*k", "1 thr us",
             fmt::format("{} thr us", threads), "ratio");
  for (const auto& [m, k, n] : shapes) {
    const RowMatrix<float> a = RowMatrix<float>::Random(m, k), b = RowMatrix<float>::Random(k, n);
    RowMatrix<float> c(m, n);
    set_num_threads(1);
    const double one = product_us(a, b, c);
    set_num_threads(threads);
    const double many = product_us(a, b, c);
    const double work = static_cast<double>(m * n * k);
    fmt::print("{:>6} {:>6} {:>6} {:>12} {:>10.2f} {:>10.2f} {:>7.2f}  {}\n", m, k, n, m * n * k, one, many,
               many / one, work < kMinParallelProduct ? "1 thread" : fmt::format("{} threads", threads));
  }
  return 0;
}
