// The notes' worked examples, recomputed by tapegrad: every number the notes state beside the one
// tapegrad computes, the wrong ones flagged and explained (examples/walkthrough/notes.hpp).
//
//   build/examples/walkthrough [--markdown FILE]
//
// Exits 0 when the walkthrough ran, however many numbers in the notes are wrong (finding them is its
// job); 1 only if it could not run or could not write FILE.
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "walkthrough/notes.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Recomputes the worked examples of the self-attention notes with tapegrad and flags every wrong number"};
  std::string markdown;
  app.add_option("--markdown", markdown, "Also write the walkthrough as Markdown to this file");
  CLI11_PARSE(app, argc, argv);

  try {
    const auto sections = tapegrad::walkthrough::run_walkthrough();
    fmt::print("{}", tapegrad::walkthrough::render_terminal(sections));
    if (!markdown.empty()) {
      std::ofstream out(markdown, std::ios::binary);
      out << tapegrad::walkthrough::render_markdown(sections);
      out.close();
      if (!out) {
        fmt::print(stderr, "walkthrough: cannot write the Markdown file '{}'\n", markdown);
        return 1;
      }
      fmt::print("\nMarkdown written to {}\n", markdown);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "walkthrough: {}\n", e.what());
    return 1;
  }
  return 0;
}
