// The notes' worked examples, recomputed with tapegrad (see notes.hpp). One function per worked
// example; each builds its tensors, runs tapegrad's ops or SelfAttention<double> on them, and records
// the note's numbers beside tapegrad's. The explanations of wrong numbers are computed too (the
// note's own rounded inputs pushed through the same ops, the alternative readings of a formula), so
// a change in the library that moved a number would show up here and in the test.
//
// Shapes: E (T, D) for a sentence of T tokens of width D; SelfAttention takes it as (1, T, D).
#include "walkthrough/notes.hpp"
#include "walkthrough/notes_support.hpp"

#include <algorithm>
#include <initializer_list>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace tapegrad::walkthrough {

std::string Table::entry_key(std::size_t r, std::size_t c) const { return fmt::format("{}.r{}c{}", key, r + 1, c + 1); }

namespace {

using namespace detail;

// ---- rendering ----------------------------------------------------------------------------------

constexpr std::size_t kWidth = 100;

// Greedy word wrap of `text` to kWidth columns, every line starting with `indent` spaces.
std::string wrap(std::string_view text, std::size_t indent) {
  std::string out, line(indent, ' ');
  std::istringstream words{std::string(text)};
  std::string word;
  bool empty = true;
  while (words >> word) {
    if (!empty && line.size() + 1 + word.size() > kWidth) {
      out += line + "\n";
      line.assign(indent, ' ');
      empty = true;
    }
    if (!empty) line += ' ';
    line += word;
    empty = false;
  }
  if (!empty) out += line + "\n";
  return out;
}

enum class Style { terminal, markdown };

// "ref", "ok" or "WRONG"; Markdown sets ref in italics and WRONG in bold.
std::string verdict(const Claim& c, Style style) {
  const bool md = style == Style::markdown;
  if (!c.stated) return md ? "*ref*" : "ref";
  if (c.ok) return "ok";
  return md ? "**WRONG**" : "WRONG";
}

std::string cell(double v, int decimals) { return fmt::format("{:.{}f}", v, decimals); }

std::string terminal_table(const Table& t) {
  std::size_t name_w = 0, col_w = 0;
  for (const auto& r : t.row_names) name_w = std::max(name_w, r.size());
  for (const auto& c : t.col_names) col_w = std::max(col_w, c.size());
  for (double v : t.values) col_w = std::max(col_w, cell(v, t.decimals).size());
  std::string out = fmt::format("  {} [{}]\n  {:<{}}", t.caption, t.key, "", name_w);
  for (const auto& c : t.col_names) out += fmt::format(" {:>{}}", c, col_w);
  out += "\n";
  for (std::size_t r = 0; r < t.row_names.size(); ++r) {
    out += fmt::format("  {:<{}}", t.row_names[r], name_w);
    for (std::size_t c = 0; c < t.col_names.size(); ++c) out += fmt::format(" {:>{}}", cell(t.at(r, c), t.decimals), col_w);
    out += "\n";
  }
  return out + "\n";
}

std::string summary_text(const std::vector<Section>& sections) {
  const Summary counts = summarize(sections);
  std::string wrong;
  for (const auto& s : sections)
    for (const auto& c : s.claims)
      if (c.stated && !c.ok) append_item(wrong, ", ", c.key);
  return fmt::format("{} numbers checked, {} wrong ({} more computed for reference). Wrong: {}.", counts.checked,
                     counts.wrong, counts.reference, wrong.empty() ? "none" : wrong);
}

std::string md_escape(std::string s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|' || ch == '*' || ch == '_') out += '\\';
    out += ch;
  }
  return out;
}

}  // namespace

std::vector<Section> run_walkthrough() {
  std::vector<Section> sections;
  sections.push_back(note000());
  sections.push_back(note001_scores());
  sections.push_back(note001_softmax());
  sections.push_back(note001_normalization());
  sections.push_back(note001_two_sentences());
  sections.push_back(note001_learnable());
  sections.push_back(note002());
  sections.push_back(note003());
  sections.push_back(note004());
  return sections;
}

Summary summarize(const std::vector<Section>& sections) {
  Summary out;
  for (const auto& s : sections)
    for (const auto& c : s.claims) {
      if (!c.stated) {
        ++out.reference;
        continue;
      }
      ++out.checked;
      out.wrong += !c.ok;
    }
  return out;
}

std::string format_stated(const Claim& c) { return c.stated ? cell(*c.stated, c.decimals) : "-"; }
std::string format_computed(const Claim& c) { return cell(c.computed, c.computed_decimals); }

std::string render_terminal(const std::vector<Section>& sections) {
  std::string out = wrap(
      "tapegrad walkthrough: the notes' worked examples recomputed in float64 with tapegrad's ops and layers. "
      "Every number a note states is shown beside tapegrad's; WRONG marks one that does not hold at the precision "
      "the note states it, with the reason below it; 'ref' marks a number computed for reference only.",
      0);
  for (const auto& s : sections) {
    const std::string head = fmt::format("== {} ", s.title);
    out += fmt::format("\n{}{}\n", head, std::string(head.size() < kWidth ? kWidth - head.size() : 0, '='));
    for (const auto& l : s.lines) out += wrap(l, 2) + "\n";
    for (const auto& t : s.tables) out += terminal_table(t);
    if (s.claims.empty()) continue;
    std::size_t key_w = 3, what_w = 4, stated_w = 6, computed_w = 8;
    for (const auto& c : s.claims) {
      key_w = std::max(key_w, c.key.size());
      what_w = std::max(what_w, c.what.size());
      stated_w = std::max(stated_w, format_stated(c).size());
      computed_w = std::max(computed_w, format_computed(c).size());
    }
    out += fmt::format("  {:<{}} {:<{}} {:>{}} {:>{}}  {}\n", "key", key_w, "what", what_w, "stated", stated_w,
                       "computed", computed_w, "verdict");
    for (const auto& c : s.claims) {
      out += fmt::format("  {:<{}} {:<{}} {:>{}} {:>{}}  {}\n", c.key, key_w, c.what, what_w, format_stated(c),
                         stated_w, format_computed(c), computed_w, verdict(c, Style::terminal));
      if (c.stated && !c.ok) out += wrap(c.why, 6);
    }
  }
  out += "\n";
  out += wrap(fmt::format("SUMMARY: {}", summary_text(sections)), 0);
  return out;
}

std::string render_markdown(const std::vector<Section>& sections) {
  std::string out =
      "# The notes' worked examples, recomputed by tapegrad\n\n"
      "Every number a note states, beside what tapegrad (float64, its own ops and layers) computes. "
      "**WRONG** marks a number that does not hold at the precision the note states it; *ref* marks a number "
      "computed for reference only. Generated by `examples/walkthrough --markdown FILE`.\n\n";
  out += fmt::format("**Summary:** {}\n", md_escape(summary_text(sections)));
  for (const auto& s : sections) {
    out += fmt::format("\n## {}\n\n", md_escape(s.title));
    for (const auto& l : s.lines) out += md_escape(l) + "\n\n";
    for (const auto& t : s.tables) {
      std::string header = "| |", rule = "|---|";
      for (const auto& c : t.col_names) {
        header += fmt::format(" {} |", md_escape(c));
        rule += "---:|";
      }
      out += fmt::format("{} (`{}`)\n\n{}\n{}\n", md_escape(t.caption), t.key, header, rule);
      for (std::size_t r = 0; r < t.row_names.size(); ++r) {
        out += fmt::format("| {} |", md_escape(t.row_names[r]));
        for (std::size_t c = 0; c < t.col_names.size(); ++c) out += fmt::format(" {} |", cell(t.at(r, c), t.decimals));
        out += "\n";
      }
      out += "\n";
    }
    if (s.claims.empty()) continue;
    out += "| key | what | stated | computed | verdict | why |\n|---|---|---:|---:|---|---|\n";
    for (const auto& c : s.claims) {
      out += fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", c.key, md_escape(c.what), format_stated(c),
                         format_computed(c), verdict(c, Style::markdown), md_escape(c.why));
    }
  }
  return out;
}

}  // namespace tapegrad::walkthrough
