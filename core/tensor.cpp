#include "tapegrad/core/tensor.hpp"

namespace tapegrad {

template class TensorT<float>;
template class TensorT<double>;
template class TensorT<std::int32_t>;
template class TensorT<std::uint8_t>;

}  // namespace tapegrad
