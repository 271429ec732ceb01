// core/parallel: thread settings, and the products that use them.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/parallel.hpp"
#include "helpers.hpp"

using namespace tapegrad;

namespace {

// Restores the thread count a test changes.
struct RestoreThreads {
  int saved = num_threads();
  ~RestoreThreads() { set_num_threads(saved); }
};

// a (m x k) times b (k x n) through the tape, and the gradient of sum(a b) with respect to a.
std::pair<TensorT<double>, TensorT<double>> product_and_grad(const TensorT<double>& a, const TensorT<double>& b) {
  Tape<double> tape;
  Parameter<double> pa("a", a);
  Var<double> c = matmul(tape.param(pa), tape.constant(b));
  tape.backward(sum(c));
  return {c.value(), pa.grad};
}

}  // namespace

TEST_CASE("parallel: set_num_threads refuses fewer than one thread") {
  CHECK_THROWS_WITH_AS(set_num_threads(0), "set_num_threads: needs at least 1 thread, got 0", ValueError);
}

TEST_CASE("parallel: SingleThreaded keeps the calling thread's regions on one thread, then restores the count") {
  if (!have_openmp()) {
    CHECK(num_threads() == 1);
    return;
  }
  RestoreThreads restore;
  set_num_threads(2);
  {
    const SingleThreaded one;
    CHECK(num_threads() == 1);
  }
  CHECK(num_threads() == 2);
  {
    const SingleThreaded not_now(false);
    CHECK(num_threads() == 2);
  }
}

TEST_CASE("parallel: products small and large give the same values and gradients on 1 and 2 threads") {
  RestoreThreads restore;
  Rng rng(17);
  // 32 x 32 x 32 runs on one thread whatever the setting; 512 x 128 x 128 (2^23 multiply-adds) is
  // split over the threads when there are several.
  for (const auto& mkn : {std::array<Index, 3>{32, 32, 32}, std::array<Index, 3>{512, 128, 128}}) {
    const Index m = mkn[0], k = mkn[1], n = mkn[2];  // not a structured binding: clang 14 cannot CAPTURE one
    CAPTURE(m);
    const auto a = test::random_tensor(Shape::mat(m, k), rng), b = test::random_tensor(Shape::mat(k, n), rng);
    set_num_threads(1);
    const auto [c1, g1] = product_and_grad(a, b);
    set_num_threads(2);
    const auto [c2, g2] = product_and_grad(a, b);
    CHECK_TENSOR_NEAR(c2, c1, 1e-12, 1e-12);
    CHECK_TENSOR_NEAR(g2, g1, 1e-12, 1e-12);
    // and both against a plain triple loop, element by element
    double worst = 0;
    for (Index i = 0; i < m; ++i)
      for (Index j = 0; j < n; ++j) {
        double s = 0;
        for (Index p = 0; p < k; ++p) s += a.at(i, p) * b.at(p, j);
        worst = std::max(worst, std::abs(c2.at(i, j) - s));
      }
    CHECK(worst < 1e-11);
  }
}
