#pragma once
// The data of the character GPT, exactly as issue 30 specifies it (so that other implementations can
// reproduce the numbers):
//
//   files       every regular file directly in the --data folder whose name has no '.', in byte order of
//               the names (Debian's fortunes: 43 files; art.dat, art.u8 are left out), or the one --data file
//   fortunes    each file split at lines that are exactly "%"; a fortune is the bytes of the lines between
//               two separators, each line with its '\n' (one is added to a last line without it); empty
//               fortunes are dropped
//   split       fortune i (from 0, over all files in that order) is validation when i % 10 == 9, else training
//   streams     each split's fortunes concatenated, each followed by "%\n"
//   vocabulary  bytes: the sorted set of the bytes of both streams, token id = rank in that set
//
// Training batches: B windows of T + 1 bytes at uniform random starts in the training stream: the input is
// bytes [s, s + T), the targets bytes [s + 1, s + T + 1). The starts are the trainer's sampler's, a seeded
// order of every start, drawn B at a time (so a start does not repeat within one pass over all of them,
// 2.3 million on the fortunes: no window repeats in a default run), computed at each draw, so neither
// memory nor a checkpoint grows with the text (train/data.hpp).
// Validation: the stream cut into consecutive windows of T + 1 bytes advancing by T, the last partial
// window dropped: every byte after the first is predicted once, as far as whole windows reach. Loss in
// nats per predicted byte.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/train/data_source.hpp"

namespace gpt {

using tapegrad::Index;

inline constexpr std::string_view kFortunes = "/usr/share/games/fortunes";  // Debian's fortunes-min/fortunes
inline constexpr std::size_t kMaxDataBytes = std::size_t{256} << 20;           // all files of --data together
inline constexpr std::string_view kSeparator = "%\n";                          // follows every fortune in a stream

// One file's fortunes, in order, and how many empty ones it held.
struct FileFortunes {
  std::vector<std::string> fortunes;
  Index empty = 0;
};
FileFortunes split_fortunes(std::string_view text);

// split_fortunes as the text streams past, in pieces of any size, for a reader that must not hold a file
// twice: it hands each fortune's bytes to the sink as they come (each line with its '\n') and closes the
// fortune at a "%" line or the end, holding nothing in between but whether a line began with '%'.
class FortuneSplitter {
 public:
  struct Sink {
    virtual void bytes(std::string_view b) = 0;  // the open fortune's next bytes
    virtual void close(bool empty) = 0;          // a "%" line (or the text's end, after a fortune)
   protected:
    ~Sink() = default;
  };
  explicit FortuneSplitter(Sink& sink) : sink_(sink) {}
  void feed(std::string_view piece);
  void finish();  // the end of the file's text

 private:
  void emit(std::string_view b);
  Sink& sink_;
  bool line_start_ = true;  // the next byte begins a line
  bool percent_ = false;    // the line so far is "%"
  bool open_ = false;       // the fortune has bytes
};

// What reading --data found: the files, the fortunes, the two streams.
struct Corpus {
  std::vector<std::string> files;  // the names read, in the order read
  Index fortunes = 0;              // kept (non-empty), over all files
  Index empty = 0;                 // dropped
  Index train_fortunes = 0, validation_fortunes = 0;
  std::string train, validation;   // the streams
};

// Reads a folder (its files as above) or one file. Errors name `flag` and the path: a path that is
// missing or neither a folder nor a regular file, a folder with no file to read, a file that is not text
// (it holds NUL bytes), more than kMaxDataBytes in all, or fewer than 10 fortunes (then no validation).
// Each file is read in pieces straight into the streams, so reading holds the text once.
Corpus read_corpus(const std::filesystem::path& path, std::string_view flag);

// A stream's token ids, one byte each, shared by the windows that read it (validation and the curve).
using TokenBytes = std::shared_ptr<const std::string>;

// Bytes <-> token ids: the sorted set of the bytes it was made from.
class ByteVocabulary {
 public:
  ByteVocabulary() = default;
  static ByteVocabulary of(std::string_view a, std::string_view b);  // the bytes of both
  // From the hex form (two lowercase digits a byte, ascending): ValueError naming `what` otherwise.
  static ByteVocabulary from_hex(std::string_view hex, std::string_view what);
  std::string hex() const;
  Index size() const { return static_cast<Index>(bytes_.size()); }
  const std::string& bytes() const { return bytes_; }
  bool contains(unsigned char b) const { return id_[b] >= 0; }
  std::int32_t id(unsigned char b) const { return id_[b]; }  // -1 for a byte outside
  unsigned char byte(std::int32_t id) const { return static_cast<unsigned char>(bytes_[static_cast<std::size_t>(id)]); }
  // Every byte's id; a byte outside the vocabulary is a ValueError, "<what>: byte 0x7e ('~') at position 3
  // is not in the vocabulary of 114 bytes".
  std::vector<std::int32_t> encode(std::string_view text, std::string_view what) const;
  // The same for a whole stream, in place and a byte an id (a byte vocabulary has at most 256): the
  // training text becomes its ids without a second copy, a quarter of 32-bit ids' size.
  TokenBytes encode_in_place(std::string&& text, std::string_view what) const;
  std::string decode(std::span<const std::int32_t> ids) const;

 private:
  explicit ByteVocabulary(std::string sorted_bytes);
  std::string bytes_;
  std::int32_t id_[256] = {};
};

// "a", "\n", "0xe2": a byte as a picture's label or a message shows it.
std::string show_byte(unsigned char b);

// Windows of T + 1 tokens of one stream as SequenceBatch examples (tokens and targets (B, T), no padding):
// example k starts at starts[k]. Two kinds, by where the starts are:
//   training    every start, 0 .. n - T - 1 (the sampler draws them at random)
//   validation  k T for the consecutive windows, each `every`-th of them (1: all)
class Windows final : public tapegrad::DataSource<tapegrad::SequenceBatch> {
 public:
  static Windows training(std::string name, TokenBytes ids, Index context);
  static Windows validation(std::string name, TokenBytes ids, Index context, Index every = 1);
  std::string_view name() const override { return name_; }
  Index size() const override { return count_; }
  void fill(std::span<const Index> indices, tapegrad::SequenceBatch& out) const override;
  // The CRC-32 of the windows' geometry and of the ids as 32-bit little-endian words: what it was when
  // the ids were held as such, so checkpoints written then resume.
  std::uint32_t fingerprint() const override;
  Index context() const { return context_; }
  Index predicted() const { return count_ * context_; }  // bytes whose loss a pass over every window averages
  Index start(Index k) const { return k * stride_; }
  std::span<const std::uint8_t> ids() const {  // the whole stream
    return {reinterpret_cast<const std::uint8_t*>(ids_->data()), ids_->size()};
  }

 private:
  Windows(std::string name, TokenBytes ids, Index context, Index stride, Index count);
  std::string name_;
  TokenBytes ids_;
  Index context_, stride_, count_;
};

// Consecutive windows in the validation stream of `n` bytes: floor((n - 1) / T).
Index validation_windows(Index n, Index context);

// The bigram count model over bytes, the floor: P(next | previous) from the training stream's pairs with
// add-one (Laplace) smoothing, so a pair never seen has a small probability, not 0.
class Bigram {
 public:
  Bigram(std::span<const std::uint8_t> train, Index vocab);
  double probability(Index previous, Index next) const { return p_[idx(previous, next)]; }
  // Mean negative log-likelihood in nats of bytes 1 .. predicted of `ids`, each given the one before:
  // the bytes the validation windows predict.
  double nll(std::span<const std::uint8_t> ids, Index predicted) const;
  Index parameter_count() const { return vocab_ * vocab_; }  // the counts
  Index vocab() const { return vocab_; }

 private:
  std::size_t idx(Index a, Index b) const { return static_cast<std::size_t>(a * vocab_ + b); }
  Index vocab_;
  std::vector<double> p_;
};

}  // namespace gpt
