// autograd/gemm: the matrix products behind matmul and attention, with both kinds of kernels (libxsmm's,
// where tapegrad is built with it, and Eigen's): accuracy against a rounding-error bound, strided operands,
// how a product is added into a gradient, and Eigen's kernels against Eigen's own product.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tapegrad/autograd/gemm.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/parallel.hpp"
#include "helpers.hpp"

using namespace tapegrad;
using detail::GemmKernels;
using detail::ProductForm;
using test::random_tensor;
using test::RestoreKernels;

namespace {

struct Operands {
  Index m, n, k;
  ProductForm form;
};

// A (stored as the form reads it: m x k, or k x m for a^T b) and B (k x n, or n x k for a b^T).
Shape a_shape(const Operands& o) { return o.form == ProductForm::atb ? Shape::mat(o.k, o.m) : Shape::mat(o.m, o.k); }
Shape b_shape(const Operands& o) { return o.form == ProductForm::abt ? Shape::mat(o.n, o.k) : Shape::mat(o.k, o.n); }

// How far apart A's elements (i, p) and (i + 1, p), and (i, p) and (i, p + 1), lie as the form stores A: the
// steps of its outer index i and of the depth p; the same for B's (p, j), j its outer index. The exact
// product's loop reads by pointer, which costs little at the tests' low optimisation and under the sanitizers.
struct Steps {
  Index outer, depth;
};
Steps a_steps(const Operands& o) { return o.form == ProductForm::atb ? Steps{1, o.m} : Steps{o.k, 1}; }
Steps b_steps(const Operands& o) { return o.form == ProductForm::abt ? Steps{o.k, 1} : Steps{1, o.n}; }

template <class T>
TensorT<T> product(const Operands& o, const TensorT<T>& a, const TensorT<T>& b) {
  TensorT<T> c(Shape::mat(o.m, o.n));
  detail::gemm<T>(o.form, o.m, o.n, o.k, {a.data(), a.cols()}, {b.data(), b.cols()}, c.data(), o.n, false);
  return c;
}

const char* form_name(ProductForm f) { return f == ProductForm::ab ? "a b" : f == ProductForm::atb ? "a^T b" : "a b^T"; }

}  // namespace

TEST_CASE("gemm: every product in every form is within the rounding-error bound of the exact one") {
  // Shapes on and across the blocks of libxsmm's grid (64 rows, 64 columns, 256 of depth) and Eigen's
  // panels. Any summation order of k products in precision u is within gamma_k (|A||B|)_ij of the exact
  // sum, gamma_k = k u / (1 - k u): a wrong element, a missed block or a block summed twice is far outside.
  const SingleThreaded one_thread;
  Rng rng(31);
  const std::vector<Index> sizes = {1, 7, 63, 64, 65, 130, 257};
  const std::vector<Index> depths = {1, 33, 256, 257, 600};
  auto check = [&]<class T>(T) {
    for (const ProductForm form : {ProductForm::ab, ProductForm::atb, ProductForm::abt})
      for (const Index m : sizes)
        for (const Index k : depths) {
          const Index n = sizes[static_cast<std::size_t>(m + k) % sizes.size()];
          const Operands o{m, n, k, form};
          const TensorT<T> a = random_tensor<T>(a_shape(o), rng), b = random_tensor<T>(b_shape(o), rng);
          const TensorT<T> c = product(o, a, b);
          const long double u = std::numeric_limits<T>::epsilon() / 2;
          const long double gamma = static_cast<long double>(k) * u / (1 - static_cast<long double>(k) * u);
          const Steps sa = a_steps(o), sb = b_steps(o);
          Index bad = 0;
          for (Index i = 0; i < m; ++i)
            for (Index j = 0; j < n; ++j) {
              long double exact = 0, magnitude = 0;
              const T* ai = a.data() + i * sa.outer;
              const T* bj = b.data() + j * sb.outer;
              for (Index p = 0; p < k; ++p) {
                const long double x = ai[p * sa.depth], y = bj[p * sb.depth];
                exact += x * y;
                magnitude += std::fabs(x * y);
              }
              bad += std::fabs(static_cast<long double>(c.at(i, j)) - exact) > gamma * magnitude;
            }
          CAPTURE(form_name(form));
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(k);
          CHECK(bad == 0);
        }
  };
  test::with_each_kernel([&] {
    check(float{});
    check(double{});
  });
}

TEST_CASE("gemm: operands and results inside wider matrices give the bits of their contiguous copies") {
  // Attention reads one head's columns of Q, K and V in place: a strided operand must be read as if it
  // were copied out, and a strided result must leave the columns beside it alone.
  const SingleThreaded one_thread;
  Rng rng(32);
  test::with_each_kernel([&] {
    for (const ProductForm form : {ProductForm::ab, ProductForm::atb, ProductForm::abt})
      for (const bool accumulate : {false, true})
        // a grid, op(B) packed (256 rows or more), a grid read in place, one block
        for (const Operands o : {Operands{300, 70, 40, form}, Operands{70, 40, 300, form}, Operands{20, 12, 48, form}}) {
          CAPTURE(o.m);
          const Index pad = 24;  // extra columns on every side of every matrix
          const Tensor a = random_tensor<float>(a_shape(o), rng), b = random_tensor<float>(b_shape(o), rng);
          const Tensor c0 = random_tensor<float>(Shape::mat(o.m, o.n), rng);
          Tensor wide_a(Shape::mat(a.rows(), a.cols() + 2 * pad), 9.f), wide_b(Shape::mat(b.rows(), b.cols() + 2 * pad), 9.f);
          Tensor wide_c(Shape::mat(o.m, o.n + 2 * pad), 7.f);
          wide_a.flat().middleCols(pad, a.cols()) = a.flat();
          wide_b.flat().middleCols(pad, b.cols()) = b.flat();
          wide_c.flat().middleCols(pad, o.n) = c0.flat();
          Tensor c = c0;
          detail::gemm<float>(form, o.m, o.n, o.k, {a.data(), a.cols()}, {b.data(), b.cols()}, c.data(), o.n, accumulate);
          detail::gemm<float>(form, o.m, o.n, o.k, {wide_a.data() + pad, wide_a.cols()}, {wide_b.data() + pad, wide_b.cols()},
                              wide_c.data() + pad, wide_c.cols(), accumulate);
          CAPTURE(form_name(form));
          CAPTURE(accumulate);
          CHECK(wide_c.flat().middleCols(pad, o.n) == c.flat());
          CHECK((wide_c.flat().leftCols(pad).array() == 7.f).all());
          CHECK((wide_c.flat().rightCols(pad).array() == 7.f).all());
        }
  });
}

TEST_CASE("gemm: a depth started where product_depth_start allows, or columns cut where separable, keep the bits") {
  // The attention op skips blocks a mask leaves zero (autograd/ops_attention.cpp): a key block's gradient
  // P^T dO summed from its first query on, the scores of a block of queries over the keys it sees. A
  // first version started at any multiple of 64 and differed in the last bit wherever one of the two
  // products had a depth block under 12 (libxsmm's kernels for such a depth do not sum as a chain): depths
  // 66-75, 130-139 and 258-267 among those swept here.
  const SingleThreaded one_thread;
  Rng rng(35);
  CHECK(detail::product_depth_start(128, 64) == 64);  // W5's causal T = 128: the second key block skips
  test::with_each_kernel([&] {
    for (const Index n : {3, 16, 32})
      for (Index k = 65; k <= 330; k += k < 140 || (k > 190 && k < 280) ? 1 : 7) {
        const Index m = 64;
        Tensor a = random_tensor<float>(Shape::mat(k, m), rng);  // read transposed: column j of op(A) is a's row j
        const Tensor b = random_tensor<float>(Shape::mat(k, n), rng);
        for (Index start = 64; start < k; start += 64) {
          CAPTURE(n);
          CAPTURE(k);
          CAPTURE(start);
          const Index from = detail::product_depth_start(k, start);
          CHECK((from % 64 == 0 && from <= start));
          Tensor zeroed = a;
          zeroed.flat().topRows(start).setZero();
          // As many rows of C as the key block has: under causal attention the last block of keys is as
          // short as the depth left from its first query.
          const Index rows = std::min(m, k - start);
          Tensor whole(Shape::mat(rows, n)), part(Shape::mat(rows, n));
          detail::gemm<float>(ProductForm::atb, rows, n, k, {zeroed.data(), m}, {b.data(), n}, whole.data(), n, false);
          detail::gemm<float>(ProductForm::atb, rows, n, k - from, {zeroed.data() + from * m, m}, {b.data() + from * n, n},
                              part.data(), n, false);
          CHECK(part == whole);
        }
        if (!detail::product_columns_separable()) continue;
        // a b^T over the first c columns only (b's first c rows), c a multiple of 64.
        const Tensor q = random_tensor<float>(Shape::mat(m, n), rng), keys = random_tensor<float>(Shape::mat(k, n), rng);
        Tensor whole(Shape::mat(m, k));
        detail::gemm<float>(ProductForm::abt, m, k, n, {q.data(), n}, {keys.data(), n}, whole.data(), k, false);
        for (Index c = 64; c < k; c += 64) {
          CAPTURE(c);
          Tensor part(Shape::mat(m, k), 0.f);
          detail::gemm<float>(ProductForm::abt, m, c, n, {q.data(), n}, {keys.data(), n}, part.data(), k, false);
          CHECK(part.flat().leftCols(c) == whole.flat().leftCols(c));
        }
      }
  });
}

TEST_CASE("gemm: libxsmm's kernels give a product of many rows, op(B) packed, the bits of its 64-row slices") {
  // From 256 rows, op(B) is packed into column panels before the kernels run; a slice of fewer rows
  // reads it in place. The same kernels do the same arithmetic on both: only the addresses differ.
  if (!detail::have_libxsmm()) return;
  const RestoreKernels kernels;
  detail::set_gemm_kernels(GemmKernels::libxsmm);
  Rng rng(33);
  const auto check = [&]<class T>(T) {
    for (const ProductForm form : {ProductForm::ab, ProductForm::atb, ProductForm::abt})
      for (const Operands o : {Operands{320, 200, 300, form}, Operands{256, 64, 33, form}, Operands{300, 130, 600, form}}) {
        CAPTURE(form_name(form));
        CAPTURE(o.m);
        CAPTURE(o.n);
        CAPTURE(o.k);
        CAPTURE(sizeof(T));
        const TensorT<T> a = random_tensor<T>(a_shape(o), rng), b = random_tensor<T>(b_shape(o), rng);
        const TensorT<T> whole = product(o, a, b);
        TensorT<T> sliced(Shape::mat(o.m, o.n));
        for (Index r0 = 0; r0 < o.m; r0 += 64) {
          const Index rows = std::min<Index>(64, o.m - r0);
          const T* a_rows = form == ProductForm::atb ? a.data() + r0 : a.data() + r0 * a.cols();
          detail::gemm<T>(form, rows, o.n, o.k, {a_rows, a.cols()}, {b.data(), b.cols()}, sliced.data() + r0 * o.n, o.n,
                          false);
        }
        CHECK(whole.flat() == sliced.flat());
      }
  };
  check(0.f);
  check(0.0);
}

TEST_CASE("gemm: a product is added into a gradient whole, so two products sum the same in either order") {
  // C = P1, then C += P2, must equal C = P2, then C += P1, bit for bit: a gradient reached by two backward
  // rules (x used twice) must not depend on which rule ran first. libxsmm's kernels form the product and
  // then add it, at any depth; Eigen's GEMM adds each depth panel's sum, so it holds there for products
  // of one panel (depth <= 256 for these shapes).
  const SingleThreaded one_thread;
  Rng rng(33);
  test::with_each_kernel([&] {
    for (const Index k : {48, 200, 600}) {
      if (k > 256 && detail::gemm_kernels() == GemmKernels::eigen) continue;
      const Operands o{k == 48 ? 30 : 90, k == 48 ? 20 : 70, k, ProductForm::ab};  // k 48: one block of libxsmm's grid
      const Tensor a1 = random_tensor<float>(a_shape(o), rng), b1 = random_tensor<float>(b_shape(o), rng);
      const Tensor a2 = random_tensor<float>(a_shape(o), rng), b2 = random_tensor<float>(b_shape(o), rng);
      auto sum = [&](const Tensor& a, const Tensor& b, const Tensor& x, const Tensor& y) {
        Tensor c(Shape::mat(o.m, o.n));
        detail::gemm<float>(o.form, o.m, o.n, o.k, {a.data(), o.k}, {b.data(), o.n}, c.data(), o.n, false);
        detail::gemm<float>(o.form, o.m, o.n, o.k, {x.data(), o.k}, {y.data(), o.n}, c.data(), o.n, true);
        return c;
      };
      CAPTURE(k);
      const Tensor first = sum(a1, b1, a2, b2), second = sum(a2, b2, a1, b1);
      CHECK(first.flat() == second.flat());
      // and it is the sum of the two products, each rounded once
      const Tensor p1 = product(o, a1, b1), p2 = product(o, a2, b2);
      CHECK(first.flat() == (p1.flat() + p2.flat()));
    }
  });
}

TEST_CASE("gemm: Eigen's kernels on one thread are bit for bit Eigen's own product, in every form") {
  // Without libxsmm, products run Eigen's GEMM with buffers kept from call to call; the blocking is
  // Eigen's, so every bit must be the one `C.noalias() = A * B` gives.
  const SingleThreaded one_thread;
  const RestoreKernels kernels;
  detail::set_gemm_kernels(GemmKernels::eigen);
  Rng rng(77);
  struct Sizes {
    Index m, k, n;
  };
  for (const Sizes sizes : {Sizes{100, 80, 90}, Sizes{257, 129, 65}, Sizes{64, 300, 70}}) {
    const Index m = sizes.m, k = sizes.k, n = sizes.n;  // not a structured binding: clang 14 cannot capture those
    CAPTURE(m);
    CAPTURE(k);
    const Tensor a = random_tensor<float>(Shape::mat(m, k), rng), b = random_tensor<float>(Shape::mat(k, n), rng);
    const Tensor at = random_tensor<float>(Shape::mat(k, m), rng), bt = random_tensor<float>(Shape::mat(n, k), rng);
    Tape<float> t;
    RowMatrix<float> expected(m, n);  // row-major, as a tensor: evaluated straight into it, as ops do
    expected.noalias() = a.flat() * b.flat();
    CHECK(matmul(t.constant(a), t.constant(b)).value().flat() == expected);
    expected.noalias() = at.flat().transpose() * b.flat();
    CHECK(matmul_at(t.constant(at), t.constant(b)).value().flat() == expected);
    expected.noalias() = a.flat() * bt.flat().transpose();
    CHECK(matmul_bt(t.constant(a), t.constant(bt)).value().flat() == expected);
    // and twice in a row (the kept buffers hold the previous product's panels)
    CHECK(matmul_bt(t.constant(a), t.constant(bt)).value().flat() == expected);
  }
}

TEST_CASE("gemm: choosing libxsmm's kernels where there are none is refused") {
  const RestoreKernels kernels;
  if (detail::have_libxsmm()) {
    detail::set_gemm_kernels(GemmKernels::eigen);
    CHECK(detail::gemm_kernels() == GemmKernels::eigen);
    detail::set_gemm_kernels(GemmKernels::libxsmm);
    CHECK(detail::gemm_kernels() == GemmKernels::libxsmm);
  } else {
    CHECK_THROWS_AS(detail::set_gemm_kernels(GemmKernels::libxsmm), ValueError);
    CHECK(detail::gemm_kernels() == GemmKernels::eigen);
  }
}

TEST_CASE("gemm: an empty depth writes zeros (or adds nothing), an empty result writes nothing") {
  test::with_each_kernel([&] {
    for (const ProductForm form : {ProductForm::ab, ProductForm::atb, ProductForm::abt}) {
      CAPTURE(form_name(form));
      const Operands o{5, 3, 0, form};
      const Tensor a(a_shape(o)), b(b_shape(o));
      Tensor c(Shape::mat(5, 3), 7.f);
      detail::gemm<float>(form, 5, 3, 0, {a.data(), a.cols()}, {b.data(), b.cols()}, c.data(), 3, true);
      CHECK((c.array() == 7.f).all());  // += an empty sum
      detail::gemm<float>(form, 5, 3, 0, {a.data(), a.cols()}, {b.data(), b.cols()}, c.data(), 3, false);
      CHECK((c.array() == 0.f).all());  // = an empty sum
      Tensor untouched(Shape::mat(2, 2), 7.f);
      detail::gemm<float>(form, 0, 2, 4, {a.data(), 4}, {b.data(), 2}, untouched.data(), 2, false);
      detail::gemm<float>(form, 2, 0, 4, {a.data(), 4}, {b.data(), 2}, untouched.data(), 2, false);
      CHECK((untouched.array() == 7.f).all());
    }
  });
}
