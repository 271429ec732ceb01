#pragma once
// TensorT<T>: a row-major, contiguous block of T with a Shape of rank 1 to 3 ([batch,] rows, cols).
// Eigen does the arithmetic through maps: mat(b) is the rows x cols slice of batch item b, flat()
// is the whole tensor as one (batch * rows) x cols matrix (a batch of token rows times a shared
// weight is then a single matrix product).
//
// Element types: float (training), double (gradient checks, the notes' worked examples),
// std::int32_t (token ids and targets: Ids), std::uint8_t (attention masks: Mask).

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/shape.hpp"

namespace tapegrad {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatrixMap = Eigen::Map<RowMatrix<T>>;
template <class T>
using ConstMatrixMap = Eigen::Map<const RowMatrix<T>>;
template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

namespace detail {
void charge_tensor_bytes(std::size_t bytes);  // to this thread's TensorBudget, if it has one (core/tensor_budget.hpp)
}  // namespace detail

// Every tensor buffer starts on a 64-byte boundary (a cache line, an AVX-512 register). Eigen's
// vectorised kernels peel off unaligned leading elements, so with std::vector's 16-byte alignment the
// grouping of partial sums, and so the last bits of a result, would depend on where the heap put a
// buffer: two identical runs could differ. Aligned buffers make every run bit-identical.
// (Not Eigen::aligned_allocator: it allocates with malloc, which the allocation counter of
// tests/test_alloc.cpp and bench/ cannot see; operator new keeps every tensor allocation counted.)
template <class T>
struct AlignedAllocator {
  using value_type = T;
  static constexpr std::size_t alignment = 64;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    detail::charge_tensor_bytes(n * sizeof(T));  // a TensorBudget refuses before the memory is taken
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignment)));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(alignment)); }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
class TensorT {
 public:
  using Scalar = T;

  TensorT() : shape_(Shape::mat(0, 0)) {}
  explicit TensorT(Shape shape, T fill = T(0)) { resize(shape, fill); }
  TensorT(const TensorT&) = default;
  TensorT& operator=(const TensorT&) = default;
  // A moved-from tensor is empty (0x0): the shape always describes the buffer (resize relies on it).
  TensorT(TensorT&& o) noexcept : shape_(std::exchange(o.shape_, Shape::mat(0, 0))), data_(std::move(o.data_)) {}
  TensorT& operator=(TensorT&& o) noexcept {  // (into itself: each field is taken out, then put back)
    shape_ = std::exchange(o.shape_, Shape::mat(0, 0));
    data_ = std::exchange(o.data_, {});
    return *this;
  }
  // Values in row-major order; their count must match the shape.
  TensorT(Shape shape, std::initializer_list<T> values) : TensorT(shape, std::span<const T>(values)) {}
  TensorT(Shape shape, std::span<const T> values) {
    check_shape(shape);
    if (static_cast<Index>(values.size()) != shape.numel())
      fail<ShapeError>("tensor: {} values given for shape {} ({} elements)", values.size(), shape, shape.numel());
    shape_ = shape;
    data_.assign(values.begin(), values.end());
  }

  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank; }
  Index batch() const { return shape_.batch; }
  Index rows() const { return shape_.rows; }
  Index cols() const { return shape_.cols; }
  Index numel() const { return shape_.numel(); }

  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  std::span<T> span() { return {data_.data(), data_.size()}; }
  std::span<const T> span() const { return {data_.data(), data_.size()}; }

  T& operator[](Index i) { return data_[static_cast<std::size_t>(i)]; }
  const T& operator[](Index i) const { return data_[static_cast<std::size_t>(i)]; }
  T& at(Index b, Index r, Index c) { return data_[offset(b, r, c)]; }
  const T& at(Index b, Index r, Index c) const { return data_[offset(b, r, c)]; }
  T& at(Index r, Index c) { return at(0, r, c); }
  const T& at(Index r, Index c) const { return at(0, r, c); }

  // The rows x cols matrix of batch item b.
  MatrixMap<T> mat(Index b = 0) { return {data() + b * rows() * cols(), rows(), cols()}; }
  ConstMatrixMap<T> mat(Index b = 0) const { return {data() + b * rows() * cols(), rows(), cols()}; }
  // The whole tensor as one (batch * rows) x cols matrix.
  MatrixMap<T> flat() { return {data(), shape_.flat_rows(), cols()}; }
  ConstMatrixMap<T> flat() const { return {data(), shape_.flat_rows(), cols()}; }
  // Every element, for elementwise arithmetic.
  ArrayMap<T> array() { return {data(), numel()}; }
  ConstArrayMap<T> array() const { return {data(), numel()}; }

  // Changes the shape; keeps the buffer's capacity, so a tensor that is resized to the same shape
  // every training step allocates only the first time. New elements are set to `fill`.
  void resize(Shape shape, T fill = T(0)) {
    if (shape == shape_) return;  // the steady state: the buffer already holds shape.numel() elements
    check_shape(shape);
    const auto n = static_cast<std::size_t>(shape.numel());
    // assign() on an empty buffer: GCC 12 reports a false -Warray-bounds for resize() from empty
    // when the size is a compile-time constant (GCC PR 107852).
    if (data_.empty())
      data_.assign(n, fill);
    else
      data_.resize(n, fill);
    shape_ = shape;  // after the buffer, which may throw: a tensor never claims elements it lacks
  }
  void set_zero() { std::fill(data_.begin(), data_.end(), T(0)); }
  void fill(T value) { std::fill(data_.begin(), data_.end(), value); }
  std::size_t capacity() const { return data_.capacity(); }

  template <class U>
  TensorT<U> cast() const {
    TensorT<U> out(shape_);
    for (std::size_t i = 0; i < data_.size(); ++i) out.span()[i] = static_cast<U>(data_[i]);
    return out;
  }

  bool operator==(const TensorT&) const = default;

 private:
  static void check_shape(const Shape& s) {
    if (!s.valid())
      fail<ShapeError>("tensor: invalid shape (rank {}, batch {}, rows {}, cols {})", s.rank, s.batch, s.rows, s.cols);
  }
  std::size_t offset(Index b, Index r, Index c) const {
    return static_cast<std::size_t>((b * rows() + r) * cols() + c);
  }

  Shape shape_;
  std::vector<T, AlignedAllocator<T>> data_;
};

using Tensor = TensorT<float>;
using TensorD = TensorT<double>;
using Ids = TensorT<std::int32_t>;   // token ids or class targets, one per position
using Mask = TensorT<std::uint8_t>;  // attention masks: nonzero = blocked (as PyTorch's bool masks)

extern template class TensorT<float>;
extern template class TensorT<double>;
extern template class TensorT<std::int32_t>;
extern template class TensorT<std::uint8_t>;

// True when every element is finite (no NaN, no Inf).
template <class T>
bool all_finite(const TensorT<T>& t) {
  return t.array().isFinite().all();
}

}  // namespace tapegrad
