#pragma once
// Another program as a filter: text in on its standard input, its standard output back as a string
// (Graphviz's dot turning a tape's DOT text into SVG). The program is started from an argument list,
// never through a shell, so no name or argument is ever parsed as a command. Its standard input, output
// and errors are files in memory (Linux's memfd), the input written whole before it starts and the
// output read after it ends, so neither side waits on the other and a program that exits without reading
// all its input is no SIGPIPE here: its exit status decides. A program that cannot run or fails is a
// ProcessError (core/error.hpp) naming it and the reason, and the run is bounded in time and output size.
//
//   const std::string svg = run_filter({"dot", "-Tsvg"}, dot_text, {.op = "dot_to_svg"});

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tapegrad {

struct FilterOptions {
  std::string_view op = "run_filter";                   // starts every message
  double timeout_seconds = 60;                          // then the program is killed (SIGKILL) and the run refused
  std::size_t max_output_bytes = std::size_t{1} << 30;  // more on its standard output: killed, LimitError
  std::string_view install_hint = {};                   // for a program not found: "install Debian's graphviz (...)"
};

// Runs argv[0] (looked up on PATH unless it holds a '/') with the arguments argv[1..], writes `input` to
// its standard input and returns all it wrote to its standard output. Throws ProcessError when it cannot
// be started (not on PATH: "<op>: 'dot' is not on PATH; <install_hint>"), exits with a status other than
// 0 or is ended by a signal (naming them and the first line it wrote to its standard error), or runs past
// the timeout; LimitError past max_output_bytes. The program is never left running.
std::string run_filter(const std::vector<std::string>& argv, std::string_view input, const FilterOptions& options = {});

// Whether `program` would be found: a path (with a '/') to an executable file, or a name found as an
// executable file in a folder of PATH.
bool program_on_path(std::string_view program);

}  // namespace tapegrad
