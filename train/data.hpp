#pragma once
// Sequence data: vocabularies and labelled token sequences (a Dataset), and the seeded sampler that
// orders any data source's examples, whose state can be saved and restored (checkpoints resume the exact
// data order). train/data_source.hpp turns a Dataset into batches.
//
// An example is one token id per position and one label per position, kIgnoreLabel where the
// position has no label (sequence tagging labels every position; reading out at one position labels
// one).

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/core/rng.hpp"
#include "tapegrad/core/tensor.hpp"

namespace tapegrad {

// Names <-> ids, ids dense from 0 in order of first appearance.
class Vocabulary {
 public:
  Vocabulary() = default;
  explicit Vocabulary(std::vector<std::string> names);  // NameError on a duplicate

  std::int32_t add(std::string_view name);       // the id of name, added if new
  std::int32_t id(std::string_view name) const;  // NameError naming the unknown name
  bool contains(std::string_view name) const { return index_.contains(name); }
  const std::string& name(std::int32_t id) const;
  Index size() const { return static_cast<Index>(names_.size()); }
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<std::string> names_;
  std::map<std::string, std::int32_t, std::less<>> index_;
};

struct Example {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> labels;  // kIgnoreLabel (-100) where there is none
};

struct Dataset {
  std::string name;
  Vocabulary tokens;  // token 0 pads shorter sequences
  Vocabulary labels;
  std::vector<Example> examples;

  Index size() const { return static_cast<Index>(examples.size()); }
  Index max_len() const;
  Index labelled_positions() const;
};

// Minibatches of indices in [0, n): a fresh seeded order of all n each epoch, batch after batch; the last
// batch of an epoch is filled from the next one, so every batch has the same size. Every index is drawn
// exactly once per epoch, and the state resumes the exact sequence.
//
// Two orders, by size, so that memory and checkpoints do not grow with the data:
//   stored     n <= kStoredOrderLimit: a Fisher-Yates permutation (Rng::shuffle) kept in the state, 8
//              bytes an example (512 KB at most); tapegrad's order since 0.1, so small data sets (the
//              lesson, the demo) draw what they always drew.
//   computed   larger n: a keyed bijection of [0, n) evaluated at each draw: a Feistel network on the
//              smallest even number of bits that covers n, with cycle walking (an index that lands past n
//              is permuted again until it does not; a permutation of the covering range restricted this
//              way is a permutation of [0, n)), six rounds, fresh keys from the generator each epoch. The
//              state is O(1): the generator's state at the epoch's start (the keys follow from it) and the
//              position, so a checkpoint's size does not depend on the data's.
// A state says what it is for: which order, and of how many examples. A stored order restores that
// order whatever n is, if it is a permutation of n (checkpoints written before orders were computed hold
// one of any size); a computed order restores only into a sampler of its own n, which computes its order
// (more than kStoredOrderLimit examples): a computed state of another n would go on in another order,
// and a stored state stripped of its permutation is not a computed one.
class Sampler {
 public:
  static constexpr Index kStoredOrderLimit = Index{1} << 16;

  struct State {
    std::int64_t epoch = 0;
    Index cursor = 0;          // position in the current epoch's order
    std::vector<Index> order;  // the stored permutation; empty when the order is computed
    Rng::State rng;            // stored: the generator after the shuffle; computed: at the epoch's start
    Index examples = 0;        // n, the examples it orders; 0 in a state read from a file that predates it
  };

  Sampler(Index n, Index batch, std::uint64_t seed);
  std::span<const Index> next();

  State state() const;
  void set_state(const State& s);  // ValueError (and no change) if it does not fit this sampler
  bool stored_order() const { return !state_.order.empty(); }
  // The index at `position` of the current epoch's order (0 <= position < n).
  Index at(Index position) const;

 private:
  static constexpr int kRounds = 6;
  void reshuffle();
  void draw_keys();  // the computed order's keys for this epoch, from rng_ (as the epoch starts)
  Index feistel(std::uint64_t x) const;

  Index n_;
  Rng rng_;
  State state_;
  std::vector<Index> current_;
  // The computed order: the generator's state when this epoch's keys were drawn, the keys, and the half
  // width in bits of the Feistel network.
  Rng::State epoch_start_{};
  std::uint64_t keys_[kRounds] = {};
  int half_bits_ = 1;
};

}  // namespace tapegrad
