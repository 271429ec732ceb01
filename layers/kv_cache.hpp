#pragma once
// The keys and values of every position a causal model has read, kept per attention layer, so that
// generation feeds only the new tokens: their queries attend to the kept keys, and a token costs O(t) at
// position t instead of a forward of the whole prefix, O(t^2). A step feeds one token, or several at once
// (a prompt: their products are then one matrix product each). It is an argument of the layers' own
// forward, run with gradients off, so any model built from the library's layers, or a user's block that
// passes the cache to its SelfAttention, generates through it with no second code path:
//
//   Tape<float> tape;  NoGradGuard<float> off(tape);      // values only, buffers reused after reset()
//   KvCache<float> cache(stack.size(), max_len);          // one AttentionCache per block
//   Var<float> x = positions.forward(embed.forward(tape, tokens), cache.length());  // (1, N, D) at their positions
//   Var<float> logits = head.forward(stack.forward(x, nullptr, &cache));  // (1, N, V); every block appended N keys
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
  void clear();  // forgets every position, keeps the buffers

  // Appends the keys and values of N positions, (N, H dk) and (N, H dv) (or (1, N, ...): one sequence's).
  // UsageError when they do not fit, ShapeError when the two have other row counts or other widths than
  // the rows held.
  void append(const TensorT<T>& keys, const TensorT<T>& values);
  // (1, L, H dk) and (1, L, H dv): the positions held, as one sequence, in buffers of `capacity` rows (an
  // append within the capacity never moves them).
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
