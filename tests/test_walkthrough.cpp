// examples/walkthrough: the notes' worked examples as tapegrad computes them. Every computed number
// (claims and table entries) against values computed independently with numpy
// (tests/data/make_walkthrough_expected.py), the exact set of numbers the walkthrough flags as wrong,
// the stated values against the notes, and both renderings.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "walkthrough/notes.hpp"

using namespace tapegrad::walkthrough;

namespace {

const std::vector<Section>& sections() {
  static const std::vector<Section> all = run_walkthrough();
  return all;
}

std::vector<const Claim*> claims() {
  std::vector<const Claim*> out;
  for (const auto& s : sections())
    for (const auto& c : s.claims) out.push_back(&c);
  return out;
}

const Claim& claim(const std::string& key) {
  for (const Claim* c : claims())
    if (c->key == key) return *c;
  FAIL("no claim with key ", key);
  throw;  // unreachable: FAIL throws
}

std::map<std::string, double> expected() {
  std::ifstream in(std::string(TAPEGRAD_TEST_DATA) + "/walkthrough_expected.txt");
  REQUIRE_MESSAGE(in.good(), "cannot open tests/data/walkthrough_expected.txt");
  std::map<std::string, double> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string key, value;
    words >> key >> value;
    REQUIRE_MESSAGE(!value.empty(), "walkthrough_expected.txt: no value in line '", line, "'");
    out[key] = std::stod(value);
  }
  return out;
}

// The lines of `text` whose first word is `key`.
std::vector<std::string> lines_starting_with(const std::string& text, const std::string& key) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == key || (first == "|" && line.rfind("| `" + key + "` |", 0) == 0)) out.push_back(line);
  }
  return out;
}

// The cells of a Markdown table row "| a | b \| c |": {"a", "b \| c"}. Cells are split at " | " (an
// escaped '|' has a backslash before it, not a space).
std::vector<std::string> markdown_cells(const std::string& line) {
  std::vector<std::string> out;
  if (line.size() < 4 || !line.starts_with("| ") || !line.ends_with(" |")) return out;
  const std::string inner = line.substr(2, line.size() - 4);
  std::size_t from = 0;
  for (std::size_t at; (at = inner.find(" | ", from)) != std::string::npos; from = at + 3)
    out.push_back(inner.substr(from, at - from));
  out.push_back(inner.substr(from));
  return out;
}

}  // namespace

TEST_CASE("walkthrough: every computed number matches numpy's, to 1e-12") {
  const auto want = expected();
  std::set<std::string> seen;
  std::map<std::string, double> got;  // claims and table entries; a claim may share a table entry's key
  for (const Claim* c : claims()) {
    INFO("claim ", c->key);
    CHECK_MESSAGE(seen.insert(c->key).second, "two claims have the key ", c->key);
    got[c->key] = c->computed;
  }
  for (const auto& s : sections())
    for (const auto& t : s.tables) {
      REQUIRE(t.values.size() == t.row_names.size() * t.col_names.size());
      for (std::size_t r = 0; r < t.row_names.size(); ++r)
        for (std::size_t col = 0; col < t.col_names.size(); ++col) {
          const std::string key = t.entry_key(r, col);
          const auto it = got.find(key);
          if (it != got.end()) CHECK_MESSAGE(it->second == t.at(r, col), key, ": claim and table entry differ");
          got[key] = t.at(r, col);
        }
    }
  for (const auto& kv : got) {
    const auto it = want.find(kv.first);
    CHECK_MESSAGE(it != want.end(), kv.first, " is not in walkthrough_expected.txt (rerun make_walkthrough_expected.py)");
    if (it == want.end()) continue;
    CHECK_MESSAGE(std::abs(kv.second - it->second) <= 1e-12,
                  fmt::format("{}: walkthrough {:.17g}, numpy {:.17g}", kv.first, kv.second, it->second));
  }
  for (const auto& kv : want) CHECK_MESSAGE(got.count(kv.first) == 1, kv.first, " is expected but the walkthrough has no such number");
}

TEST_CASE("walkthrough: exactly these numbers of the notes are flagged wrong") {
  const std::set<std::string> expected_wrong = {
      // 001: no 1/sqrt(d); e^0.17 slip, carried into the sum; two last-digit slips; C1 from rounded weights
      "001.score_scale", "001.softmax_row1.exp5", "001.softmax_row1.sum", "001.softmax_row1.p1",
      "001.softmax_row1.p3", "001.C1.1", "001.C1.2", "001.C1.3",
      // 001: Q and V of Bank not derivable; K's first component one dropped term
      "001.bank.q1", "001.bank.q2", "001.bank.q3", "001.bank.k1", "001.bank.v1", "001.bank.v2", "001.bank.v3",
      // 002: no vectors for "mat", both dot products, /3 instead of /sqrt(3), weights 0.4 / 0.6
      "002.tokens", "002.dot.The", "002.dot.dog", "002.divisor", "002.weight.The", "002.weight.dog",
      // 004: Apple as 5 numbers, 0.9997 for 0.99997, 4.99986 for 4.99989
      "004.apple_dims", "004.text_apple_weight", "004.dot_fruit"};
  // The numbers computed for reference only (no stated value): they are never counted as checked or wrong.
  const std::set<std::string> expected_reference = {
      "001.sentences.none.diff_norm", "001.sentences.none.cosine", "001.sentences.none.others1",
      "001.sentences.none.others2",   "001.sentences.sqrt.diff_norm", "001.sentences.sqrt.cosine",
      "001.sentences.sqrt.others1",   "001.sentences.sqrt.others2", "003.identity.max_diff",
      "003.saturation.none",          "003.saturation.sqrt",       "004.ratio",
      "004.apple_bound",              "004.dot_fruit.lo",          "004.dot_fruit.hi"};
  std::set<std::string> wrong, reference;
  int checked = 0;
  for (const Claim* c : claims()) {
    if (c->stated) ++checked;
    if (c->stated && !c->ok) wrong.insert(c->key);
    if (!c->stated) {
      reference.insert(c->key);
      CHECK_MESSAGE(!c->why.empty(), c->key, ": a reference number says what it is");
    }
  }
  for (const auto& k : expected_wrong) CHECK_MESSAGE(wrong.count(k) == 1, k, " should be flagged wrong");
  for (const auto& k : wrong) CHECK_MESSAGE(expected_wrong.count(k) == 1, k, " is flagged wrong but should not be");
  for (const auto& k : expected_reference) CHECK_MESSAGE(reference.count(k) == 1, k, " should be a reference number");
  for (const auto& k : reference) CHECK_MESSAGE(expected_reference.count(k) == 1, k, " is a reference number but should be checked");
  const Summary sum = summarize(sections());
  CHECK(sum.checked == checked);
  CHECK(sum.wrong == static_cast<int>(expected_wrong.size()));
  CHECK(sum.reference == static_cast<int>(expected_reference.size()));
  CHECK(sum.checked == 76);
}

TEST_CASE("walkthrough: the stated values are the notes' numbers, at the notes' precision") {
  struct Stated {
    const char* key;
    double value;
    int decimals;
  };
  const Stated notes[] = {
      {"001.S.r1c1", 0.14, 2},          {"001.S.r2c3", 1.22, 2},           {"001.S.r3c3", 1.94, 2},
      {"001.S.r4c5", 0.21, 2},          {"001.S.r5c5", 0.38, 2},           {"001.softmax_row1.exp1", 1.1503, 4},
      {"001.softmax_row1.exp5", 1.1855, 4}, {"001.softmax_row1.sum", 6.5351, 4}, {"001.softmax_row1.p1", 0.1761, 4},
      {"001.softmax_row1.p3", 0.2522, 4}, {"001.softmax_row1.p5", 0.1814, 4}, {"001.C1.1", 0.40505, 5},
      {"001.C1.2", 0.41471, 5},         {"001.C1.3", 0.51435, 5},          {"001.bank.q1", 0.32, 2},
      {"001.bank.q3", 0.86, 2},         {"001.bank.k1", 0.62, 2},          {"001.bank.v2", 0.67, 2},
      {"001.bank.v3", 0.88, 2},         {"002.dot.The", 0.13, 2},          {"002.dot.dog", 0.26, 2},
      {"002.divisor", 3, 0},            {"002.dk", 3, 0},                  {"002.weight.The", 0.4, 1},
      {"002.weight.dog", 0.6, 1},       {"003.sqrt_dk", 2, 0},             {"004.dot.ac", 2, 0},
      {"004.sim.apple_apple", 16.74, 2}, {"004.sim.apple_phone", 5.77, 2}, {"004.row.phone", 0.00002, 5},
      {"004.text_apple_weight", 0.9997, 4}, {"002.sum_vector.dog.3", 0.9, 1}, {"004.dot_fruit", 4.99986, 5}, {"004.apple_dims", 5, 0}};
  for (const Stated& n : notes) {
    const Claim& c = claim(n.key);
    INFO("claim ", n.key);
    REQUIRE(c.stated.has_value());
    CHECK(*c.stated == n.value);
    CHECK(c.decimals == n.decimals);
  }
  // The verdict is the stated precision: half a unit in the last stated decimal (plus 1e-12), unless the
  // claim says why not (a sum of five entries rounded to 5 decimals, an exact factor). The verdict each
  // claim should get is worked out here from numpy's value, not from the claim's own computed value, and
  // it must not hang on rounding: numpy's distance from the stated value is not within 1e-9 of the bound.
  const auto want = expected();
  const std::map<std::string, double> own_tolerance = {{"004.row.sum", 5 * 0.5e-5}, {"001.score_scale", 0}};
  for (const Claim* c : claims()) {
    if (!c->stated) continue;
    INFO("claim ", c->key, ": ", c->why);
    const auto own = own_tolerance.find(c->key);
    const double tolerance = (own != own_tolerance.end() ? own->second : 0.5 * std::pow(10.0, -c->decimals)) + 1e-12;
    CHECK(c->tolerance == doctest::Approx(tolerance).epsilon(1e-9));
    const auto numpy = want.find(c->key);
    REQUIRE_MESSAGE(numpy != want.end(), c->key, " is not in walkthrough_expected.txt");
    const double distance = std::abs(numpy->second - *c->stated);
    CHECK(c->ok == (distance <= tolerance));
    CHECK(std::abs(distance - tolerance) > 1e-9);
    CHECK(c->why.find("ok iff |computed - stated| <=") != std::string::npos);
    if (!c->ok) CHECK(c->why.rfind("No explanation found", 0) == std::string::npos);
  }
}

TEST_CASE("walkthrough: the explanations name what does and does not reproduce the notes' numbers") {
  // The note used the unscaled scores: its exponentials are e^s, none is e^(s/sqrt 3).
  bool said = false;
  for (const auto& s : sections())
    for (const auto& l : s.lines) said = said || l.find("in 4 of 5 places and e^(s/sqrt 3) in 0 of 5") != std::string::npos;
  CHECK(said);
  CHECK(claim("001.softmax_row1.sum").why.find("add to 6.5351") != std::string::npos);
  CHECK(claim("001.C1.1").why.find("gives 0.4050500") != std::string::npos);  // the note's rounded weights
  CHECK(claim("001.C1.3").why.find("gives 0.5143500") != std::string::npos);
  const std::string& k1 = claim("001.bank.k1").why;
  CHECK(k1.find("Wk(1,1) = 0.0000 instead of 0.5") != std::string::npos);
  CHECK(k1.find("Wk(2,1) = 0.0000 instead of 0.4") != std::string::npos);
  CHECK(k1.find("Wk(3,1)") == std::string::npos);  // 0.3667 is no value of the note's kind
  CHECK(claim("001.bank.q1").why.rfind("not explained", 0) == 0);
  CHECK(claim("001.bank.v1").why.rfind("not explained", 0) == 0);
  CHECK(claim("002.dot.The").why.find("add to 0.21") != std::string::npos);
  CHECK(claim("002.divisor").why.find("division by d instead of sqrt(d)") != std::string::npos);
  CHECK(claim("004.dot_fruit").why.find("[4.999855, 4.999925]") != std::string::npos);
  CHECK(claim("004.dot_fruit").why.find("contains 4.99986") != std::string::npos);
}

TEST_CASE("walkthrough: both renderings show every key with its stated and computed values") {
  const std::string terminal = render_terminal(sections());
  const std::string markdown = render_markdown(sections());
  for (const Claim* c : claims()) {
    INFO("claim ", c->key);
    const std::string stated = c->stated ? fmt::format("{:.{}f}", *c->stated, c->decimals) : "-";
    const std::string computed = fmt::format("{:.{}f}", c->computed, c->computed_decimals);
    CHECK(format_stated(*c) == stated);
    CHECK(format_computed(*c) == computed);
    const std::string verdict = !c->stated ? "ref" : c->ok ? "ok" : "WRONG";
    const std::string md_verdict = !c->stated ? "*ref*" : c->ok ? "ok" : "**WRONG**";
    for (const std::string* text : {&terminal, &markdown}) {
      const auto lines = lines_starting_with(*text, c->key);
      REQUIRE_MESSAGE(lines.size() == 1, "the key heads ", lines.size(), " lines");
      const std::string& line = lines[0];
      INFO("line: ", line);
      CHECK(line.find(" " + stated + " ") != std::string::npos);
      CHECK(line.find(" " + computed + " ") != std::string::npos);
      if (text == &terminal) {
        // The last two columns: computed (right-aligned), two spaces, the verdict, and nothing after it.
        CHECK(line.ends_with(" " + computed + "  " + verdict));
      } else {
        // | `key` | what | stated | computed | verdict | why |, a '|' inside a cell escaped as "\|".
        const auto cells = markdown_cells(line);
        REQUIRE(cells.size() == 6);
        CHECK(cells[0] == "`" + c->key + "`");
        CHECK(cells[2] == stated);
        CHECK(cells[3] == computed);
        CHECK(cells[4] == md_verdict);
      }
    }
  }
  for (const auto& s : sections())
    for (const auto& t : s.tables) {
      CHECK_MESSAGE(terminal.find("[" + t.key + "]") != std::string::npos, t.key);
      CHECK_MESSAGE(markdown.find("(`" + t.key + "`)") != std::string::npos, t.key);
    }
  std::istringstream in(terminal);
  std::string line;
  while (std::getline(in, line)) CHECK_MESSAGE(line.size() <= 100, "longer than 100 columns: ", line);
  CHECK(terminal.find("76 numbers checked, 24 wrong") != std::string::npos);
  CHECK(markdown.find("76 numbers checked, 24 wrong") != std::string::npos);
}

TEST_CASE("walkthrough: every example prints the inputs it starts from, so no note is needed to follow it") {
  // The notes are not in the repository: each worked example's matrices and vectors must be in the output.
  const std::map<std::string, std::vector<std::string>> inputs = {
      {"001", {"001.E", "001.Wq", "001.Wk", "001.Wv"}}, {"002", {"002.inputs"}}, {"004", {"004.abc", "004.inputs"}}};
  const std::string terminal = render_terminal(sections());
  const std::string markdown = render_markdown(sections());
  for (const auto& entry : inputs)  // no structured binding: clang 14 cannot capture one in CHECK_MESSAGE
    for (const auto& key : entry.second) {
      const std::string& note = entry.first;
      bool found = false;
      for (const auto& s : sections())
        for (const auto& t : s.tables)
          if (t.key == key) {
            found = true;
            CHECK_MESSAGE(s.note == note, key, " is in section ", s.note);
          }
      CHECK_MESSAGE(found, "no input table ", key);
      CHECK_MESSAGE(terminal.find("[" + key + "]") != std::string::npos, key);
      CHECK_MESSAGE(markdown.find("(`" + key + "`)") != std::string::npos, key);
    }
  // Note 004's vectors, as its text implies them: Apple [5, 2, 0], phone [0, 5, 0].
  for (const auto& s : sections())
    for (const auto& t : s.tables)
      if (t.key == "004.inputs") CHECK(t.values == std::vector<double>{5, 2, 0, 0, 5, 0});
}
