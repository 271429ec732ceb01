// core/rng: the streams match an independent Python implementation bit for bit
// (tests/data/make_rng_golden.py), and the state saves and restores.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <vector>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/rng.hpp"

using namespace tapegrad;

namespace {

// Lines of rng_golden.txt, "kind seed stream v1 v2 ..." keyed by "kind seed stream" (and "log x:y ...").
std::map<std::string, std::vector<std::string>> read_golden() {
  std::ifstream in(TAPEGRAD_TEST_DATA "/rng_golden.txt");
  REQUIRE_MESSAGE(in.good(), "cannot open tests/data/rng_golden.txt");
  std::map<std::string, std::vector<std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string kind, w;
    words >> kind;
    if (kind != "log") {
      std::string seed, stream;
      words >> seed >> stream;
      kind += " " + seed + " " + stream;
    }
    while (words >> w) out[kind].push_back(w);
  }
  return out;
}

double from_hex(const std::string& s) { return std::strtod(s.c_str(), nullptr); }

}  // namespace

TEST_CASE("rng: the xoshiro256** core matches the published algorithm on a hand-checkable state") {
  Rng r;
  r.set_state({{1, 2, 3, 4}});
  CHECK(r.next_u64() == 11520u);  // rotl(2 * 5, 7) * 9
}

TEST_CASE("rng: streams match the independent Python implementation bit for bit") {
  auto golden = read_golden();
  REQUIRE(golden.size() == 7);  // u64 x2, uniform, normal, below10, shuffle10, log

  REQUIRE(golden["u64 42 0"].size() == 8);
  REQUIRE(golden["u64 42 1"].size() == 8);
  REQUIRE(golden["uniform 7 0"].size() == 8);
  Rng a(42), b(42, 1);
  for (const auto& v : golden["u64 42 0"]) CHECK(a.next_u64() == std::stoull(v));
  for (const auto& v : golden["u64 42 1"]) CHECK(b.next_u64() == std::stoull(v));

  Rng u(7);
  for (const auto& v : golden["uniform 7 0"]) CHECK(u.uniform() == from_hex(v));
}

TEST_CASE("rng: normal, below and shuffle match the Python implementation exactly") {
  auto golden = read_golden();
  auto values = [&](const std::string& key) {
    REQUIRE_MESSAGE(golden.count(key) == 1, "rng_golden.txt has no line '", key, "'");
    return golden[key];
  };
  REQUIRE(values("normal 7 0").size() == 16);
  REQUIRE(values("below10 3 0").size() == 16);
  Rng n(7);
  for (const auto& v : values("normal 7 0")) CHECK(n.normal() == from_hex(v));
  Rng b(3);
  for (const auto& v : values("below10 3 0")) CHECK(b.below(10) == std::stoull(v));
  Rng s(3);
  std::vector<int> xs(10);
  std::iota(xs.begin(), xs.end(), 0);
  s.shuffle(xs.begin(), xs.end());
  const auto expected = values("shuffle10 3 0");
  REQUIRE(expected.size() == xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(xs[i] == std::stoi(expected[i]));
}

TEST_CASE("rng: portable_log is bit-identical to the reference and within 2e-16 of std::log") {
  auto golden = read_golden();
  REQUIRE(!golden["log"].empty());
  for (const auto& pair : golden["log"]) {
    const auto colon = pair.find(':');
    const double x = from_hex(pair.substr(0, colon));
    const double y = from_hex(pair.substr(colon + 1));
    CHECK(portable_log(x) == y);
    if (x != 1.0) CHECK(std::abs(portable_log(x) - std::log(x)) <= 2e-16 * std::abs(std::log(x)));
  }
  CHECK_THROWS_WITH_AS(portable_log(0.0), "portable_log: 0 is not a positive finite number", ValueError);
}

TEST_CASE("rng: saving and restoring the state replays the stream") {
  Rng r(123);
  for (int i = 0; i < 5; ++i) r.normal();
  const Rng::State saved = r.state();
  std::vector<double> first;
  for (int i = 0; i < 10; ++i) first.push_back(r.normal());
  Rng other(999);
  other.set_state(saved);
  for (int i = 0; i < 10; ++i) CHECK(other.normal() == first[static_cast<std::size_t>(i)]);
  CHECK_THROWS_AS(other.set_state(Rng::State{}), ValueError);
  CHECK(other.state() != saved);  // refused: the state it had is kept
}

TEST_CASE("rng: distributions have the moments they claim") {
  Rng r(5);
  const int n = 200000;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = r.normal();
    sum += x;
    sum2 += x * x;
  }
  // Standard errors at n = 2e5: mean 0.0022, variance 0.0032; these bounds are about 4.5 of them.
  CHECK(std::abs(sum / n) < 0.01);
  CHECK(std::abs(sum2 / n - 1.0) < 0.015);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) ++counts[r.below(7)];
  for (int c : counts) CHECK(std::abs(c - 10000) < 450);  // sd ~ 93
  CHECK_THROWS_AS(r.below(0), ValueError);
}
