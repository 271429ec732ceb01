#pragma once
// The keys and values of every position a causal model has read, kept per attention layer, so that
// generation feeds one new token at a time: its query attends to the kept keys, and a step costs O(t)
// at position t instead of a forward of the whole prefix, O(t^2) (autograd/inference.hpp computes the
// values without a tape). Any model built from the library's layers steps the same way:
//
//   KvCache<float> cache(stack.size(), max_len);          // one AttentionCache per block
//   Tensor x = positions.infer(embed.infer(token), cache.length());  // (1, D): the token at its position
//   Tensor logits = head.infer(stack.step(x, cache));    // (1, V); every block appended its key and value
//
// A cache holds at most `capacity` positions (the positions a model was trained on): a step past it is a
// UsageError, and what to do then (slide a window and feed it again) is the sampler's choice
// (layers/generate.hpp).
//
// Legend: L positions held, H heads, dk and dv the widths of a head's keys and values.

#include <vector>

#include "tapegrad/core/tensor.hpp"

namespace tapegrad {

// One attention layer's keys (L, H dk) and values (L, H dv), in buffers of `capacity` rows made by the
// first append.
template <class T>
class AttentionCache {
 public:
  explicit AttentionCache(Index capacity = 0);
  Index length() const { return length_; }
  Index capacity() const { return capacity_; }
  bool full() const { return length_ == capacity_; }
  void clear() { length_ = 0; }  // forgets every position, keeps the buffers

  // Appends one position's key and value, rows (1, H dk) and (1, H dv). UsageError when the cache is full,
  // ShapeError when a row is not one row or its width is not the earlier rows'.
  void append(const TensorT<T>& key, const TensorT<T>& value);
  // (capacity, H dk) and (capacity, H dv): rows 0 .. length-1 are the positions held.
  const TensorT<T>& keys() const { return keys_; }
  const TensorT<T>& values() const { return values_; }

 private:
  Index capacity_;
  Index length_ = 0;
  TensorT<T> keys_, values_;
};

// The caches of a model's attention layers: layer i is the i-th attention layer a step goes through
// (TransformerStack::step uses 0 .. blocks-1).
template <class T>
class KvCache {
 public:
  KvCache(Index layers, Index capacity);  // ValueError unless both are positive
  Index layers() const { return static_cast<Index>(layers_.size()); }
  Index capacity() const { return layers_.front().capacity(); }
  // Positions held: the position of the next token. Layer 0's count (every layer appends once per step).
  Index length() const { return layers_.front().length(); }
  bool full() const { return length() == capacity(); }
  void clear();
  AttentionCache<T>& layer(Index i);  // ValueError naming the index and the count when out of range

 private:
  std::vector<AttentionCache<T>> layers_;
};

extern template class AttentionCache<float>;
extern template class AttentionCache<double>;
extern template class KvCache<float>;
extern template class KvCache<double>;

}  // namespace tapegrad
