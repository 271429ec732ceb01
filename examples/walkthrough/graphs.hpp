#pragma once
// The tape of one self-attention forward and backward, drawn (autograd/tape_graph.hpp): the learnable
// layer, where Wq, Wk and Wv enter, beside the parameter-free one, on note 001's "Money Bank Grows" with
// the note's Wq, Wk, Wv. `walkthrough --graphs DIR` writes them; docs/tape_graph.md shows them.

#include <filesystem>
#include <string>
#include <vector>

namespace tapegrad::walkthrough {

struct AttentionGraph {
  std::string name;  // "attention_learnable": the files' name without the extension
  std::string dot;   // the tape as DOT, with value and gradient norms
};

// The parameter-free graph, then the learnable one.
std::vector<AttentionGraph> attention_graphs();

// Writes <name>.dot of each graph into `dir` and, when `svg`, <name>.svg drawn by Graphviz's dot; returns
// the paths written, in that order.
std::vector<std::filesystem::path> write_attention_graphs(const std::filesystem::path& dir, bool svg);

}  // namespace tapegrad::walkthrough
