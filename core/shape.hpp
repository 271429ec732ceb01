#pragma once
// Shapes of tapegrad tensors: rank 1 (cols), rank 2 (rows, cols) or rank 3 (batch, rows, cols).
//
// Dimension legend used across the library:
//   B  batch            T  sequence length (rows: one row per token, as in the notes, Q = X Wq)
//   D  model width      H  heads             V  vocabulary (or label) count

#include <cstddef>
#include <string>

#include <fmt/format.h>

namespace tapegrad {

using Index = std::ptrdiff_t;  // Eigen's index type, so sizes never need a cast into Eigen

struct Shape {
  int rank = 2;
  Index batch = 1;  // 1 unless rank == 3
  Index rows = 0;   // 1 if rank == 1
  Index cols = 0;

  static Shape vec(Index n) { return {1, 1, 1, n}; }
  static Shape mat(Index r, Index c) { return {2, 1, r, c}; }
  static Shape batched(Index b, Index r, Index c) { return {3, b, r, c}; }
  static Shape scalar() { return vec(1); }

  // Whether the fields describe a tensor: rank 1 to 3, no negative size, batch 1 unless rank 3, rows 1
  // if rank 1, and an element count that Index holds (numel() cannot overflow).
  bool valid() const {
    Index n = 0;
    return rank >= 1 && rank <= 3 && batch >= 0 && rows >= 0 && cols >= 0 && (rank == 3 || batch == 1) &&
           (rank != 1 || rows == 1) && !__builtin_mul_overflow(batch, rows, &n) && !__builtin_mul_overflow(n, cols, &n);
  }
  Index numel() const { return batch * rows * cols; }
  // Rows of the (batch * rows) x cols matrix that every tensor can be viewed as.
  Index flat_rows() const { return batch * rows; }
  bool operator==(const Shape&) const = default;

  // "8", "4x8" or "2x4x8": the form every error message uses.
  std::string str() const {
    if (rank == 1) return fmt::format("{}", cols);
    if (rank == 2) return fmt::format("{}x{}", rows, cols);
    return fmt::format("{}x{}x{}", batch, rows, cols);
  }
};

}  // namespace tapegrad

template <>
struct fmt::formatter<tapegrad::Shape> : fmt::formatter<std::string> {
  auto format(const tapegrad::Shape& s, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(s.str(), ctx);
  }
};
