#pragma once
// A recorded tape as a picture: Graphviz DOT text, and SVG drawn from it by Graphviz's `dot` program
// (Debian's graphviz). Each node shows its op, its shape and the source line that recorded it, and
// optionally the norm of its value and, after backward(), of its gradient; an edge runs from each input
// to the op that read it, labelled, when the op has several inputs, with the positions it fills
// (attention(q, k, v): 0, 1, 2; parameter-free attention(x, x, x): one edge from x labelled "0,1,2"). Leaves are drawn
// apart from ops: parameters as orange cylinders (learned, they outlive the tape), inputs as blue boxes, constants as
// grey dashed boxes, ops as white rounded boxes (dashed when they take no gradient, as they keep no inputs:
// autograd/tape.hpp, inputs_of).
//
//   Tape<double> tape;
//   Var<double> loss = sum(attention.forward(tape.input(x)));
//   tape.backward(loss);
//   write_tape_dot(tape, "attention.dot", {.norms = true});
//   write_tape_svg(tape, "attention.svg", {.norms = true});  // runs `dot -Tsvg`
//
// Every text in a label (op names, parameter names, file names, the title) is escaped (core/escape.hpp,
// then for DOT's HTML-like labels), so a hostile name can neither break the graph nor reach the
// program that draws it as anything but text. The files are written atomically (core/file_io.hpp).

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "tapegrad/autograd/tape.hpp"

namespace tapegrad {

// The most nodes written as DOT (about 0.3 KB of text a node, so at most about 300 MB), and the most
// that dot is asked to lay out as SVG: its time grows about as the square of the nodes (docs/tape_graph.md).
inline constexpr std::size_t kMaxGraphNodes = 1'000'000;
inline constexpr std::size_t kMaxSvgNodes = 5'000;

struct TapeGraphOptions {
  bool norms = false;                      // each node's value norm, and its gradient's where backward() computed one
  std::string title = {};                  // above the graph
  std::size_t max_nodes = kMaxGraphNodes;  // a larger tape is refused (LimitError)
};

// How SVG is drawn: the program (looked up on PATH, started without a shell) and its time limit.
struct DotOptions {
  std::string program = "dot";
  double timeout_seconds = 60;
  std::size_t max_nodes = kMaxSvgNodes;  // write_tape_svg refuses a larger tape (LimitError)
};

// What a message says to do when dot is missing.
inline constexpr std::string_view kGraphvizHint = "install Debian's graphviz (apt-get install graphviz)";

// Whether options.program would be found (core/process.hpp, program_on_path): SVG can be drawn.
bool dot_available(const DotOptions& options = {});

// The tape's committed nodes as a DOT digraph. LimitError past options.max_nodes. (tape_dot, write_tape_dot and
// write_tape_svg exist for Tape<float> and Tape<double>, instantiated in tape_graph.cpp.)
template <class T>
std::string tape_dot(const Tape<T>& tape, const TapeGraphOptions& options = {});

// DOT text drawn as an SVG document by `dot -Tsvg`. ProcessError (core/error.hpp) when dot is not on PATH
// (naming Debian's graphviz), exits with an error or is killed (naming the status and its first line of
// errors), runs past the time limit, or writes no SVG.
std::string dot_to_svg(std::string_view dot, const DotOptions& options = {});

// tape_dot, and tape_dot drawn by dot_to_svg, written to `path` atomically (IoError naming the path).
// write_tape_svg refuses a tape of more than dot.max_nodes nodes before it runs dot.
template <class T>
void write_tape_dot(const Tape<T>& tape, const std::filesystem::path& path, const TapeGraphOptions& options = {});
template <class T>
void write_tape_svg(const Tape<T>& tape, const std::filesystem::path& path, const TapeGraphOptions& options = {},
                    const DotOptions& dot = {});

}  // namespace tapegrad
