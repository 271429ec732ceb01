#pragma once
// The data of the character model: a word list (one word per line), the lower-case a-z words of it,
// deduplicated and split 90/10 into training and validation words by a seed, and a word as a training
// example, framed by the end symbol '.' as in Karpathy's makemore:
//
//   "emma"   tokens  . e m m a      (the input: '.' starts every word)
//            labels  e m m a .      (the next character at each position: '.' ends the word)
//
// Vocabulary: 27 symbols, '.' (id 0) then a..z (ids 1..26). A word of n letters is n + 1 positions.

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/train/data_source.hpp"

namespace char_lm {

using tapegrad::Index;

inline constexpr std::string_view kAlphabet = ".abcdefghijklmnopqrstuvwxyz";  // id -> symbol
inline constexpr Index kVocab = static_cast<Index>(kAlphabet.size());
inline constexpr std::int32_t kEnd = 0;                      // '.': starts the input, ends the target
inline constexpr std::size_t kMaxWordLetters = 32;            // longer lines are dropped, not cut
inline constexpr std::size_t kMaxDataBytes = std::size_t{64} << 20;  // the largest --data file read
inline constexpr std::size_t kMinWords = 10;                  // fewer cannot be split 90/10

inline std::int32_t token_of(char c) { return c == '.' ? kEnd : static_cast<std::int32_t>(c - 'a' + 1); }
inline char symbol_of(std::int32_t id) { return kAlphabet[static_cast<std::size_t>(id)]; }

// What reading a word list kept and dropped.
struct WordList {
  std::vector<std::string> words;  // distinct, sorted
  Index lines = 0;        // non-empty lines read
  Index dropped = 0;      // lines that were not a word of a-z (upper case, digits, apostrophes, ...)
  Index too_long = 0;     // words of more than kMaxWordLetters letters
  Index duplicates = 0;
};

// Reads `path` (a regular file of at most kMaxDataBytes, through tapegrad's read_file) and keeps each
// line that is a word of a-z, after trimming blanks and a '\r'. Errors name `flag` and the file: one that
// cannot be read, holds NUL bytes (not text), or has fewer than kMinWords words.
WordList read_words(const std::filesystem::path& path, std::string_view flag);

struct Split {
  std::vector<std::string> train, validation;  // in the seeded shuffled order
};
// A seeded shuffle of the words, then the first 90% for training and the rest (at least one) for validation.
Split split_words(const std::vector<std::string>& words, std::uint64_t seed);

// Letters of the longest word + 1: the positions a model must see.
Index longest_sequence(const std::vector<std::string>& words);

// Words as SequenceBatch examples; each batch is padded only to its own longest word (the padding gets
// token '.' and no label), which a causal model never attends to. The words are kept sorted by length,
// so that evaluation, which walks them in order, pads little; the trainer's sampler shuffles anyway.
class WordSource final : public tapegrad::DataSource<tapegrad::SequenceBatch> {
 public:
  WordSource(std::string name, const std::vector<std::string>& words);
  std::string_view name() const override { return name_; }
  Index size() const override { return static_cast<Index>(words_.size()); }
  void fill(std::span<const Index> indices, tapegrad::SequenceBatch& out) const override;
  std::uint32_t fingerprint() const override;
  Index positions() const;  // labelled positions over all words: letters + one end each

 private:
  std::string name_;
  std::vector<std::string> words_;
};

// The bigram count model: P(next | previous) from the training words' symbol pairs (". e", "e m", ...,
// "a ."), with add-one (Laplace) smoothing, so that a pair never seen has a small probability, not 0.
class Bigram {
 public:
  explicit Bigram(const std::vector<std::string>& words);
  double probability(std::int32_t previous, std::int32_t next) const { return p_[idx(previous, next)]; }
  // Mean negative log-likelihood per predicted symbol (each letter and each end), in nats.
  double nll(const std::vector<std::string>& words) const;
  static constexpr Index count_parameters() { return kVocab * kVocab; }  // the counts
  static constexpr Index vocab() { return kVocab; }

 private:
  static std::size_t idx(std::int32_t a, std::int32_t b) { return static_cast<std::size_t>(a * kVocab + b); }
  std::array<double, static_cast<std::size_t>(kVocab* kVocab)> p_{};
};

}  // namespace char_lm
