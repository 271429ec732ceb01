#include "gpt/text.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "tapegrad/core/crc32.hpp"
#include "tapegrad/core/error.hpp"
#include "tapegrad/core/file_io.hpp"

namespace gpt {

using namespace tapegrad;
namespace fs = std::filesystem;

constexpr Index kMinFortunes = 10;  // fortune 9 is the first validation one

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

namespace {

// The files a folder contributes: regular files (or links to one) directly in it, no '.' in the name,
// sorted by the bytes of their names.
std::vector<fs::path> files_of_folder(const fs::path& dir, std::string_view flag) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (name.find('.') == std::string::npos && fs::is_regular_file(it->path(), type_ec)) files.push_back(it->path());
  }
  if (ec) fail<FileError>("{}: cannot list the folder '{}': {}", flag, escaped(dir), ec.message());
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().native() < b.filename().native(); });
  if (files.empty())
    fail<FileError>("{}: the folder '{}' holds no file to read (it reads the regular files whose names have no '.')",
                    flag, escaped(dir));
  return files;
}

}  // namespace

Corpus read_corpus(const fs::path& path, std::string_view flag) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    fail<FileError>("{}: cannot open '{}': {}", flag, escaped(path), ec ? ec.message() : "No such file or directory");
  std::vector<fs::path> files;
  if (fs::is_directory(status))
    files = files_of_folder(path, flag);
  else if (fs::is_regular_file(status))
    files = {path};
  else
    fail<FileError>("{}: '{}' is neither a folder nor a regular file", flag, escaped(path));

  // Fortune i goes to the validation stream when i % 10 == 9, as its bytes arrive. Both streams reserve
  // room for all the text (untouched pages cost no memory), so they never grow by copying.
  struct Streams final : FortuneSplitter::Sink {
    Corpus& c;
    explicit Streams(Corpus& corpus) : c(corpus) {}
    std::string& open() { return c.fortunes % 10 == 9 ? c.validation : c.train; }
    void bytes(std::string_view b) override { open() += b; }
    void close(bool empty) override {
      if (empty) {
        ++c.empty;
        return;
      }
      open() += kSeparator;
      ++(c.fortunes % 10 == 9 ? c.validation_fortunes : c.train_fortunes);
      ++c.fortunes;
    }
  };
  Corpus c;
  std::size_t total = 0;
  for (const fs::path& file : files) total += file_size_of(file, kMaxDataBytes - std::min(total, kMaxDataBytes), flag);
  // A stream holds the text plus, per file, at most a '\n' and a separator added at its end.
  c.train.reserve(total + 3 * files.size());
  c.validation.reserve(total + 3 * files.size());
  Streams streams(c);
  FortuneSplitter splitter(streams);
  total = 0;
  for (const fs::path& file : files) {
    total += read_file_pieces(file, kMaxDataBytes - total, flag, [&](std::string_view piece) {
      if (piece.find('\0') != std::string_view::npos)
        fail<FormatError>("{}: '{}' is not a text file (it holds NUL bytes)", flag, escaped(file));
      splitter.feed(piece);
    });
    splitter.finish();
    c.files.push_back(file.filename().string());
  }
  if (c.fortunes < kMinFortunes)
    fail<FormatError>("{}: '{}' holds {} fortune{}; every 10th is for validation, so at least {} are needed (fortunes "
                      "are separated by lines that are exactly '%')",
                      flag, escaped(path), c.fortunes, c.fortunes == 1 ? "" : "s", kMinFortunes);
  return c;
}

// ---- ByteVocabulary ---------------------------------------------------------------------------------

ByteVocabulary::ByteVocabulary(std::string sorted_bytes) : bytes_(std::move(sorted_bytes)) {
  std::fill(std::begin(id_), std::end(id_), -1);
  for (std::size_t i = 0; i < bytes_.size(); ++i) id_[static_cast<unsigned char>(bytes_[i])] = static_cast<std::int32_t>(i);
}

ByteVocabulary ByteVocabulary::of(std::string_view a, std::string_view b) {
  bool seen[256] = {};
  for (std::string_view s : {a, b})
    for (char ch : s) seen[static_cast<unsigned char>(ch)] = true;
  std::string bytes;
  for (int v = 0; v < 256; ++v)
    if (seen[v]) bytes += static_cast<char>(v);
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

TokenBytes ByteVocabulary::encode_in_place(std::string&& text, std::string_view what) const {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (id_[b] < 0)
      fail<ValueError>("{}: byte 0x{:02x} ('{}') at position {} is not in the vocabulary of {} bytes", what, b,
                       show_byte(b), i, size());
    text[i] = static_cast<char>(id_[b]);
  }
  return std::make_shared<const std::string>(std::move(text));
}

std::string ByteVocabulary::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (std::int32_t id : ids) out += static_cast<char>(byte(id));
  return out;
}

// ---- Windows ----------------------------------------------------------------------------------------

Index validation_windows(Index n, Index context) { return n > 0 ? (n - 1) / context : 0; }

Windows::Windows(std::string name, TokenBytes ids, Index context, Index stride, Index count)
    : name_(std::move(name)), ids_(std::move(ids)), context_(context), stride_(stride), count_(count) {
  if (count_ < 1)
    fail<ValueError>("{}: {} bytes make no window of {} bytes (--context {} + 1); give a shorter --context or more text",
                     name_, ids_->size(), context_ + 1, context_);
}

Windows Windows::training(std::string name, TokenBytes ids, Index context) {
  const Index count = static_cast<Index>(ids->size()) - context;  // starts 0 .. n - T - 1
  return Windows(std::move(name), std::move(ids), context, 1, count);
}

Windows Windows::validation(std::string name, TokenBytes ids, Index context, Index every) {
  const Index count = validation_windows(static_cast<Index>(ids->size()), context) / every;
  return Windows(std::move(name), std::move(ids), context, context * every, count);
}

void Windows::fill(std::span<const Index> indices, SequenceBatch& out) const {
  const auto B = static_cast<Index>(indices.size()), T = context_;
  out.tokens.resize(Shape::mat(B, T));
  out.labels.resize(Shape::mat(B, T));
  out.padding.resize(Shape::mat(B, T));
  out.padding.set_zero();
  out.padded = false;
  out.labelled = B * T;
  const std::span<const std::uint8_t> stream = ids();
  for (Index b = 0; b < B; ++b) {
    const Index k = indices[static_cast<std::size_t>(b)];
    if (k < 0 || k >= count_) fail<ValueError>("fill: window {} is outside '{}' of {} windows", k, name_, count_);
    const std::uint8_t* window = stream.data() + start(k);  // T + 1 tokens
    std::copy_n(window, T, out.tokens.data() + b * T);
    std::copy_n(window + 1, T, out.labels.data() + b * T);
  }
}

std::uint32_t Windows::fingerprint() const {
  Crc32 crc;
  for (Index v : {context_, stride_, count_}) crc.add_le(static_cast<std::uint64_t>(v));
  std::array<unsigned char, 4096> words{};  // the ids as 32-bit little-endian words, 1024 at a time
  const std::span<const std::uint8_t> stream = ids();
  for (std::size_t i = 0; i < stream.size();) {
    std::size_t n = 0;
    for (; n < words.size() && i < stream.size(); n += 4, ++i) words[n] = stream[i];  // the upper bytes stay 0
    crc.add(words.data(), n);
  }
  return crc.value();
}

// ---- Bigram ---------------------------------------------------------------------------------------------

Bigram::Bigram(std::span<const std::uint8_t> train, Index vocab)
    : vocab_(vocab), p_(static_cast<std::size_t>(vocab * vocab), 1.0) {  // every count starts at one: add-one
  for (std::size_t i = 0; i + 1 < train.size(); ++i) p_[idx(train[i], train[i + 1])] += 1;
  for (Index a = 0; a < vocab; ++a) {
    double row = 0;
    for (Index b = 0; b < vocab; ++b) row += p_[idx(a, b)];
    for (Index b = 0; b < vocab; ++b) p_[idx(a, b)] /= row;
  }
}

double Bigram::nll(std::span<const std::uint8_t> ids, Index predicted) const {
  if (predicted < 1 || predicted >= static_cast<Index>(ids.size()))
    fail<ValueError>("bigram nll: {} bytes to predict of a stream of {}", predicted, ids.size());
  double sum = 0;
  for (Index i = 0; i < predicted; ++i)
    sum -= std::log(probability(ids[static_cast<std::size_t>(i)], ids[static_cast<std::size_t>(i + 1)]));
  return sum / static_cast<double>(predicted);
}

}  // namespace gpt
