// The notes' worked examples, recomputed by tapegrad: every number the notes state beside the one
// tapegrad computes, the wrong ones flagged and explained (examples/walkthrough/notes.hpp). With
// --graphs DIR it also draws the tape of one self-attention forward and backward in each mode
// (examples/walkthrough/graphs.hpp): DIR/attention_{parameter_free,learnable}.dot, and .svg when
// Graphviz's dot is installed (docs/tape_graph.md).
//
//   build/examples/walkthrough [--markdown FILE] [--graphs DIR]
//
// Exits 0 when the walkthrough ran, however many numbers in the notes are wrong (finding them is its
// job); otherwise with the codes of the other programs (2: a bad flag, 4: a file could not be written or
// Graphviz's dot failed).
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tapegrad/autograd/tape_graph.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"
#include "command_line.hpp"
#include "walkthrough/graphs.hpp"
#include "walkthrough/notes.hpp"

int main(int argc, char** argv) {
  using namespace tapegrad;
  CLI::App app{"Recomputes the worked examples of the self-attention notes with tapegrad and flags every wrong number"};
  std::string markdown, graphs;
  app.add_option("--markdown", markdown, "Also write the walkthrough as Markdown to this file");
  app.add_option("--graphs", graphs,
                 "Also draw the tape of one self-attention forward and backward, parameter-free and learnable, "
                 "into this folder (.dot, and .svg when Graphviz's dot is installed)");
  if (const auto stop = examples::parse_command_line(app, "walkthrough", argc, argv)) return *stop;
  return run_program("walkthrough", [&] {
    // Before the work: a device, a link or no room where a file goes is refused first.
    if (!markdown.empty()) check_writable(markdown, "walkthrough --markdown");
    if (!graphs.empty())
      for (const char* name : {"attention_parameter_free", "attention_learnable"})
        for (const char* ext : {".dot", ".svg"}) check_writable(std::filesystem::path(graphs) / (std::string(name) + ext), "walkthrough --graphs");
    const auto sections = walkthrough::run_walkthrough();
    fmt::print("{}", walkthrough::render_terminal(sections));
    if (!markdown.empty()) {
      write_file(markdown, walkthrough::render_markdown(sections), Durability::replace, "walkthrough --markdown");
      fmt::print("\nMarkdown written to {}\n", escaped(std::filesystem::path(markdown)));
    }
    if (!graphs.empty()) {
      const bool svg = dot_available();
      fmt::print("\nTape graphs written:\n");
      for (const auto& path : walkthrough::write_attention_graphs(graphs, svg)) fmt::print("  {}\n", path.string());
      if (!svg) fmt::print("No SVG: 'dot' is not on PATH; {} to draw them.\n", kGraphvizHint);
    }
    return 0;
  });
}
