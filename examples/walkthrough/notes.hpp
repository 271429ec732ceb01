#pragma once
// The worked examples of the notes the project grew from (../shared/seeds/000..004), recomputed in
// float64 with tapegrad's own ops and layers (matmul_bt, softmax_rows, SelfAttention<double>, ...),
// every number a note states set beside the number tapegrad computes, and every disagreement
// explained. This part computes and formats; it never prints (examples/walkthrough/main.cpp does).
//
// A Claim is one number a note states (or, with no `stated`, one number computed for reference).
// It is ok when the stated value equals the computed one at the precision the note states it:
// 0.1761 (4 decimals) is ok iff |computed - 0.1761| <= 0.5e-4 + 1e-12.
//
// Keys are stable ("001.softmax_row1.p2"); tests/test_walkthrough.cpp looks every claim and every
// table entry ("001.S.r1c2", 1-based) up in tests/data/walkthrough_expected.txt, which
// tests/data/make_walkthrough_expected.py computes independently with numpy.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace tapegrad::walkthrough {

struct Claim {
  std::string key;   // "001.softmax_row1.p2"
  std::string what;  // short, for a table column: "p2 = e^0.32 / sum"
  std::optional<double> stated;  // empty: a number computed for reference, which no note states
  double computed = 0;
  int decimals = 4;           // decimals the note states the value with (how `stated` is shown)
  int computed_decimals = 7;  // decimals `computed` is shown with
  double tolerance = 0;       // ok iff |computed - stated| <= tolerance
  bool ok = true;
  std::string why;  // the explanation when wrong, and always the precision used
};

// A matrix the walkthrough used or computed, for display; its entries are checked by the test as
// "<key>.r<row>c<col>" (1-based).
struct Table {
  std::string key;  // "001.S"
  std::string caption;
  std::vector<std::string> row_names, col_names;
  std::vector<double> values;  // row-major, row_names.size() x col_names.size()
  int decimals = 4;            // shown with

  double at(std::size_t r, std::size_t c) const { return values[r * col_names.size() + c]; }
  std::string entry_key(std::size_t r, std::size_t c) const;  // "001.S.r1c2"
};

struct Section {
  std::string note;   // "001"
  std::string title;
  std::vector<std::string> lines;  // paragraphs: what was computed, how, and what it shows
  std::vector<Table> tables;
  std::vector<Claim> claims;
};

// Every worked example of notes 000 to 004, in note order.
std::vector<Section> run_walkthrough();

struct Summary {
  int checked = 0;    // claims with a stated value
  int wrong = 0;      // ... that are not ok
  int reference = 0;  // claims computed for reference only
};
Summary summarize(const std::vector<Section>& sections);

// How both renderers show a claim's numbers ("0.1761", "0.1760191"; "-" when nothing is stated).
std::string format_stated(const Claim& c);
std::string format_computed(const Claim& c);

// For a terminal of 100 columns: aligned columns, "WRONG" on every flagged number with its
// explanation below it, and the summary at the end.
std::string render_terminal(const std::vector<Section>& sections);
// The same content as a Markdown document (tables for claims and matrices).
std::string render_markdown(const std::vector<Section>& sections);

}  // namespace tapegrad::walkthrough
