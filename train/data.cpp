#include "tapegrad/train/data.hpp"

#include <algorithm>
#include <numeric>

#include "tapegrad/autograd/ops.hpp"  // kIgnoreLabel

namespace tapegrad {

Vocabulary::Vocabulary(std::vector<std::string> names) {
  for (auto& n : names) {
    if (contains(n)) fail<NameError>("vocabulary: '{}' appears twice", n);
    add(n);
  }
}

std::int32_t Vocabulary::add(std::string_view name) {
  if (auto it = index_.find(name); it != index_.end()) return it->second;
  const auto id = static_cast<std::int32_t>(names_.size());
  names_.emplace_back(name);
  index_.emplace(std::string(name), id);
  return id;
}

std::int32_t Vocabulary::id(std::string_view name) const {
  if (auto it = index_.find(name); it != index_.end()) return it->second;
  fail<NameError>("vocabulary: unknown name '{}' (the vocabulary has {} names)", name, names_.size());
}

const std::string& Vocabulary::name(std::int32_t id) const {
  if (id < 0 || id >= size()) fail<ValueError>("vocabulary: id {} is outside [0, {})", id, size());
  return names_[static_cast<std::size_t>(id)];
}

Index Dataset::max_len() const {
  Index longest = 0;
  for (const auto& e : examples) longest = std::max(longest, static_cast<Index>(e.tokens.size()));
  return longest;
}

Index Dataset::labelled_positions() const {
  Index n = 0;
  for (const auto& e : examples) n += std::count_if(e.labels.begin(), e.labels.end(), [](auto l) { return l != kIgnoreLabel; });
  return n;
}

Sampler::Sampler(Index n, Index batch, std::uint64_t seed) : n_(n), rng_(seed, 0x73616d706c65) {
  if (n <= 0 || batch <= 0) fail<ValueError>("sampler: needs examples and a positive batch size, got {} and {}", n, batch);
  current_.resize(static_cast<std::size_t>(batch));
  state_.order.resize(static_cast<std::size_t>(n));
  reshuffle();
}

void Sampler::reshuffle() {
  std::iota(state_.order.begin(), state_.order.end(), Index{0});
  rng_.shuffle(state_.order.begin(), state_.order.end());
  state_.cursor = 0;
}

std::span<const Index> Sampler::next() {
  for (auto& slot : current_) {
    if (state_.cursor == n_) {
      ++state_.epoch;
      reshuffle();
    }
    slot = state_.order[static_cast<std::size_t>(state_.cursor++)];
  }
  return current_;
}

Sampler::State Sampler::state() const {
  State s = state_;
  s.rng = rng_.state();
  return s;
}

void Sampler::check_state(const State& s) const {
  if (static_cast<Index>(s.order.size()) != n_ || s.cursor < 0 || s.cursor > n_ || s.epoch < 0)
    fail<ValueError>("sampler: the saved data order covers {} examples at position {} but this dataset has {}",
                     s.order.size(), s.cursor, n_);
  std::vector<char> seen(static_cast<std::size_t>(n_), 0);
  for (Index i : s.order) {
    if (i < 0 || i >= n_ || seen[static_cast<std::size_t>(i)])
      fail<ValueError>("sampler: the saved data order is not a permutation of the dataset's {} examples", n_);
    seen[static_cast<std::size_t>(i)] = 1;
  }
  Rng probe;
  probe.set_state(s.rng);  // the generator's own check of its state
}

void Sampler::set_state(const State& s) {
  check_state(s);
  rng_.set_state(s.rng);
  state_ = s;
}

}  // namespace tapegrad
