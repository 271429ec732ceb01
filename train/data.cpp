#include "tapegrad/train/data.hpp"

#include <algorithm>
#include <bit>
#include <numeric>
#include <utility>

#include "tapegrad/autograd/ops.hpp"  // kIgnoreLabel

namespace tapegrad {

Vocabulary::Vocabulary(std::vector<std::string> names) {
  for (auto& n : names) {
    if (contains(n)) fail<NameError>("vocabulary: '{}' appears twice", escaped(n));
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
  fail<NameError>("vocabulary: unknown name '{}' (the vocabulary has {} names)", escaped(name), names_.size());
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
  for (const auto& e : examples)
    n += std::count_if(e.labels.begin(), e.labels.end(), [](auto l) { return l != kIgnoreLabel; });
  return n;
}

Sampler::Sampler(Index n, Index batch, std::uint64_t seed) : n_(n), rng_(seed, 0x73616d706c65) {
  if (n <= 0 || batch <= 0)
    fail<ValueError>("sampler: needs examples and a positive batch size, got {} and {}", n, batch);
  current_.resize(static_cast<std::size_t>(batch));
  // The Feistel network permutes [0, 4^half_bits_), the smallest such range that covers n: at most 4n, so
  // a draw walks fewer than 4 times on average. Counted in bits, not by shifting until the range covers
  // n: for n above 2^62 the range is 2^64, which no 64-bit shift reaches.
  half_bits_ = std::max(1, (static_cast<int>(std::bit_width(static_cast<std::uint64_t>(n - 1))) + 1) / 2);
  state_.examples = n;
  if (n <= kStoredOrderLimit) state_.order.resize(static_cast<std::size_t>(n));
  reshuffle();
}

void Sampler::reshuffle() {
  state_.cursor = 0;
  if (stored_order()) {
    std::iota(state_.order.begin(), state_.order.end(), Index{0});
    rng_.shuffle(state_.order.begin(), state_.order.end());
  } else {
    draw_keys();
  }
}

void Sampler::draw_keys() {
  epoch_start_ = rng_.state();
  for (auto& k : keys_) k = rng_.next_u64();
}

Index Sampler::feistel(std::uint64_t x) const {
  const std::uint64_t mask = (std::uint64_t{1} << half_bits_) - 1;
  do {  // cycle walking: x < n on entry, so the walk ends, on the next member of x's cycle inside [0, n)
    std::uint64_t left = x >> half_bits_, right = x & mask;
    for (std::uint64_t key : keys_) {
      const std::uint64_t f = detail::mix64(right ^ key) & mask;
      left = std::exchange(right, left ^ f);
    }
    x = (left << half_bits_) | right;
  } while (x >= static_cast<std::uint64_t>(n_));
  return static_cast<Index>(x);
}

Index Sampler::at(Index position) const {
  if (position < 0 || position >= n_) fail<ValueError>("sampler: position {} is outside [0, {})", position, n_);
  return stored_order() ? state_.order[static_cast<std::size_t>(position)]
                        : feistel(static_cast<std::uint64_t>(position));
}

std::span<const Index> Sampler::next() {
  for (auto& slot : current_) {
    if (state_.cursor == n_) {
      ++state_.epoch;
      reshuffle();
    }
    slot = at(state_.cursor++);
  }
  return current_;
}

Sampler::State Sampler::state() const {
  State s = state_;
  s.rng = stored_order() ? rng_.state() : epoch_start_;
  return s;
}

void Sampler::set_state(const State& s) {
  const bool computed = s.order.empty();
  if ((!computed && static_cast<Index>(s.order.size()) != n_) || s.cursor < 0 || s.cursor > n_ || s.epoch < 0)
    fail<ValueError>("sampler: the saved data order ({}) is at epoch {} position {} but this dataset has {} examples",
                     computed ? "computed" : fmt::format("stored, of {} examples", s.order.size()), s.epoch, s.cursor,
                     n_);
  if (s.examples != 0 && s.examples != n_)
    fail<ValueError>("sampler: the saved data order ({}) is of {} examples but this dataset has {}",
                     computed ? "computed" : "stored", s.examples, n_);
  if (computed && n_ <= kStoredOrderLimit)
    fail<ValueError>(
        "sampler: the saved data order is a computed one, but a dataset of {} examples has a stored order "
        "(computed orders are of more than {})",
        n_, kStoredOrderLimit);
  std::vector<char> seen(s.order.size(), 0);
  for (Index i : s.order) {
    if (i < 0 || i >= n_ || seen[static_cast<std::size_t>(i)])
      fail<ValueError>("sampler: the saved data order is not a permutation of the dataset's {} examples", n_);
    seen[static_cast<std::size_t>(i)] = 1;
  }
  rng_.set_state(s.rng);  // the generator's own check of its state, and the last
  state_.epoch = s.epoch;
  state_.cursor = s.cursor;
  state_.order = s.order;
  if (!stored_order()) draw_keys();  // from the epoch's start: the same keys, and rng_ where it was
}

}  // namespace tapegrad
