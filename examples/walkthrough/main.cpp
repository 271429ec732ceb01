// The notes' worked examples, recomputed by tapegrad: every number the notes state beside the one
// tapegrad computes, the wrong ones flagged and explained (examples/walkthrough/notes.hpp).
//
//   build/examples/walkthrough [--markdown FILE]
//
// Exits 0 when the walkthrough ran, however many numbers in the notes are wrong (finding them is its
// job); otherwise with the codes of the other programs (2: a bad flag, 4: FILE could not be written).
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tapegrad/core/file_io.hpp"
#include "tapegrad/program/progress.hpp"
#include "tapegrad/program/run_program.hpp"
#include "walkthrough/notes.hpp"
#include "../command_line.hpp"

int main(int argc, char** argv) {
  using namespace tapegrad;
  CLI::App app{"Recomputes the worked examples of the self-attention notes with tapegrad and flags every wrong number"};
  std::string markdown;
  app.add_option("--markdown", markdown, "Also write the walkthrough as Markdown to this file");
  if (const auto stop = examples::parse_command_line(app, "walkthrough", argc, argv)) return *stop;
  return run_program("walkthrough", [&] {
    if (!markdown.empty()) check_writable(markdown, "walkthrough --markdown");  // before the work: a device, a link, no room
    const auto sections = walkthrough::run_walkthrough();
    fmt::print("{}", walkthrough::render_terminal(sections));
    if (!markdown.empty()) {
      write_file(markdown, walkthrough::render_markdown(sections), Durability::replace, "walkthrough --markdown");
      fmt::print("\nMarkdown written to {}\n", escaped(std::string_view(markdown)));
    }
    return 0;
  });
}
