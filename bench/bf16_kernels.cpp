// What libxsmm 1.17 (tapegrad's kernels) gives for bfloat16 on this CPU, before any bf16 path is built on
// it (issue 59): for the block products tapegrad's GEMM runs (64 x 64 over k), libxsmm's float32 kernel
// beside its bf16-in / float32-out kernel (its A operand packed in pairs along k, as libxsmm asks), one
// thread, operands in cache; and the bf16 kernel's largest error against a double product of the same
// bf16-rounded values (the accumulation is float32, so that error is float32 rounding, not bf16's).
//
//   OMP_NUM_THREADS=1 taskset -c 1 build/bench/bf16_kernels
//
// A CPU without AVX-512 gets no bf16 kernel from libxsmm ("none"); one with AVX-512 and not AVX512_BF16
// gets an emulation. A build without libxsmm says so and exits. What it printed on a Zen 3 and on a Xeon with
// AMX: docs/performance.md, "PyTorch's bfloat16 autocast there".
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <Eigen/Core>  // Eigen::bfloat16: float to bf16 rounded to nearest, and back, as the library reads BF16

#include "timing.hpp"

#ifdef TAPEGRAD_HAVE_LIBXSMM
#include <libxsmm.h>

namespace {

using Eigen::bfloat16;
using tapegrad::bench::median_seconds;
static_assert(sizeof(bfloat16) == sizeof(libxsmm_bfloat16));  // its 16 bits, as libxsmm reads them

// One block shape, column-major as libxsmm sees it: C (m x n) += A (m x k) B (k x n).
void block(int m, int n, int k) {
  const auto size = [](int rows, int cols) { return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols); };
  std::vector<float> a(size(m, k)), b(size(k, n)), c(size(m, n));
  std::uint32_t seed = 1;
  auto uniform = [&] { return static_cast<float>((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.f - 0.5f; };
  std::generate(a.begin(), a.end(), uniform);
  std::generate(b.begin(), b.end(), uniform);
  // bf16 operands: A in libxsmm's VNNI layout (element (i, p) at (p / 2) 2m + 2i + p % 2), B as it is.
  std::vector<bfloat16> a16(a.size()), b16(b.begin(), b.end());
  for (int p = 0; p < k; ++p)
    for (int i = 0; i < m; ++i) a16[(p / 2) * 2 * m + 2 * i + p % 2] = bfloat16(a[p * m + i]);
  const auto* a_bits = reinterpret_cast<const libxsmm_bfloat16*>(a16.data());
  const auto* b_bits = reinterpret_cast<const libxsmm_bfloat16*>(b16.data());

  const float one = 1;
  const int vnni = LIBXSMM_GEMM_FLAG_VNNI_A, none = LIBXSMM_GEMM_FLAG_NONE;
  const auto f32 = libxsmm_smmdispatch(m, n, k, nullptr, nullptr, nullptr, &one, &one, &none, nullptr);
  const auto bf16 = libxsmm_bsmmdispatch(m, n, k, nullptr, nullptr, nullptr, &one, &one, &vnni, nullptr);
  const double flops = 2.0 * m * n * k;
  auto gflops = [&](auto&& call) { return flops / median_seconds(5, 20000, call, 1000) / 1e9; };
  const double f32_rate = f32 ? gflops([&] { f32(a.data(), b.data(), c.data()); }) : 0;
  std::string bf16_text = "none";
  if (bf16) {
    std::vector<float> out(c.size(), 0.f);
    bf16(a_bits, b_bits, out.data());
    double worst = 0;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double ref = 0;
        for (int p = 0; p < k; ++p) ref += double(float(bfloat16(a[p * m + i]))) * float(b16[j * k + p]);
        worst = std::max(worst, std::abs(ref - out[j * m + i]));
      }
    const double rate = gflops([&] { bf16(a_bits, b_bits, c.data()); });
    bf16_text = fmt::format("{:.1f} GFLOP/s{}, largest error {:.1e}", rate,
                            f32 ? fmt::format(" ({:.2f}x float32's)", rate / f32_rate) : "", worst);
  }
  fmt::print("{} x {} x {}: float32 {}, bf16 {}\n", m, n, k, f32 ? fmt::format("{:.1f} GFLOP/s", f32_rate) : "none",
             bf16_text);
}

}  // namespace
#endif

int main(int argc, char** argv) {
  if (tapegrad::bench::refused_arguments("bf16_kernels", argc, argv)) return 2;
#ifndef TAPEGRAD_HAVE_LIBXSMM
  fmt::print("bf16_kernels: this build has no libxsmm (libxsmm-dev, TAPEGRAD_LIBXSMM=ON), so nothing to measure\n");
#else
  libxsmm_init();
  fmt::print("libxsmm {}, kernels for {}\n", LIBXSMM_VERSION, libxsmm_get_target_arch());
  for (const int k : {256, 64}) block(64, 64, k);
  block(32, 64, 256);
  libxsmm_finalize();
#endif
}
