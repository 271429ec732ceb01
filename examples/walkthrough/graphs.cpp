#include "walkthrough/graphs.hpp"

#include <fmt/format.h>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/autograd/tape_graph.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/core/rng.hpp"
#include "walkthrough/notes_support.hpp"

namespace tapegrad::walkthrough {

std::vector<AttentionGraph> attention_graphs() {
  using namespace detail;
  const TensorD x = as_sequence(rows_of(e001(), {0, 1, 2}));  // (1, 3, 3): Money Bank Grows
  std::vector<AttentionGraph> graphs;
  for (const AttentionMode mode : {AttentionMode::parameter_free, AttentionMode::learnable}) {
    Rng rng(1);
    SelfAttention<double> attn("attn", {.mode = mode, .d_model = 3}, rng);
    if (mode == AttentionMode::learnable) set_weights001(attn);
    Tape<double> tape;
    // x is an input, not a constant, so that the parameter-free tape records its edges and takes a
    // gradient too: the two pictures differ only by what the layer adds.
    Var<double> loss = sum(attn.forward(tape.input(x)));
    tape.backward(loss);
    const std::string title = fmt::format("{} SelfAttention on note 001's Money Bank Grows: forward, then "
                                          "backward from sum(output)",
                                          to_string(mode));
    graphs.push_back({fmt::format("attention_{}", to_string(mode)), tape_dot(tape, {.norms = true, .title = title})});
  }
  return graphs;
}

std::vector<std::filesystem::path> write_attention_graphs(const std::filesystem::path& dir, bool svg) {
  std::vector<std::filesystem::path> written;
  for (const AttentionGraph& g : attention_graphs()) {
    written.push_back(dir / (g.name + ".dot"));
    write_file(written.back(), g.dot, Durability::replace, "walkthrough --graphs");
    if (!svg) continue;
    written.push_back(dir / (g.name + ".svg"));
    write_file(written.back(), dot_to_svg(g.dot), Durability::replace, "walkthrough --graphs");
  }
  return written;
}

}  // namespace tapegrad::walkthrough
