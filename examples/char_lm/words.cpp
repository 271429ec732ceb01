#include "char_lm/words.hpp"

#include <algorithm>
#include <cmath>

#include "tapegrad/autograd/ops.hpp"  // kIgnoreLabel
#include "tapegrad/core/crc32.hpp"
#include "tapegrad/core/error.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/core/rng.hpp"

namespace char_lm {

using namespace tapegrad;

namespace {
bool is_word(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}
std::string_view trim(std::string_view s) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}
}  // namespace

WordList read_words(const std::filesystem::path& path, std::string_view flag) {
  const std::string text = read_file(path, kMaxDataBytes, flag);
  if (text.find('\0') != std::string::npos)
    fail<FormatError>("{}: '{}' is not a text file (it holds NUL bytes); give a word list, one word per line", flag,
                      escaped(path));
  WordList list;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = trim(std::string_view(text).substr(start, end - start));
    start = end + 1;
    if (line.empty()) continue;
    ++list.lines;
    if (!is_word(line))
      ++list.dropped;
    else if (line.size() > kMaxWordLetters)
      ++list.too_long;
    else
      list.words.emplace_back(line);
  }
  std::sort(list.words.begin(), list.words.end());
  const auto kept = std::unique(list.words.begin(), list.words.end());
  list.duplicates = static_cast<Index>(list.words.end() - kept);
  list.words.erase(kept, list.words.end());
  if (list.words.size() < kMinWords) {
    // Say what the other lines were: a list of long words is not "no words".
    std::string dropped;
    if (list.too_long > 0) dropped += fmt::format("; {} words are longer than {} letters", list.too_long, kMaxWordLetters);
    if (list.dropped > 0) dropped += fmt::format("; {} lines are not lower-case a-z", list.dropped);
    fail<FormatError>("{}: '{}' holds {} distinct words of lower-case letters a-z of at most {} letters (of {} non-empty "
                      "lines{}); at least {} are needed, one word per line",
                      flag, escaped(path), list.words.size(), kMaxWordLetters, list.lines, dropped, kMinWords);
  }
  return list;
}

Split split_words(const std::vector<std::string>& words, std::uint64_t seed) {
  std::vector<std::string> order = words;
  Rng rng(seed, 0x73706c6974);  // "split": a stream of its own, apart from the models' seeds
  rng.shuffle(order.begin(), order.end());
  const std::size_t n_train = std::min(order.size() - 1, order.size() * 9 / 10);
  Split s;
  s.train.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_train));
  s.validation.assign(order.begin() + static_cast<std::ptrdiff_t>(n_train), order.end());
  return s;
}

Index longest_sequence(const std::vector<std::string>& words) {
  std::size_t n = 0;
  for (const auto& w : words) n = std::max(n, w.size());
  return static_cast<Index>(n + 1);
}

// ---- WordSource -------------------------------------------------------------------------------------

WordSource::WordSource(std::string name, const std::vector<std::string>& words) : name_(std::move(name)), words_(words) {
  std::stable_sort(words_.begin(), words_.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
}

void WordSource::fill(std::span<const Index> indices, SequenceBatch& out) const {
  std::size_t longest = 0;
  for (Index i : indices) {
    if (i < 0 || i >= size()) fail<ValueError>("fill: example {} is outside data source '{}' of {} examples", i, name_, size());
    longest = std::max(longest, words_[static_cast<std::size_t>(i)].size());
  }
  const auto B = static_cast<Index>(indices.size()), T = static_cast<Index>(longest + 1);
  out.tokens.resize(Shape::mat(B, T));   // (B, T)
  out.labels.resize(Shape::mat(B, T));   // (B, T)
  out.padding.resize(Shape::mat(B, T));  // (B, T)
  out.padded = false;
  out.labelled = 0;
  for (Index b = 0; b < B; ++b) {
    const std::string& w = words_[static_cast<std::size_t>(indices[static_cast<std::size_t>(b)])];
    const auto n = static_cast<Index>(w.size());
    for (Index t = 0; t < T; ++t) {
      const bool real = t <= n;  // n letters and the end: n + 1 positions
      out.tokens.at(b, t) = real && t > 0 ? token_of(w[static_cast<std::size_t>(t - 1)]) : kEnd;
      out.labels.at(b, t) = !real ? kIgnoreLabel : t < n ? token_of(w[static_cast<std::size_t>(t)]) : kEnd;
      out.padding.at(b, t) = real ? 0 : 1;
      out.padded = out.padded || !real;
      out.labelled += real ? 1 : 0;
    }
  }
}

std::uint32_t WordSource::fingerprint() const {
  Crc32 crc;
  crc.add(kAlphabet.data(), kAlphabet.size());
  for (const auto& w : words_) {
    crc.add_le(static_cast<std::uint32_t>(w.size()));
    crc.add(w.data(), w.size());
  }
  return crc.value();
}

Index WordSource::positions() const {
  Index n = 0;
  for (const auto& w : words_) n += static_cast<Index>(w.size()) + 1;
  return n;
}

// ---- Bigram -----------------------------------------------------------------------------------------

Bigram::Bigram(const std::vector<std::string>& words) {
  std::array<double, static_cast<std::size_t>(kVocab* kVocab)> counts;
  counts.fill(1.0);  // add-one smoothing
  for (const auto& w : words) {
    std::int32_t previous = kEnd;
    for (char c : w) {
      counts[idx(previous, token_of(c))] += 1;
      previous = token_of(c);
    }
    counts[idx(previous, kEnd)] += 1;
  }
  for (std::int32_t a = 0; a < kVocab; ++a) {
    double row = 0;
    for (std::int32_t b = 0; b < kVocab; ++b) row += counts[idx(a, b)];
    for (std::int32_t b = 0; b < kVocab; ++b) p_[idx(a, b)] = counts[idx(a, b)] / row;
  }
}

double Bigram::nll(const std::vector<std::string>& words) const {
  double sum = 0;
  Index n = 0;
  for (const auto& w : words) {
    std::int32_t previous = kEnd;
    for (std::size_t i = 0; i <= w.size(); ++i) {
      const std::int32_t next = i < w.size() ? token_of(w[i]) : kEnd;
      sum -= std::log(probability(previous, next));
      previous = next;
      ++n;
    }
  }
  return sum / static_cast<double>(n);
}

}  // namespace char_lm
