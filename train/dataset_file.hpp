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
// A malformed line is a FormatError naming the file and line: "data.txt:3: 4 tokens but 3 labels"; so is
// a file without a single label.

#include <cstddef>
#include <filesystem>
#include <string_view>

#include "tapegrad/train/data.hpp"

namespace tapegrad {

inline constexpr std::string_view kPadToken = "<pad>";
inline constexpr std::string_view kNoLabel = "_";

// The largest data file read_dataset takes by default (a larger one is a LimitError, before it is read).
inline constexpr std::size_t kMaxDataBytes = std::size_t{1} << 30;  // 1 GiB

// The text of a data file, refused (LimitError naming the file, its size and `max_memory_bytes`) when
// parsing it would take more than that, before it is parsed: a pass over its bytes that allocates nothing
// counts its lines and tokens (labels included), and bounds the memory the parsed dataset needs beside the
// text (each token's id and label, in vectors that may double; each example's vectors; a vocabulary entry
// per token at worst). A program calls it before it parses (train --max-memory).
std::string read_dataset_text(const std::filesystem::path& path, double max_memory_bytes,
                              std::size_t max_bytes = kMaxDataBytes);

// Builds the vocabularies from the data. The file must be a regular file (not a folder, a device or a
// pipe: FileError) of at most max_bytes (LimitError). A UTF-8 byte-order mark at its start is skipped.
Dataset read_dataset(const std::filesystem::path& path, std::size_t max_bytes = kMaxDataBytes);
// Uses the given vocabularies (a training set's): unknown tokens or labels are errors naming them.
Dataset read_dataset(const std::filesystem::path& path, const Vocabulary& tokens, const Vocabulary& labels,
                     std::size_t max_bytes = kMaxDataBytes);

// The same from text in memory; `name` stands for the file name in errors.
Dataset parse_dataset(std::string_view text, std::string_view name);
Dataset parse_dataset(std::string_view text, std::string_view name, const Vocabulary& tokens, const Vocabulary& labels);

}  // namespace tapegrad
