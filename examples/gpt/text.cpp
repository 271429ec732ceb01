#include "gpt/text.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "tapegrad/core/crc32.hpp"
#include "tapegrad/core/error.hpp"

namespace gpt {

using namespace tapegrad;

void FortuneSplitter::emit(std::string_view b) {
  open_ = true;
  sink_.bytes(b);
}

void FortuneSplitter::feed(std::string_view piece) {
  std::size_t at = 0;
  while (at < piece.size()) {
    if (percent_) {  // the line began with '%': a separator if it ends here, else a line that starts with it
      percent_ = false;
      if (piece[at] == '\n') {
        sink_.close(!open_);
        open_ = false;
        line_start_ = true;
        ++at;
        continue;
      }
      emit("%");
    } else if (line_start_ && piece[at] == '%') {
      percent_ = true;
      line_start_ = false;
      ++at;
      continue;
    }
    // The rest of the line, up to and with its '\n' if this piece holds it.
    const std::size_t newline = piece.find('\n', at);
    const std::size_t end = newline == std::string_view::npos ? piece.size() : newline + 1;
    emit(piece.substr(at, end - at));
    line_start_ = newline != std::string_view::npos;
    at = end;
  }
}

void FortuneSplitter::finish() {
  if (percent_) {  // a last line "%" without its '\n' is a separator too
    sink_.close(!open_);
    open_ = false;
  } else if (!line_start_) {
    emit("\n");  // a last line without its '\n' gets one
  }
  // The text after the last separator is a fortune too; a file that ends with its separator leaves an
  // empty one, which is not counted as dropped (there was nothing there).
  if (open_) sink_.close(false);
  open_ = false;
  percent_ = false;
  line_start_ = true;
}

FileFortunes split_fortunes(std::string_view text) {
  struct Collect final : FortuneSplitter::Sink {
    FileFortunes out;
    std::string current;
    void bytes(std::string_view b) override { current += b; }
    void close(bool empty) override {
      if (empty)
        ++out.empty;
      else
        out.fortunes.push_back(std::move(current));
      current.clear();
    }
  } collect;
  FortuneSplitter splitter(collect);
  splitter.feed(text);
  splitter.finish();
  return std::move(collect.out);
}

// ---- ByteVocabulary ---------------------------------------------------------------------------------

ByteVocabulary::ByteVocabulary(std::string sorted_bytes) : bytes_(std::move(sorted_bytes)) {
  std::fill(std::begin(id_), std::end(id_), -1);
  for (std::size_t i = 0; i < bytes_.size(); ++i) id_[static_cast<unsigned char>(bytes_[i])] = static_cast<std::int32_t>(i);
}

ByteVocabulary ByteVocabulary::of(std::string_view a, std::string_view b) {
  std::array<std::uint64_t, 256> counts{};
  for (std::string_view s : {a, b})
    for (char ch : s) ++counts[static_cast<unsigned char>(ch)];
  return of_counts(counts);
}

ByteVocabulary ByteVocabulary::of_counts(const std::array<std::uint64_t, 256>& counts) {
  std::string bytes;
  for (int v = 0; v < 256; ++v)
    if (counts[static_cast<std::size_t>(v)] > 0) bytes += static_cast<char>(v);
  return ByteVocabulary(std::move(bytes));
}

std::string ByteVocabulary::hex() const {
  std::string out;
  for (char ch : bytes_) out += fmt::format("{:02x}", static_cast<unsigned char>(ch));
  return out;
}

ByteVocabulary ByteVocabulary::from_hex(std::string_view hex, std::string_view what) {
  auto digit = [](char ch) { return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1; };
  std::string bytes;
  bool ok = !hex.empty() && hex.size() % 2 == 0 && hex.size() <= 512;
  for (std::size_t i = 0; ok && i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    ok = hi >= 0 && lo >= 0 && (bytes.empty() || static_cast<unsigned char>(bytes.back()) < hi * 16 + lo);
    bytes += static_cast<char>(hi * 16 + lo);
  }
  if (!ok)
    fail<ValueError>("{}: the vocabulary '{}' is not 1 to 256 distinct bytes in ascending order, two lowercase hex "
                     "digits each",
                     what, escaped(hex));
  return ByteVocabulary(std::move(bytes));
}

std::string show_byte(unsigned char b) {
  if (b == '\n') return "\\n";
  if (b == '\t') return "\\t";
  if (b < 0x20 || b >= 0x7f) return fmt::format("0x{:02x}", b);
  return std::string(1, static_cast<char>(b));
}

std::vector<std::int32_t> ByteVocabulary::encode(std::string_view text, std::string_view what) const {
  std::vector<std::int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (id_[b] < 0)
      fail<ValueError>("{}: byte 0x{:02x} ('{}') at position {} is not in the vocabulary of {} bytes", what, b,
                       show_byte(b), i, size());
    ids[i] = id_[b];
  }
  return ids;
}

std::string ByteVocabulary::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (std::int32_t id : ids) out += static_cast<char>(byte(id));
  return out;
}

// ---- the fingerprint of held windows ---------------------------------------------------------------

std::uint32_t held_fingerprint(const TokenWindows& windows) {
  Crc32 crc;
  for (Index v : {windows.context(), windows.stride(), windows.size()}) crc.add_le(static_cast<std::uint64_t>(v));
  const std::vector<std::int32_t>& map = windows.map();
  std::array<unsigned char, 4096> words{};  // the ids as 32-bit little-endian words, 1024 at a time
  const TokenFile& file = windows.file();
  file.scan(0, file.size(), [&](Index, std::span<const std::int32_t> ids) {
    for (std::size_t i = 0; i < ids.size();) {
      std::size_t n = 0;
      for (; n < words.size() && i < ids.size(); n += 4, ++i) {
        const auto id = static_cast<std::uint32_t>(map.empty() ? ids[i] : map[static_cast<std::size_t>(ids[i])]);
        for (std::size_t k = 0; k < 4; ++k) words[n + k] = static_cast<unsigned char>((id >> (8 * k)) & 0xff);
      }
      crc.add(words.data(), n);
    }
  });
  return crc.value();
}

// ---- Bigram ---------------------------------------------------------------------------------------------

Bigram::Bigram(std::span<const std::uint64_t> pairs, const ByteVocabulary& vocabulary)
    : vocab_(vocabulary.size()), p_(static_cast<std::size_t>(vocab_ * vocab_), 1.0) {  // every count starts at one: add-one
  if (pairs.size() != 256 * 256) fail<ValueError>("bigram: {} pair counts; bytes make 65536", pairs.size());
  for (std::size_t a = 0; a < 256; ++a)
    for (std::size_t b = 0; b < 256; ++b) {
      const std::uint64_t n = pairs[a * 256 + b];
      if (n == 0) continue;
      const std::int32_t x = vocabulary.id(static_cast<unsigned char>(a)), y = vocabulary.id(static_cast<unsigned char>(b));
      if (x < 0 || y < 0)
        fail<ValueError>("bigram: the pair 0x{:02x} 0x{:02x} is counted, but the vocabulary lacks a byte of it", a, b);
      p_[idx(x, y)] += static_cast<double>(n);
    }
  for (Index a = 0; a < vocab_; ++a) {
    double row = 0;
    for (Index b = 0; b < vocab_; ++b) row += p_[idx(a, b)];
    for (Index b = 0; b < vocab_; ++b) p_[idx(a, b)] /= row;
  }
}

double Bigram::nll(const TokenWindows& windows, std::vector<double>* per_window) const {
  const Index T = windows.context();
  std::vector<std::int32_t> ids(static_cast<std::size_t>(T + 1));
  if (per_window) per_window->clear();
  // One sum, window after window in order: over every consecutive window, the stream's bytes 1 .. n in order.
  double sum = 0;
  for (Index k = 0; k < windows.size(); ++k) {
    windows.window(k, ids);
    double mine = 0;
    for (Index t = 0; t < T; ++t) {
      const double nats = std::log(probability(ids[static_cast<std::size_t>(t)], ids[static_cast<std::size_t>(t + 1)]));
      sum -= nats;
      mine -= nats;
    }
    if (per_window) per_window->push_back(mine / static_cast<double>(T));
  }
  return sum / static_cast<double>(windows.predicted());
}

}  // namespace gpt
