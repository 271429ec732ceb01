#pragma once
// The dataset file format, for training on your own toy data. One example per line:
//
//   the cat sat<TAB>DET NOUN VERB          sequence tagging: a label per token
//   a b c ? <TAB>_ _ _ b                   reading out at one position: '_' = no label there
//
// Tokens are separated by spaces, then one TAB, then exactly one label per token. Blank lines and
// lines starting with '#' are skipped. Lines may differ in length: batches pad the shorter ones and
// mask the padding. The vocabulary (token "<pad>" first, id 0) and the label set are built from the
// file in order of appearance; an evaluation file is read against the training file's.
// A malformed line is a FormatError naming the file and line: "data.txt:3: 4 tokens but 3 labels".

#include <filesystem>
#include <string_view>

#include "tapegrad/train/data.hpp"

namespace tapegrad {

inline constexpr std::string_view kPadToken = "<pad>";
inline constexpr std::string_view kNoLabel = "_";

// Builds the vocabularies from the data.
Dataset read_dataset(const std::filesystem::path& path);
// Uses the given vocabularies (a training set's): unknown tokens or labels are errors naming them.
Dataset read_dataset(const std::filesystem::path& path, const Vocabulary& tokens, const Vocabulary& labels);

// The same from text in memory; `name` stands for the file name in errors.
Dataset parse_dataset(std::string_view text, std::string_view name);
Dataset parse_dataset(std::string_view text, std::string_view name, const Vocabulary& tokens, const Vocabulary& labels);

}  // namespace tapegrad
