#pragma once
// Shared test helpers: random tensors from the seeded generator, tensor comparison that says where
// two tensors differ, a gradcheck assertion that prints the report when it fails, and scratch folders.
// The tests' doctest has one call an assertion (tests/CMakeLists.txt, tapegrad_doctest): an exception
// thrown inside a CHECK's expression leaves the CHECK and fails the test case, so a CHECK does not sit in a
// try block whose catch expects what the checked call may throw.

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/autograd/gemm.hpp"  // internal: which kernels the products run
#include "tapegrad/autograd/gradcheck.hpp"
#include "tapegrad/core/rng.hpp"
#include "tapegrad/core/tensor.hpp"
#include "tapegrad/train/trainer.hpp"

namespace tapegrad::test {

// A fresh, empty folder for one test: <tmp>/tapegrad_test_<suite>_<name>_<pid> (the pid keeps parallel
// ctest processes apart). Every folder made here is removed when the process exits (ctest runs each test
// case in a process of its own), so the suite leaves the machine as it found it; a test that fails still
// leaves nothing, and one that crashes leaves its folders for a look.
inline std::filesystem::path scratch_dir(std::string_view suite, std::string_view name) {
  struct Made {
    std::vector<std::filesystem::path> dirs;
    ~Made() {
      for (const auto& dir : dirs) {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
      }
    }
  };
  static Made made;
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("tapegrad_test_{}_{}_{}", suite, name, ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  if (std::find(made.dirs.begin(), made.dirs.end(), dir) == made.dirs.end()) made.dirs.push_back(dir);
  return dir;
}

// A file's bytes, and a file made of `bytes` (replaced if it was there).
inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
inline void put(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// How many times `what` occurs in `text`, not overlapping.
inline std::size_t count(std::string_view text, std::string_view what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string_view::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// What f() throws, or "(nothing thrown)": for a check of a whole message that is built at run time.
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

// Puts back the matrix-product kernels in use (autograd/gemm.hpp) when it goes out of scope, also when a
// test case is left by a throw (a failed REQUIRE, or an exception out of a CHECK's expression).
struct RestoreKernels {
  detail::GemmKernels before = detail::gemm_kernels();
  ~RestoreKernels() { detail::set_gemm_kernels(before); }
};

// Runs body() with every kind of matrix-product kernel this build has, each in turn, and restores the
// kernels in use.
template <class F>
void with_each_kernel(F&& body) {
  const RestoreKernels restore;
  std::vector<detail::GemmKernels> kinds{detail::GemmKernels::eigen};
  if (detail::have_libxsmm()) kinds.push_back(detail::GemmKernels::libxsmm);
  for (const detail::GemmKernels kind : kinds) {
    detail::set_gemm_kernels(kind);
    CAPTURE(detail::name(kind));
    body();
  }
}

template <class T = double>
TensorT<T> random_tensor(Shape s, Rng& rng, double scale = 1.0) {
  TensorT<T> t(s);
  for (Index i = 0; i < t.numel(); ++i) t[i] = static_cast<T>(scale * rng.normal());
  return t;
}

// Empty when a and b agree within |a - b| <= atol + rtol |b| everywhere; otherwise a sentence naming
// the first element that does not.
template <class A, class B>
std::string mismatch(const TensorT<A>& a, const TensorT<B>& b, double atol, double rtol) {
  if (a.shape() != b.shape()) return fmt::format("shapes differ: {} vs {}", a.shape(), b.shape());
  for (Index i = 0; i < a.numel(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    if (!(std::abs(x - y) <= atol + rtol * std::abs(y)))
      return fmt::format("element {} of {}: {:.17g} vs expected {:.17g} (diff {:.3g})", i, a.shape(), x, y, x - y);
  }
  return {};
}

// Whether two curves have the same steps, rates and named values, bit for bit (a NaN equals a NaN with
// the same bits; wall-clock seconds are not compared).
inline bool same_curve(const std::vector<CurvePoint>& a, const std::vector<CurvePoint>& b) {
  auto bits = [](double v) { return std::bit_cast<std::uint64_t>(v); };
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].step != b[i].step || bits(a[i].lr) != bits(b[i].lr) || a[i].values.size() != b[i].values.size()) return false;
    for (std::size_t k = 0; k < a[i].values.size(); ++k)
      if (a[i].values[k].name != b[i].values[k].name || bits(a[i].values[k].value) != bits(b[i].values[k].value))
        return false;
  }
  return true;
}

}  // namespace tapegrad::test

// Checks that two tensors agree; on failure prints where they differ.
#define CHECK_TENSOR_NEAR(a, b, atol, rtol)                                  \
  do {                                                                        \
    const std::string tapegrad_mismatch_ = ::tapegrad::test::mismatch((a), (b), (atol), (rtol)); \
    CHECK_MESSAGE(tapegrad_mismatch_.empty(), tapegrad_mismatch_);            \
  } while (0)

// Checks a gradcheck report; on failure prints the whole report (tensor, element, values).
#define CHECK_GRADCHECK(report)                    \
  do {                                             \
    const auto& tapegrad_report_ = (report);       \
    CHECK_MESSAGE(tapegrad_report_.ok(), tapegrad_report_.str()); \
  } while (0)
