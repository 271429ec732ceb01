#pragma once
// Token files: a corpus's token ids on disk, read in place, so that training and evaluation take the
// memory of a small corpus whatever the corpus's size (nanoGPT's train.bin / val.bin read through
// np.memmap, llm.c's .bin shards). A file is a header of 64 bytes, then the ids:
//
//   offset  bytes  (integers little-endian)
//        0      8  "tgtokens"
//        8      4  format version: 1
//       12      4  width: bytes an id, 1, 2 or 4 (unsigned)
//       16      8  vocabulary size V: every id is below it; 1 <= V <= 2^(8 width), and V <= 2^31 at width 4
//       24      8  N >= 1, the ids the file holds: exactly N x width bytes follow the header
//       32      4  CRC-32 of those N x width bytes, computed as they were written
//       36      4  CRC-32 of the header's other 60 bytes (0-35 and 40-63)
//       40     24  zero
//
// Reading is pread, a window at a time into the reader's own buffer, never mmap: a mapped file's pages
// count in the process's resident memory once touched, and the kernel maps more around each page a
// window touches, so random windows over a large file would grow the peak with the steps; and a mapped
// file that shrinks under its reader kills it with SIGBUS, where a read comes back short and becomes an
// error in one line. A read is a system call a window, small beside a step (docs/gpt.md, "Data of any
// size").
//
// What is checked, every refusal a FormatError that names the file: opening reads the header alone and
// refuses a file that is not a token file, a damaged header, a width or vocabulary the format does not
// allow, and a size other than the header's count of ids; verify() reads every id once, in constant
// memory, and refuses an id outside the vocabulary and ids other than those the header's CRC was computed
// over (a file changed after it was written); every read refuses an id outside the vocabulary, and a file
// that changed since it was opened as the system reports it: its size, modification time or change time
// (truncated, rewritten, or written with its times set back; not the last link going, as when a new file
// is renamed over it).

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/core/crc32.hpp"
#include "tapegrad/core/tensor.hpp"  // Index

namespace tapegrad {

struct TokenFileFormat {
  static constexpr std::string_view kMagic = "tgtokens";
  static constexpr std::uint32_t kVersion = 1;
  static constexpr std::size_t kHeaderBytes = 64;
};

class TokenFile {
 public:
  // Opens `path` and checks its header; `op` starts every message ("--data", "token file").
  explicit TokenFile(std::filesystem::path path, std::string op = "token file");
  // Neither copied nor moved: it is shared (std::shared_ptr<const TokenFile>, as TokenWindows reads it).
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::string& op() const { return op_; }
  int width() const { return width_; }
  Index vocab() const { return vocab_; }
  Index size() const { return count_; }  // ids
  std::uint32_t ids_crc32() const { return ids_crc_; }
  // What stands for the file's data at the cost of its header (read when it was opened, no more): the
  // CRC-32 of the header, whose width, vocabulary, count and CRC of every id change with the ids. A file
  // rewritten with other ids has another; one whose ids were changed in place and its header kept is
  // what verify() refuses.
  std::uint32_t fingerprint() const { return header_crc_; }

  // Ids [first, first + out.size()) into `out`, each checked against the vocabulary, and through `map`
  // when it is given (as verify() takes it: a FormatError naming the position for an id it has none for).
  // Allocates nothing.
  void read(Index first, std::span<std::int32_t> out, std::span<const std::int32_t> map = {}) const;
  // Reads every id once in pieces (constant memory) and checks it: below the vocabulary, and, when `map`
  // is given (an id for each of the file's, -1 for none, as TokenWindows reads it), one that maps; and
  // the CRC of all of them against the header's. Each piece of ids goes to `piece` too, if given: a
  // caller's own counts in the same pass.
  void verify(std::span<const std::int32_t> map = {},
              const std::function<void(std::span<const std::int32_t> ids)>& piece = {}) const;
  // Ids [first, first + count) handed to `piece` in order, in pieces of constant size (`at` is the
  // position of the piece's first id), each checked as read() checks it.
  void scan(Index first, Index count,
            const std::function<void(Index at, std::span<const std::int32_t> ids)>& piece) const;

 private:
  void read_bytes(Index first, Index count, unsigned char* to) const;
  // `id`, read at `position`, through `map` if there is one: FormatError outside the vocabulary or the map.
  std::int32_t mapped(std::int64_t id, Index position, std::span<const std::int32_t> map) const;

  std::filesystem::path path_;
  std::string op_;
  int fd_ = -1;
  int width_ = 0;
  Index vocab_ = 0, count_ = 0;
  std::uint32_t ids_crc_ = 0, header_crc_ = 0;
  struct stat opened_ {};  // the file as it was opened: every read checks that it is still that file
};

// Writes a token file as its ids come, in constant memory: into a temporary file beside `path`
// (temporary_path), renamed over `path` by finish(), so that a reader sees the old file or the whole new
// one, never a part. Destroyed unfinished (an error while writing, a refusal of the data), it removes the
// temporary file and leaves `path` as it was.
class TokenFileWriter {
 public:
  // ValueError for a width or vocabulary the format does not allow; FileError or IoError (naming the
  // file) if the temporary file cannot be made.
  TokenFileWriter(std::filesystem::path path, int width, Index vocab, std::string op = "token file");
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // ValueError naming the file for an id outside [0, V), before any of the call's ids is appended.
  void append(std::span<const std::int32_t> ids);
  void append_bytes(std::string_view bytes);  // width 1: each byte is its id; refused as append is
  // Writes the header and syncs the file to disk under its temporary name; finish() renames it into place
  // (completing it first if it was not). ValueError for a file of no ids; IoError naming the file when the
  // system fails a write (a full disk, a file-size limit).
  void complete();
  // With `next`: both completed, then this file placed and `next` after it; if `next` cannot be placed,
  // this file's path gets back what it held (kept by exchanging the names) or is removed if it held
  // nothing, so both are in place or neither (on a file system that cannot exchange names, some network
  // ones, as two finish() calls). ValueError if the two are one file; IoError naming where the earlier file
  // is if putting it back fails.
  void finish(TokenFileWriter* next = nullptr);

 private:
  void flush();
  void check_id(std::int64_t id) const;  // ValueError naming the file for an id outside [0, V)
  void put(unsigned char b) {
    if (fill_ == buffer_.size()) flush();
    buffer_[fill_++] = b;
  }

  std::filesystem::path path_, temporary_;
  std::string op_;
  int fd_ = -1;
  int width_;
  Index vocab_, count_ = 0;
  Crc32 crc_;                                                                             // of the ids written so far
  std::vector<unsigned char> buffer_ = std::vector<unsigned char>(std::size_t{1} << 20);  // zeros
  std::size_t fill_ = TokenFileFormat::kHeaderBytes;  // room for the header, written by complete()
  // Where the buffer's ids start: after the header's room at first.
  std::size_t ids_from_ = TokenFileFormat::kHeaderBytes;
  bool finished_ = false;
};

}  // namespace tapegrad
