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
// Preparation (gpt/prepare.hpp) streams the two streams once into token files of their bytes; training,
// the curves and sampling read those in place (train/data_tokens.hpp), so memory does not grow with the
// text.
//
// Training batches: B windows of T + 1 bytes at uniform random starts in the training stream: the input is
// bytes [s, s + T), the targets bytes [s + 1, s + T + 1). The starts are the trainer's sampler's, a seeded
// order of every start, drawn B at a time (so a start does not repeat within one pass over all of them,
// 2.3 million on the fortunes: no window repeats in a default run), computed at each draw, so neither
// memory nor a checkpoint grows with the text (train/data.hpp).
// Validation: the stream cut into consecutive windows of T + 1 bytes advancing by T, the last partial
// window dropped: every byte after the first is predicted once, as far as whole windows reach. The table
// evaluates all of them, or, past --eval-windows of them, a seeded sample of that many with its standard
// error. Loss in nats per predicted byte.

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/train/data_source.hpp"

namespace gpt {

using tapegrad::Index;

inline constexpr std::string_view kFortunes = "/usr/share/games/fortunes";  // Debian's fortunes-min/fortunes
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

// Bytes <-> token ids: the sorted set of the bytes it was made from.
class ByteVocabulary {
 public:
  ByteVocabulary() = default;
  static ByteVocabulary of(std::string_view a, std::string_view b);  // the bytes of both
  static ByteVocabulary of_counts(const std::array<std::uint64_t, 256>& counts);  // the bytes counted at least once
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
  // Each byte's id, -1 for a byte outside: how TokenWindows reads a file of bytes as this vocabulary's ids.
  std::vector<std::int32_t> map() const { return {std::begin(id_), std::end(id_)}; }
  std::string decode(std::span<const std::int32_t> ids) const;

 private:
  explicit ByteVocabulary(std::string sorted_bytes);
  std::string bytes_;
  std::int32_t id_[256] = {};
};

// "a", "\n", "0xe2": a byte as a picture's label or a message shows it.
std::string show_byte(unsigned char b);

// The fingerprint of windows as tapegrad recorded it before token files, when the stream was held in memory:
// the CRC-32 of the windows' T, stride and count (64-bit little-endian) and of every id of the stream (the
// vocabulary's, through the windows' map) as a 32-bit little-endian word. A pass over the whole file:
// what resuming a checkpoint of then costs, once.
std::uint32_t held_fingerprint(const tapegrad::TokenWindows& windows);

// The bigram count model over bytes, the floor: P(next | previous) from the training stream's pairs with
// add-one (Laplace) smoothing, so a pair never seen has a small probability, not 0.
class Bigram {
 public:
  // From how often byte b follows byte a in the training stream ([a * 256 + b], TextSplitWriter's counts),
  // over the vocabulary's bytes.
  Bigram(std::span<const std::uint64_t> pairs, const ByteVocabulary& vocabulary);
  double probability(Index previous, Index next) const { return p_[idx(previous, next)]; }
  // Mean negative log-likelihood in nats of the ids the windows predict, each given the one before; with
  // `per_window`, each window's mean too (a sample's standard error is theirs).
  double nll(const tapegrad::TokenWindows& windows, std::vector<double>* per_window = nullptr) const;
  Index count_parameters() const { return vocab_ * vocab_; }  // the counts
  Index vocab() const { return vocab_; }

 private:
  std::size_t idx(Index a, Index b) const { return static_cast<std::size_t>(a * vocab_ + b); }
  Index vocab_;
  std::vector<double> p_;
};

}  // namespace gpt
