// core/: Shape and TensorT.
#include <doctest/doctest.h>

#include "tapegrad/core/tensor.hpp"

using namespace tapegrad;

TEST_CASE("shape: ranks print as the error messages show them") {
  CHECK(Shape::vec(8).str() == "8");
  CHECK(Shape::mat(4, 8).str() == "4x8");
  CHECK(Shape::batched(2, 4, 8).str() == "2x4x8");
  CHECK(fmt::format("{}", Shape::mat(3, 5)) == "3x5");
  CHECK(Shape::batched(2, 4, 8).numel() == 64);
  CHECK(Shape::batched(2, 4, 8).flat_rows() == 8);
  CHECK(Shape::vec(8) != Shape::mat(1, 8));
}

TEST_CASE("tensor: row-major layout, batch slices and the flat view") {
  Tensor t(Shape::batched(2, 2, 3), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(t.at(0, 1, 2) == 5);
  CHECK(t.at(1, 0, 1) == 7);
  CHECK(t.mat(1)(1, 0) == 9);  // batch item 1, row 1, col 0
  CHECK(t.flat().rows() == 4);
  CHECK(t.flat()(3, 2) == 11);
  t.mat(0)(0, 0) = 42;  // maps write through
  CHECK(t[0] == 42);
  CHECK(t.array().sum() == doctest::Approx(42 + 66));
}

TEST_CASE("tensor: resize keeps the buffer, so same-shape steps do not allocate") {
  TensorD t(Shape::mat(16, 16));
  const double* before = t.data();
  t.resize(Shape::mat(4, 4));
  t.resize(Shape::mat(16, 16));
  CHECK(t.data() == before);
  CHECK(t.capacity() >= 256);
}

TEST_CASE("tensor: a value count that does not match the shape is an error naming both") {
  CHECK_THROWS_WITH_AS(Tensor(Shape::mat(2, 3), {1, 2, 3}), "tensor: 3 values given for shape 2x3 (6 elements)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(Tensor(Shape{2, 3, 2, 2}), "tensor: invalid shape (rank 2, batch 3, rows 2, cols 2)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(Tensor(Shape{4, 1, 2, 2}), "tensor: invalid shape (rank 4, batch 1, rows 2, cols 2)",
                       ShapeError);
  // An element count beyond Index: refused, not overflowed.
  CHECK_FALSE(Shape::batched(Index(1) << 30, Index(1) << 30, Index(1) << 30).valid());
  CHECK(Shape::batched(Index(1) << 20, Index(1) << 20, Index(1) << 20).valid());
  CHECK_THROWS_AS(Tensor(Shape::mat(Index(1) << 40, Index(1) << 40)), ShapeError);
}

TEST_CASE("tensor: cast between element types and finiteness") {
  TensorD d(Shape::vec(3), {1.5, -2.25, 3.0});
  Tensor f = d.cast<float>();
  CHECK(f.shape() == d.shape());
  CHECK(f[1] == -2.25f);
  CHECK(all_finite(f));
  f[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(all_finite(f));
  f[2] = std::numeric_limits<float>::infinity();
  CHECK_FALSE(all_finite(f));
}

TEST_CASE("tensor: a moved-from tensor is empty, so resizing it to its old shape gives it a buffer again") {
  Tensor a(Shape::mat(2, 3), 1.5f);
  Tensor b(std::move(a));
  CHECK(b.shape() == Shape::mat(2, 3));
  CHECK(a.shape() == Shape::mat(0, 0));  // NOLINT(bugprone-use-after-move): what is tested
  CHECK(a.numel() == 0);
  a.resize(Shape::mat(2, 3));  // the old shape: must not be taken for "already this shape"
  REQUIRE(a.span().size() == 6);
  a[5] = 2;
  Tensor c;
  c = std::move(b);
  CHECK(c == Tensor(Shape::mat(2, 3), 1.5f));
  CHECK(b.shape() == Shape::mat(0, 0));  // NOLINT(bugprone-use-after-move)
  CHECK(b.span().empty());
  Tensor& same = c;
  c = std::move(same);  // self-move keeps the tensor whole
  CHECK(c == Tensor(Shape::mat(2, 3), 1.5f));
}
