#pragma once
// The keys and values of every position a causal model has read, kept per attention layer, so that
// generation feeds only the new tokens: their queries attend to the kept keys, and a token costs O(t) at
// position t instead of a forward of the whole prefix, O(t^2) (autograd/inference.hpp computes the
// values without a tape). A step feeds one token, or several at once (a prompt: their products are
// then one matrix product each). Any model built from the library's layers steps the same way:
//
//   KvCache<float> cache(stack.size(), max_len);          // one AttentionCache per block
//   Tensor x = positions.infer(embed.infer(tokens), cache.length());  // (N, D): the tokens at their positions
//   Tensor logits = head.infer(stack.step(x, cache));    // (N, V); every block appended N keys and values
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

  // Appends the keys and values of N positions, (N, H dk) and (N, H dv). UsageError when they do not fit,
  // ShapeError when the two have other row counts or other widths than the rows held.
  void append(const TensorT<T>& keys, const TensorT<T>& values);
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
