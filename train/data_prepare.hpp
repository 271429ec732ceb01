#pragma once
// Preparing text once, streaming (nanoGPT's prepare.py): documents go by once, in pieces of any size,
// into a training and a validation token file (train/data_tokens.hpp) of their bytes, a byte an id
// (width 1, vocabulary 256: the files hold the text's own bytes), document i to validation when
// i % every == every - 1, each followed by a separator. Memory stays constant whatever the text's size:
// a buffer per file, and counts of what went by (which bytes occur: a byte vocabulary; which byte
// follows which in the training text: a bigram's counts).
//
//   TextSplitWriter out(dir / "train.bin", dir / "val.bin", {.validation_every = 10, .separator = "\n"});
//   read_file_pieces(path, limit, "prepare", [&](std::string_view piece) { ... out.bytes(...); out.end_document(); });
//   const TextSplitWriter::Summary s = out.finish();   // both files in place, or neither (an error)
//
// A user's program splits its own text into documents however it likes and hands them over; training
// then reads the files in place with TokenWindows (train/data_source.hpp).

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/train/data_tokens.hpp"

namespace tapegrad {

class TextSplitWriter {
 public:
  struct Options {
    Index validation_every = 10;  // document i to validation when i % every == every - 1
    std::string separator = {};   // written after every document
    std::string op = "prepare";   // starts every message
  };
  // What went by, for the vocabulary and the statistics a program reports.
  struct Summary {
    Index documents[2] = {0, 0};                   // training, validation
    Index bytes[2] = {0, 0};                       // the ids of each file, separators included
    std::array<std::uint64_t, 256> byte_counts{};  // of both files
    std::vector<std::uint64_t> train_pairs;  // [a * 256 + b]: how often byte b follows byte a in the training file
  };

  TextSplitWriter(const std::filesystem::path& train, const std::filesystem::path& validation, Options options);
  void bytes(std::string_view b);  // the open document's next bytes
  void end_document();             // the open document is whole: its separator follows, the next one opens
  Index documents() const { return summary_.documents[0] + summary_.documents[1]; }
  // Both files written whole and synced, then both renamed into place (TokenFileWriter::finish(next)): an
  // error while writing (a full disk) or a rename refused leaves the earlier pair (but on a file system
  // that cannot exchange names). ValueError if either would hold no ids, or if the two are one file.
  Summary finish();

 private:
  void write(int stream, std::string_view b);
  int open_stream() const {  // 0 training, 1 validation
    return documents() % options_.validation_every == options_.validation_every - 1 ? 1 : 0;
  }

  Options options_;
  TokenFileWriter train_, validation_;
  Summary summary_;
  int previous_ = -1;  // the training file's last byte, for its pairs
};

}  // namespace tapegrad
