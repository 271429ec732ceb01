// The comments' fixture of tests/cli/doc_paths.cmake (never compiled): each dangling path below must be
// reported, and only those. These exist: docs/performance.md, train/checkpoint/checkpoint.hpp,
// <tapegrad/layers/decoder_lm.hpp>, autograd/ops_*.cpp, examples/ and a train/test split (not a path).
// Dangling: examples/no_such_file.cpp, and an include path that moved, <tapegrad/train/checkpoint.hpp>.
int main() { return 0; }  // a code line's comment counts too: docs/no_such_page.md
