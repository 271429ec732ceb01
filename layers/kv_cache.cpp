#include "tapegrad/layers/kv_cache.hpp"

#include <algorithm>

namespace tapegrad {

template <class T>
void AttentionCache<T>::append(const TensorT<T>& keys, const TensorT<T>& values) {
  if (keys.rank() < 2 || values.rank() < 2 || keys.shape().flat_rows() != values.shape().flat_rows() ||
      (keys.rank() == 3 && keys.batch() != 1) || (values.rank() == 3 && values.batch() != 1))
    fail<ShapeError>(
        "attention_cache: the keys are {} and the values {}; they must be rows of as many positions "
        "of one sequence",
        keys.shape(), values.shape());
  if (length_ > 0 && (keys.cols() != keys_.cols() || values.cols() != values_.cols()))
    fail<ShapeError>("attention_cache: the keys are {} and the values {} but the cache holds rows of {} and {}",
                     keys.shape(), values.shape(), keys_.cols(), values_.cols());
  const Index n = keys.shape().flat_rows();
  if (n > capacity_ - length_)
    fail<UsageError>(
        "attention_cache: {} more {} not fit: it holds {} of {} (the longest sequence it was made for); "
        "clear it and feed a shorter window",
        n, n == 1 ? "position does" : "positions do", length_, capacity_);
  for (auto [from, to] : {std::pair(&keys, &keys_), std::pair(&values, &values_)}) {
    if (to->capacity() < static_cast<std::size_t>(capacity_ * from->cols()))  // the first append: room for all
      to->resize(Shape::batched(1, capacity_, from->cols()));
    // Within the capacity a resize moves nothing: what a recording read in place stays where it was.
    to->resize(Shape::batched(1, length_ + n, from->cols()));
    std::copy_n(from->data(), from->numel(), to->data() + length_ * from->cols());
  }
  length_ += n;
}

template <class T>
void AttentionCache<T>::clear() {
  length_ = 0;
  for (TensorT<T>* held : {&keys_, &values_})  // (1, 0, width), their buffers kept
    if (held->rank() == 3) held->resize(Shape::batched(1, 0, held->cols()));
}

template <class T>
Index KvCache<T>::length() const {
  Index fewest = layers_.empty() ? 0 : capacity_;  // no layer holds more than the capacity
  for (const auto& [owner, l] : layers_) fewest = std::min(fewest, l->length());
  return fewest;
}

template <class T>
AttentionCache<T>& KvCache<T>::of(const void* layer) {
  for (auto& [owner, cache] : layers_)
    if (owner == layer) return *cache;
  return *layers_.emplace_back(layer, std::make_unique<AttentionCache<T>>(capacity_)).second;
}

template <class T>
const AttentionCache<T>& KvCache<T>::layer(Index i) const {
  if (i < 0 || i >= layers())
    fail<ValueError>("kv_cache: layer {} asked of a cache that {} layer{} used", i, layers(),
                     layers() == 1 ? " has" : "s have");
  return *layers_[static_cast<std::size_t>(i)].second;
}

template class AttentionCache<float>;
template class AttentionCache<double>;
template class KvCache<float>;
template class KvCache<double>;

}  // namespace tapegrad
