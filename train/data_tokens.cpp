#include "tapegrad/train/data_tokens.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "tapegrad/core/descriptor.hpp"
#include "tapegrad/core/error.hpp"
#include "tapegrad/core/file_io.hpp"

namespace tapegrad {
namespace {

namespace fs = std::filesystem;
using detail::get_le;
using detail::put_le;

using Header = std::array<unsigned char, TokenFileFormat::kHeaderBytes>;

// The CRC-32 of the header's bytes but its own (36 to 39).
std::uint32_t header_crc(const Header& h) {
  return Crc32().add(h.data(), 36).add(h.data() + 40, h.size() - 40).value();
}

// The id of `width` little-endian bytes at p.
std::int64_t id_at(const unsigned char* p, int width) {
  return width == 1 ? p[0] : width == 2 ? get_le<std::uint16_t>(p) : get_le<std::uint32_t>(p);
}

// Ids a pass reads at once: a constant piece whatever the file's size.
constexpr Index kPieceIds = Index{1} << 18;

// Why ids of `width` bytes under a vocabulary of `vocab` are not a token file's, or "" if they are one: a
// header's (unsigned) or a writer's (signed).
template <class W, class V>
std::string shape_refusal(W width, V vocab) {
  if (width != 1 && width != 2 && width != 4)
    return fmt::format("its ids are {} bytes wide; a token file's are 1, 2 or 4", width);
  const std::uint64_t most = std::uint64_t{1} << std::min(8 * static_cast<int>(width), 31);  // ids are int32 once read
  if (vocab < 1 || std::cmp_greater(vocab, most))
    return fmt::format("its vocabulary has {} ids; ids of {} byte{} name 1 to {}", vocab, width, width == 1 ? "" : "s",
                       most);
  return {};
}
// IoError "<op>: <doing> '<file>' failed: <the system's reason>", for a writer whose system call failed.
[[noreturn]] void io_failed(std::string_view op, const fs::path& path, std::string_view doing) {
  fail<IoError>("{}: {} '{}' failed: {}", op, doing, escaped(path), std::strerror(errno));
}
// FormatError "<op>: '<file>' <what>": every refusal of what a token file holds names it so.
template <class... Args>
[[noreturn]] void refuse(const TokenFile& file, fmt::format_string<Args...> what, Args&&... args) {
  fail<FormatError>("{}: '{}' {}", file.op(), escaped(file.path()), fmt::format(what, std::forward<Args>(args)...));
}
}  // namespace

// ---- TokenFile -------------------------------------------------------------------------------------------

TokenFile::TokenFile(fs::path path, std::string op) : path_(std::move(path)), op_(std::move(op)) {
  detail::Descriptor f = detail::open_regular(path_, op_, opened_);
  Header h{};
  const std::size_t got = detail::read_all(f.get(), h.data(), h.size(), 0, path_, op_);
  const std::string_view magic(reinterpret_cast<const char*>(h.data()), TokenFileFormat::kMagic.size());
  if (got < h.size() || magic != TokenFileFormat::kMagic)
    refuse(*this, "is not a token file (it does not start with the {}-byte header '{}...')",
           TokenFileFormat::kHeaderBytes, TokenFileFormat::kMagic);
  header_crc_ = get_le<std::uint32_t>(h.data() + 36);
  if (header_crc_ != header_crc(h)) refuse(*this, "has a damaged header (its checksum does not match)");
  const auto version = get_le<std::uint32_t>(h.data() + 8);
  if (version != TokenFileFormat::kVersion)
    refuse(*this, "is a token file of format {}; this build reads format {}", version, TokenFileFormat::kVersion);
  const auto width = get_le<std::uint32_t>(h.data() + 12);
  const auto vocab = get_le<std::uint64_t>(h.data() + 16), count = get_le<std::uint64_t>(h.data() + 24);
  if (const std::string why = shape_refusal(width, vocab); !why.empty()) refuse(*this, "says {}", why);
  width_ = static_cast<int>(width);
  const auto payload =
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, opened_.st_size - static_cast<std::int64_t>(h.size())));
  if (payload % width != 0)
    refuse(*this, "holds {} bytes after its header, not a whole number of {}-byte ids", payload, width);
  if (count < 1 || count != payload / width)
    refuse(*this, "says it holds {} ids of {} byte{}, but {} bytes follow its header ({} ids)", count, width,
           width == 1 ? "" : "s", payload, payload / width);
  for (std::size_t i = 40; i < h.size(); ++i)
    if (h[i] != 0) refuse(*this, "has a header with nonzero reserved bytes");
  vocab_ = static_cast<Index>(vocab);
  count_ = static_cast<Index>(count);
  ids_crc_ = get_le<std::uint32_t>(h.data() + 32);
  fd_ = f.release();
}

TokenFile::~TokenFile() {
  if (fd_ >= 0) ::close(fd_);
}

void TokenFile::read_bytes(Index first, Index count, unsigned char* to) const {
  if (first < 0 || count < 0 || first > count_ - count)
    fail<ValueError>("{}: ids [{}, {}) are outside '{}' of {} ids", op_, first, first + count, escaped(path_), count_);
  // The file must still be the one opened, as the system reports it.
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail<IoError>("{}: cannot read '{}': {}", op_, escaped(path_), std::strerror(errno));
  if (st.st_size != opened_.st_size)
    refuse(*this, "changed while in use: it holds {} bytes, {} when it was opened (truncated or rewritten)", st.st_size,
           opened_.st_size);
  const auto moved = [](std::timespec a, std::timespec b) { return a.tv_sec != b.tv_sec || a.tv_nsec != b.tv_nsec; };
  // The last link going moves the change time too: a file renamed over this one is no change to it.
  if (moved(st.st_mtim, opened_.st_mtim) || (moved(st.st_ctim, opened_.st_ctim) && st.st_nlink == opened_.st_nlink))
    refuse(*this, "changed while in use: it was modified after it was opened (rewritten, or its times set back)");
  const auto want = static_cast<std::size_t>(count * width_);
  const std::size_t got = detail::read_all(
      fd_, to, want, static_cast<std::int64_t>(TokenFileFormat::kHeaderBytes) + first * width_, path_, op_);
  if (got < want)  // shortened between the check and the read
    refuse(*this, "changed while in use: it ends before id {} of the {} it held when it was opened (truncated)",
           first + static_cast<Index>(got) / width_, count_);
}

std::int32_t TokenFile::mapped(std::int64_t id, Index position, std::span<const std::int32_t> map) const {
  if (id >= vocab_) refuse(*this, "holds id {} at position {}, outside its vocabulary of {}", id, position, vocab_);
  if (!map.empty() && (id >= static_cast<std::int64_t>(map.size()) || map[static_cast<std::size_t>(id)] < 0))
    refuse(*this, "holds id {} at position {}, which the vocabulary it is read with does not have", id, position);
  return static_cast<std::int32_t>(map.empty() ? id : map[static_cast<std::size_t>(id)]);
}

void TokenFile::read(Index first, std::span<std::int32_t> out, std::span<const std::int32_t> map) const {
  const auto n = static_cast<Index>(out.size());
  // The raw ids go into the front of `out`, then are widened from the last back: id i's 4 bytes are
  // written only after every narrower id before it was read.
  auto* raw = reinterpret_cast<unsigned char*>(out.data());
  read_bytes(first, n, raw);
  for (Index i = n - 1; i >= 0; --i)
    out[static_cast<std::size_t>(i)] = mapped(id_at(raw + i * width_, width_), first + i, map);
}

void TokenFile::scan(Index first, Index count,
                     const std::function<void(Index, std::span<const std::int32_t>)>& piece) const {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(std::min(count, kPieceIds)));
  for (Index at = first; at < first + count; at += kPieceIds) {
    const std::span<std::int32_t> part(ids.data(), static_cast<std::size_t>(std::min(kPieceIds, first + count - at)));
    read(at, part);
    piece(at, part);
  }
}

void TokenFile::verify(std::span<const std::int32_t> map,
                       const std::function<void(std::span<const std::int32_t>)>& piece) const {
  std::vector<unsigned char> raw(static_cast<std::size_t>(kPieceIds * width_));
  std::vector<std::int32_t> ids(piece ? static_cast<std::size_t>(kPieceIds) : 0);
  Crc32 crc;
  for (Index at = 0; at < count_; at += kPieceIds) {
    const Index n = std::min(kPieceIds, count_ - at);
    read_bytes(at, n, raw.data());
    crc.add(raw.data(), static_cast<std::size_t>(n * width_));
    for (Index i = 0; i < n; ++i) {
      const std::int64_t id = id_at(raw.data() + i * width_, width_);
      mapped(id, at + i, map);
      if (piece) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(id);
    }
    if (piece) piece(std::span<const std::int32_t>(ids.data(), static_cast<std::size_t>(n)));
  }
  if (crc.value() != ids_crc_)
    refuse(*this, "holds other ids than it was written with (their CRC-32 is {:08x}, its header's {:08x})", crc.value(),
           ids_crc_);
}

// ---- TokenFileWriter -------------------------------------------------------------------------------------

TokenFileWriter::TokenFileWriter(fs::path path, int width, Index vocab, std::string op)
    : path_(std::move(path)), temporary_(temporary_path(path_)), op_(std::move(op)), width_(width), vocab_(vocab) {
  if (const std::string why = shape_refusal(width, vocab); !why.empty())
    fail<ValueError>("{}: '{}': {}", op_, escaped(path_), why);
  // O_NOFOLLOW: a link planted at the temporary file's name is not written through.
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail<IoError>("{}: cannot create '{}' (for '{}'): {}", op_, escaped(temporary_), escaped(path_),
                  std::strerror(errno));
}

TokenFileWriter::~TokenFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(temporary_.c_str());
}

void TokenFileWriter::flush() {
  crc_.add(buffer_.data() + ids_from_, fill_ - ids_from_);  // the ids' CRC: what follows the header
  ids_from_ = 0;
  if (!detail::write_all(fd_, buffer_.data(), fill_)) io_failed(op_, path_, "writing");
  fill_ = 0;
}

void TokenFileWriter::check_id(std::int64_t id) const {
  if (id < 0 || id >= vocab_)
    fail<ValueError>("{}: id {} for '{}' is outside its vocabulary of {}", op_, id, escaped(path_), vocab_);
}

void TokenFileWriter::append(std::span<const std::int32_t> ids) {
  for (const std::int32_t id : ids) check_id(id);  // all before any is written: a refused call appends nothing
  for (const std::int32_t id : ids) {
    const auto v = static_cast<std::uint32_t>(id);
    for (int i = 0; i < width_; ++i) put(static_cast<unsigned char>((v >> (8 * i)) & 0xff));
    ++count_;
  }
}

void TokenFileWriter::append_bytes(std::string_view bytes) {
  if (width_ != 1)
    fail<UsageError>("{}: append_bytes writes ids of 1 byte; '{}' holds {}-byte ids", op_, escaped(path_), width_);
  if (vocab_ < 256)  // a vocabulary of 256 or more holds every byte
    for (const unsigned char id : bytes) check_id(id);
  for (std::size_t at = 0, n = 0; at < bytes.size(); at += n) {
    if (fill_ == buffer_.size()) flush();
    n = std::min(bytes.size() - at, buffer_.size() - fill_);
    std::copy_n(bytes.data() + at, n, buffer_.data() + fill_);
    fill_ += n;
  }
  count_ += static_cast<Index>(bytes.size());
}

void TokenFileWriter::complete() {
  if (fd_ < 0) return;  // completed
  if (count_ == 0) fail<ValueError>("{}: '{}' would hold no ids", op_, escaped(path_));
  flush();
  Header h{};
  std::copy(TokenFileFormat::kMagic.begin(), TokenFileFormat::kMagic.end(), h.begin());
  put_le(h.data() + 8, TokenFileFormat::kVersion);
  put_le(h.data() + 12, static_cast<std::uint32_t>(width_));
  put_le(h.data() + 16, static_cast<std::uint64_t>(vocab_));
  put_le(h.data() + 24, static_cast<std::uint64_t>(count_));
  put_le(h.data() + 32, crc_.value());
  put_le(h.data() + 36, header_crc(h));
  if (!detail::write_all(fd_, h.data(), h.size(), 0)) io_failed(op_, path_, "writing the header of");
  if (::fsync(fd_) != 0) io_failed(op_, path_, "syncing");
  if (::close(std::exchange(fd_, -1)) != 0) io_failed(op_, path_, "closing");
}

void TokenFileWriter::finish(TokenFileWriter* next) {
  complete();
  if (next) next->complete();
  if (std::error_code ec; next && fs::equivalent(temporary_, next->temporary_, ec))
    fail<ValueError>("{}: '{}' and '{}' are one file; give two", op_, escaped(path_), escaped(next->path_));
  // RENAME_EXCHANGE leaves what this file replaces under the temporary name, to be put back if `next` fails.
  // A folder is not exchanged (the rename refuses it).
  struct stat held {};
  const bool existed = ::lstat(path_.c_str(), &held) == 0 || errno != ENOENT;
  const bool kept = next && existed && !S_ISDIR(held.st_mode) &&
                    ::renameat2(AT_FDCWD, temporary_.c_str(), AT_FDCWD, path_.c_str(), RENAME_EXCHANGE) == 0;
  if (!kept && ::rename(temporary_.c_str(), path_.c_str()) != 0) io_failed(op_, path_, "renaming into place");
  finished_ = !kept;  // kept: the destructor removes the temporary name's file, the one replaced or this one
  if (!next) return;
  try {
    next->finish();
  } catch (...) {
    if (kept && ::renameat2(AT_FDCWD, temporary_.c_str(), AT_FDCWD, path_.c_str(), RENAME_EXCHANGE) != 0) {
      finished_ = true;  // the earlier file stays under the temporary name, which the message gives
      io_failed(op_, path_, fmt::format("putting back the earlier file (now '{}') as", escaped(temporary_)));
    }
    if (!existed) ::unlink(path_.c_str());
    throw;
  }
  if (kept) ::unlink(temporary_.c_str());  // the file this one replaced
  finished_ = true;
}

}  // namespace tapegrad
