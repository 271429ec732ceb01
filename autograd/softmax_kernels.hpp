#pragma once
// Row-wise softmax over a block of rows, forward and backward: the arithmetic of softmax_rows
// (ops_softmax.cpp) and of the attention op (ops_attention.cpp), in one place, so that the two compute
// every element the same way. Internal to autograd/.

#include <cstdint>

#include "tapegrad/core/shape.hpp"

namespace tapegrad::detail {

// y = softmax(scale x) along each row of x (rows x cols, contiguous; y may be x). With a mask (nonzero =
// blocked), row r's entries are at mask + (r % mask_period) * cols: blocked entries get exactly 0, a fully
// blocked row all zeros, and a NaN or Inf among a row's open entries makes that row's open outputs NaN.
// Rows may be split over threads when it pays and `may_split`.
template <class T>
void softmax_forward(const T* x, T* y, Index rows, Index cols, T scale, const std::uint8_t* mask, Index mask_period,
                     bool may_split);

// dx = scale y (dy - sum(dy y)) along each row (assign), or dx += that; dx may be dy.
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, Index rows, Index cols, T scale, bool assign, bool may_split);

}  // namespace tapegrad::detail
