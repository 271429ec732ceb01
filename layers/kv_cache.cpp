#include "tapegrad/layers/kv_cache.hpp"

#include <algorithm>

namespace tapegrad {

template <class T>
AttentionCache<T>::AttentionCache(Index capacity) : capacity_(capacity) {
  if (capacity < 0) fail<ValueError>("attention_cache: capacity must be >= 0, got {}", capacity);
}

template <class T>
void AttentionCache<T>::append(const TensorT<T>& key, const TensorT<T>& value) {
  if (full())
    fail<UsageError>("attention_cache: full at {} positions (the longest sequence it was made for); clear it and feed "
                     "a shorter window",
                     capacity_);
  if (key.rank() != 2 || key.rows() != 1 || value.rank() != 2 || value.rows() != 1)
    fail<ShapeError>("attention_cache: the key is {} and the value {}; each must be one row", key.shape(), value.shape());
  if (length_ > 0 && (key.cols() != keys_.cols() || value.cols() != values_.cols()))
    fail<ShapeError>("attention_cache: the key is {} and the value {} but the cache holds rows of {} and {}", key.shape(),
                     value.shape(), keys_.cols(), values_.cols());
  keys_.resize(Shape::mat(capacity_, key.cols()));  // allocates once: the same shape ever after
  values_.resize(Shape::mat(capacity_, value.cols()));
  std::copy_n(key.data(), key.cols(), keys_.data() + length_ * key.cols());
  std::copy_n(value.data(), value.cols(), values_.data() + length_ * value.cols());
  ++length_;
}

template <class T>
KvCache<T>::KvCache(Index layers, Index capacity) {
  if (layers < 1 || capacity < 1)
    fail<ValueError>("kv_cache: layers and capacity must be positive, got {} and {}", layers, capacity);
  layers_.assign(static_cast<std::size_t>(layers), AttentionCache<T>(capacity));
}

template <class T>
void KvCache<T>::clear() {
  for (auto& l : layers_) l.clear();
}

template <class T>
AttentionCache<T>& KvCache<T>::layer(Index i) {
  if (i < 0 || i >= layers())
    fail<ValueError>("kv_cache: layer {} asked of a cache of {} layer{}", i, layers(), layers() == 1 ? "" : "s");
  return layers_[static_cast<std::size_t>(i)];
}

template class AttentionCache<float>;
template class AttentionCache<double>;
template class KvCache<float>;
template class KvCache<double>;

}  // namespace tapegrad
