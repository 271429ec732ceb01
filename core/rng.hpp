#pragma once
// A seeded random generator whose streams are bit-identical across runs, compilers and standard
// libraries, and whose state can be saved and restored (checkpoints resume the exact stream).
//
// std::mt19937 is portable but std::normal_distribution and friends are not: libstdc++ and libc++
// produce different numbers from the same engine. So the engine is xoshiro256** (Blackman & Vigna,
// 256 bits of state, seeded through splitmix64) and every distribution is written out here, using
// only IEEE-exact arithmetic (+ - * / sqrt) and a fixed-order series for log; rng.cpp is compiled
// with -ffp-contract=off so no compiler fuses a multiply-add differently.
// tests/test_rng.cpp checks the streams against values computed independently in Python.

#include <array>
#include <cstdint>
#include <utility>

namespace tapegrad {

class Rng {
 public:
  struct State {
    std::array<std::uint64_t, 4> words{};
    bool operator==(const State&) const = default;
  };

  // Different (seed, stream) pairs give unrelated sequences: use stream to derive independent
  // generators from one user seed (data order, initialisation, task generation, ...).
  explicit Rng(std::uint64_t seed = 0, std::uint64_t stream = 0);

  std::uint64_t next_u64();
  double uniform();                      // [0, 1), 53 random bits
  double uniform(double lo, double hi);  // [lo, hi)
  double normal();                       // standard normal (Marsaglia's polar method)
  std::uint64_t below(std::uint64_t n);  // uniform integer in [0, n), unbiased; n > 0

  // Fisher-Yates with below(): the same permutation everywhere (std::shuffle's is unspecified).
  template <class RandomIt>
  void shuffle(RandomIt first, RandomIt last) {
    const auto n = static_cast<std::uint64_t>(last - first);
    for (std::uint64_t i = n; i > 1; --i) {
      const auto j = below(i);
      using std::swap;
      swap(first[static_cast<std::ptrdiff_t>(i - 1)], first[static_cast<std::ptrdiff_t>(j)]);
    }
  }

  State state() const { return state_; }
  void set_state(const State& s);

 private:
  State state_;
};

namespace detail {

// splitmix64's finaliser: every bit of the result depends on every bit of x (Rng's seeding; the round
// function of the sampler's Feistel network, which needs that to look random after a few rounds).
inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace detail

// Natural logarithm for x > 0 from a fixed series: the same bits on every platform, unlike
// std::log, whose last bit depends on the C library. Relative error below 2e-16.
double portable_log(double x);

}  // namespace tapegrad
