#include "tapegrad/autograd/tape_graph.hpp"

#include <cstring>
#include <iterator>
#include <vector>

#include <fmt/format.h>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/escape.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/core/process.hpp"

namespace tapegrad {
namespace {

// Text for an HTML-like DOT label: first made printable and bounded as any message makes text from
// outside (escaped), then with the five characters that HTML gives meaning written as entities, and each
// backslash doubled: Graphviz still reads \N, \G, \\ ... in an HTML label's text, after its entities
// (so &#92; would not do), and \\ alone shows one backslash.
std::string html(std::string_view text) {
  std::string out;
  for (const char c : xml_escaped(escaped(text))) {
    out += c;
    if (c == '\\') out += c;
  }
  return out;
}

// The node's attributes after its label: shape and colours by what it is, parameter, input, constant or op.
template <class T>
std::string_view style_of(const Node<T>& n) {
  if (n.parameter) return R"(shape=cylinder, style=filled, fillcolor="#ffd8a8", color="#c05600")";
  if (n.input_count == 0 && std::strcmp(n.op, "input") == 0)
    return R"(shape=box, style=filled, fillcolor="#cfe2f8", color="#2f5f98")";
  if (n.input_count == 0 && std::strcmp(n.op, "constant") == 0)
    return R"(shape=box, style="filled,dashed", fillcolor="#eeeeee", color="#777777")";
  return n.requires_grad ? R"(shape=box, style=rounded)" : R"(shape=box, style="rounded,dashed", color="#777777")";
}

// DOT text drawn by options.program, refused as `op` when it writes no SVG.
std::string draw_svg(std::string_view dot, const DotOptions& options, std::string_view op) {
  const std::vector<std::string> argv = {options.program, "-Tsvg"};
  std::string svg =
      run_filter(argv, dot, {.op = op, .timeout_seconds = options.timeout_seconds, .install_hint = kGraphvizHint});
  if (svg.find("<svg") == std::string::npos)
    fail<ProcessError>("{}: '{}' exited with status 0 but wrote no SVG ({} bytes, no <svg> element)", op,
                       escaped(options.program), svg.size());
  return svg;
}

}  // namespace

template <class T>
std::string tape_dot(const Tape<T>& tape, const TapeGraphOptions& options) {
  const std::size_t count = tape.size();
  if (count > options.max_nodes)
    fail<LimitError>(
        "tape_dot: the tape holds {} nodes, more than the {} a picture is drawn for "
        "(TapeGraphOptions::max_nodes); draw a smaller recording (one layer, a short batch)",
        count, options.max_nodes);
  fmt::memory_buffer out;
  auto put = std::back_inserter(out);
  fmt::format_to(put, "// A tapegrad tape of {} nodes (autograd/tape_graph.hpp); draw it with: dot -Tsvg -O FILE\n",
                 count);
  fmt::format_to(put, "digraph tape {{\n");
  fmt::format_to(put, "  graph [fontname=\"Helvetica\", fontsize=12, labelloc=t");
  if (!options.title.empty()) fmt::format_to(put, ", label=<<B>{}</B>>", html(options.title));
  fmt::format_to(put, "];\n  node [fontname=\"Helvetica\", fontsize=11, margin=\"0.12,0.04\"];\n");
  fmt::format_to(put, "  edge [fontname=\"Helvetica\", fontsize=9, color=\"#555555\"];\n");
  // Per node, the op whose edges last met it (count: none yet) and its edge there; that op's edges.
  std::vector<std::size_t> edge_op(count, count), edge_of(count);
  std::vector<std::pair<std::uint32_t, std::string>> edges;  // input node, the positions it fills
  for (std::size_t i = 0; i < count; ++i) {
    const Node<T>& n = tape.node_at(i);
    const TensorT<T>& value = n.val();
    // First line: the parameter's name, or the op; then what it is and its shape; then where.
    fmt::format_to(put, "  n{} [label=<<B>{}</B><BR/>{}{}", i, html(n.parameter ? n.parameter->name : n.op),
                   n.parameter ? "parameter " : "", value.shape());
    fmt::format_to(put, "<BR/><FONT POINT-SIZE=\"9\" COLOR=\"#666666\">{}:{}</FONT>", html(n.where.short_file()),
                   n.where.line);
    if (options.norms) {
      const auto norm = [](const TensorT<T>& t) { return t.array().template cast<double>().matrix().norm(); };
      fmt::format_to(put, "<BR/><FONT POINT-SIZE=\"9\">|value| {:.4g}", norm(value));
      if (const TensorT<T>* grad = tape.grad_at(i)) fmt::format_to(put, ", |grad| {:.4g}", norm(*grad));
      fmt::format_to(put, "</FONT>");
    }
    fmt::format_to(put, ">, {}];\n", style_of(n));
    // One edge from each input node, labelled, when the op has several inputs, with the positions that
    // node fills, drawn at the first of them: parameter-free attention(x, x, x) has one edge "0,1,2".
    // One pass over the inputs: a node met again adds its position to the edge it already has.
    const auto inputs = tape.inputs_of(i);
    edges.clear();
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const std::uint32_t from = inputs[k];
      if (edge_op[from] == i) {
        fmt::format_to(std::back_inserter(edges[edge_of[from]].second), ",{}", k);
        continue;
      }
      edge_op[from] = i;
      edge_of[from] = edges.size();
      edges.emplace_back(from, fmt::format("{}", k));
    }
    for (const auto& [from, positions] : edges)
      fmt::format_to(put, "  n{} -> n{}{}", from, i,
                     inputs.size() > 1 ? fmt::format(" [label=\"{}\"];\n", positions) : std::string(";\n"));
  }
  fmt::format_to(put, "}}\n");
  return fmt::to_string(out);
}

bool dot_available(const DotOptions& options) { return program_on_path(options.program); }

std::string dot_to_svg(std::string_view dot, const DotOptions& options) { return draw_svg(dot, options, "dot_to_svg"); }

template <class T>
void write_tape_dot(const Tape<T>& tape, const std::filesystem::path& path, const TapeGraphOptions& options) {
  write_file(path, tape_dot(tape, options), Durability::replace, "write_tape_dot");
}

template <class T>
void write_tape_svg(const Tape<T>& tape, const std::filesystem::path& path, const TapeGraphOptions& options,
                    const DotOptions& dot) {
  if (tape.size() > dot.max_nodes)
    fail<LimitError>(
        "write_tape_svg: the tape holds {} nodes, more than the {} that dot is asked to lay out "
        "(DotOptions::max_nodes: its time grows about as the square of the nodes); write it as DOT with "
        "write_tape_dot, or draw a smaller recording",
        tape.size(), dot.max_nodes);
  write_file(path, draw_svg(tape_dot(tape, options), dot, "write_tape_svg"), Durability::replace, "write_tape_svg");
}

template std::string tape_dot(const Tape<float>&, const TapeGraphOptions&);
template std::string tape_dot(const Tape<double>&, const TapeGraphOptions&);
template void write_tape_dot(const Tape<float>&, const std::filesystem::path&, const TapeGraphOptions&);
template void write_tape_dot(const Tape<double>&, const std::filesystem::path&, const TapeGraphOptions&);
template void write_tape_svg(const Tape<float>&, const std::filesystem::path&, const TapeGraphOptions&,
                             const DotOptions&);
template void write_tape_svg(const Tape<double>&, const std::filesystem::path&, const TapeGraphOptions&,
                             const DotOptions&);

}  // namespace tapegrad
