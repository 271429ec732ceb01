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

  std::int32_t add(std::string_view name);  // the id of name, added if new
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

// Minibatches of indices in [0, n): a fresh seeded permutation each epoch, batch after batch; the last
// batch of an epoch is filled from the next one, so every batch has the same size.
class Sampler {
 public:
  struct State {
    std::int64_t epoch = 0;
    Index cursor = 0;          // position in the current permutation
    std::vector<Index> order;  // the current permutation
    Rng::State rng;
  };

  Sampler(Index n, Index batch, std::uint64_t seed);
  std::span<const Index> next();

  State state() const;
  void set_state(const State& s);  // ValueError (and no change) if it does not fit this sampler
  void check_state(const State& s) const;  // set_state's checks alone

 private:
  void reshuffle();

  Index n_;
  Rng rng_;
  State state_;
  std::vector<Index> current_;
};

}  // namespace tapegrad
