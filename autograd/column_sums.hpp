#pragma once
// Column sums of a gradient, for the ops whose input is a row broadcast over every row of their output (a
// bias in add and affine, layer norm's gamma and beta): one place for the summation, so that ops that
// broadcast a row the same way give the same bits. Internal to autograd/.

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/parallel.hpp"

namespace tapegrad::detail {

// Whether `s` is a row of `width` values, (width) or (1, width): what these ops broadcast over every row.
inline bool is_row_of(const Shape& s, Index width) {
  return s.rank <= 2 && s.batch == 1 && s.rows == 1 && s.cols == width;
}

// The pieces of write_column_sums (below), for an op that sums several gradients over the same rows in one
// pass (layer norm's gamma and beta): body(first, last) for ranges of 16 columns over the threads, as many as
// `passes` reads of the (rows x cols) values are worth; and the sums of columns [first, last) of `rows`
// written into grad's.
template <class F>
void for_column_ranges(Index rows, Index cols, double passes, F&& body) {
  parallel_for(cols, threads_for_elements(passes * static_cast<double>(rows) * static_cast<double>(cols)), body, 16);
}
template <class T, class Rows>
void write_column_sums_of(const GradWrite<T>& grad, const Rows& rows, Index first, Index last) {
  grad.add(grad.tensor->flat().row(0).array().segment(first, last - first),
           rows.middleCols(first, last - first).colwise().sum());
}

// grad, one row of values, += the column sums of `rows` (an array expression, one row per output row). A
// large pass is split in ranges of 16 columns over the threads (it would otherwise be a serial part of
// every step): each column is summed by one thread over the rows in the order one thread takes, and Eigen's
// packets start on the same columns (a multiple of 16 from the row's 64-byte aligned start), so the sums
// have the same bits at any thread count.
template <class T, class Rows>
void write_column_sums(const GradWrite<T>& grad, const Rows& rows) {
  for_column_ranges(rows.rows(), rows.cols(), 1,
                    [&](Index first, Index last) { write_column_sums_of(grad, rows, first, last); });
}

}  // namespace tapegrad::detail
