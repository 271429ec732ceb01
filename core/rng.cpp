#include "tapegrad/core/rng.hpp"

#include <cmath>

#include "tapegrad/core/error.hpp"

namespace tapegrad {
namespace {

std::uint64_t splitmix64(std::uint64_t& x) { return detail::mix64(x += 0x9E3779B97F4A7C15ull); }

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(std::uint64_t seed, std::uint64_t stream) {
  // Two splitmix64 passes: the stream number is mixed before the seed, so (seed, stream) pairs that
  // differ in either give unrelated states.
  std::uint64_t x = stream;
  std::uint64_t mix = splitmix64(x) ^ seed;
  for (auto& w : state_.words) w = splitmix64(mix);
}

void Rng::set_state(const State& s) {
  if (s.words == std::array<std::uint64_t, 4>{})
    fail<ValueError>("rng: the all-zero state is invalid for xoshiro256** (it would only produce zeros)");
  state_ = s;
}

std::uint64_t Rng::next_u64() {
  auto& s = state_.words;
  const std::uint64_t result = rotl(s[1] * 5, 7) * 9;
  const std::uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

std::uint64_t Rng::below(std::uint64_t n) {
  if (n == 0) fail<ValueError>("rng: below(0) has no value to return: the range [0, 0) is empty");
  // Reject the low values that would make r % n favour small results: 2^64 mod n of them.
  const std::uint64_t threshold = (0 - n) % n;
  for (;;) {
    const std::uint64_t r = next_u64();
    if (r >= threshold) return r % n;
  }
}

double Rng::normal() {
  double u, v, s;
  do {
    u = 2.0 * uniform() - 1.0;
    v = 2.0 * uniform() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  return u * std::sqrt(-2.0 * portable_log(s) / s);
}

double portable_log(double x) {
  if (!(x > 0.0) || !std::isfinite(x)) fail<ValueError>("portable_log: {} is not a positive finite number", x);
  int e = 0;
  double m = std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1): exact
  if (m < 0.70710678118654752440) {
    m *= 2.0;  // exact
    e -= 1;
  }
  // log(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m-1)/(m+1), |s| < 0.172, s^2 < 0.0295:
  // terms through s^23/23 leave a truncation error below 1e-18.
  const double s = (m - 1.0) / (m + 1.0);
  const double z = s * s;
  double p = 1.0 / 23.0;
  for (int k = 10; k >= 0; --k) p = p * z + 1.0 / static_cast<double>(2 * k + 1);
  // fdlibm's split of ln 2: ln2_hi has its low 32 bits zero, so e * ln2_hi is exact for any exponent.
  constexpr double ln2_hi = 6.93147180369123816490e-01;
  constexpr double ln2_lo = 1.90821492927058770002e-10;
  const double de = static_cast<double>(e);
  return de * ln2_hi + (2.0 * s * p + de * ln2_lo);
}

}  // namespace tapegrad
