#pragma once
// The keys and values of every position a causal model has read, kept per attention layer, so that
// generation feeds only the new tokens: their queries attend to the kept keys, and a token costs O(t) at
// position t instead of a forward of the whole prefix, O(t^2). A step feeds one token, or several at once
// (a prompt: their products are then one matrix product each). It is an argument of the layers' own
// forward, run with gradients off, passed down unchanged (nullptr when not generating): each SelfAttention
// keeps its keys and values in the cache's entry for that layer, made when it first appends, so any model
// built from the library's layers, or a user's block that passes the cache on to its SelfAttention,
// generates through it with no second code path and no list of layers to keep:
//
//   Tape<float> tape;  NoGradGuard<float> off(tape);      // values only, buffers reused after reset()
//   KvCache<float> cache(max_len);                        // an AttentionCache per attention layer, as they come
//   Var<float> x = positions.forward(embed.forward(tape, tokens), &cache);  // (1, N, D) at positions length() on
//   Var<float> logits = head.forward(stack.forward(x, nullptr, &cache));  // (1, N, V); every layer appended N keys
//
// A cache holds at most `capacity` positions (the positions a model was trained on): a step past it is a
// UsageError, and what to do then (slide a window and feed it again) is the sampler's choice
// (layers/generate.hpp).
//
// Legend: L positions held, H heads, dk and dv the widths of a head's keys and values.

#include <memory>
#include <utility>
#include <vector>

#include "tapegrad/core/tensor.hpp"

namespace tapegrad {

// One attention layer's keys (L, H dk) and values (L, H dv), in buffers of `capacity` rows made by the
// first append.
template <class T>
class AttentionCache {
 public:
  explicit AttentionCache(Index capacity = 0) : capacity_(capacity) {
    if (capacity < 0) fail<ValueError>("attention_cache: capacity must be >= 0, got {}", capacity);
  }
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

// The caches of a model's attention layers, one per layer, keyed by the layer (its address): a layer's is
// made the first time it appends, so the cache needs no count of layers and a model no list of them.
template <class T>
class KvCache {
 public:
  // capacity: the most positions a layer holds; ValueError unless positive
  explicit KvCache(Index capacity) : capacity_(capacity) {
    if (capacity < 1) fail<ValueError>("kv_cache: capacity must be positive, got {}", capacity);
  }
  Index capacity() const { return capacity_; }
  Index layers() const { return static_cast<Index>(layers_.size()); }  // the layers that have appended
  // Positions held: the position of the next token fed. The fewest any layer holds (0 before a layer has
  // appended), so during a step, until every layer has appended, the count before the step.
  Index length() const;
  bool full() const { return length() == capacity(); }
  void clear() {  // every layer's positions; keeps the layers and their buffers
    for (auto& [owner, l] : layers_) l->clear();
  }
  // The cache of the attention layer at `layer` (SelfAttention passes `this`), made on first use.
  AttentionCache<T>& of(const void* layer);
  // The i-th layer's cache, in the order the layers first appended; ValueError naming i and the count.
  const AttentionCache<T>& layer(Index i) const;

 private:
  Index capacity_;
  // Each layer's cache (after the layer it is for) at a fixed address: a step reads the keys and values in
  // place (Tape::constant_in_place) while later layers are still being added.
  std::vector<std::pair<const void*, std::unique_ptr<AttentionCache<T>>>> layers_;
};

extern template class AttentionCache<float>;
extern template class AttentionCache<double>;
extern template class KvCache<float>;
extern template class KvCache<double>;

}  // namespace tapegrad
