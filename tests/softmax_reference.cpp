// The reference that ops: softmax_rows skips a row's blocked tail (test_ops.cpp) compares with the library bit
// for bit, in a file of its own so that it is compiled at the library's optimisation level, not the tests'
// (tests/CMakeLists.txt): GCC fuses k x - top into one multiply-add from -O2 on, as in the library's -O3 copy of
// the same expression, and not at the tests' level.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad::test {

// The exponentials of the whole row in one Eigen pass, the blocked ones set to 0, the whole row's sum, a
// division.
template <class T>
TensorT<T> whole_row_softmax(const TensorT<T>& x, const Mask& mask, T k) {
  TensorT<T> y(x.shape());
  for (Index r = 0; r < x.shape().flat_rows(); ++r) {
    const T* xr = x.data() + r * x.cols();
    const std::uint8_t* blocked = mask.data() + (r % mask.rows()) * x.cols();
    ArrayMap<T> Y(y.data() + r * x.cols(), x.cols());
    T top = -std::numeric_limits<T>::infinity();
    for (Index c = 0; c < x.cols(); ++c)
      if (!blocked[c]) top = std::max(top, k * xr[c]);
    if (top == -std::numeric_limits<T>::infinity()) {
      Y.setZero();
      continue;
    }
    Y = (k * ConstArrayMap<T>(xr, x.cols()) - top).exp();
    for (Index c = 0; c < x.cols(); ++c)
      if (blocked[c]) Y[c] = 0;
    Y /= Y.sum();
  }
  return y;
}

template Tensor whole_row_softmax(const Tensor&, const Mask&, float);
template TensorD whole_row_softmax(const TensorD&, const Mask&, double);

}  // namespace tapegrad::test
