#pragma once
// A file descriptor owned by one object: closed when it goes out of scope (writing and reading a file,
// the pipes to a child process, a run's output folder held open); the loops of whole reads and writes
// the library's file writers (write_file, token files) and readers share; the little-endian fields of
// their formats; and what a path that is not a regular file is, in their messages. Internal: not part of
// the umbrella header.

#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string_view>
#include <utility>

namespace tapegrad::detail {

class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(int fd) : fd_(fd) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor(Descriptor&& other) noexcept : fd_(other.release()) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    const int fd = other.release();  // before close(): a move into itself keeps its descriptor open
    close();
    fd_ = fd;
    return *this;
  }
  ~Descriptor() { close(); }
  int release() { return std::exchange(fd_, -1); }  // the descriptor, no longer owned
  int get() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }

 private:
  int fd_ = -1;
};

// All `n` bytes written at `offset` (pwrite; offset < 0: write, at the current position), retrying after
// a signal; false, with errno set, if the system failed a write (ENOSPC for one that makes no progress: a
// full device; EFBIG past a file-size limit, which ends no process here: see write_all).
bool write_all(int fd, const void* data, std::size_t n, std::int64_t offset = -1);
// Up to `n` bytes read into `to` at `offset` (pread; offset < 0: read, from the current position),
// retrying after a signal: fewer only where the file ends. IoError "<op>: reading '<path>' failed: <why>".
std::size_t read_all(int fd, void* to, std::size_t n, std::int64_t offset, const std::filesystem::path& path,
                     std::string_view op);
// `path` opened for reading, if it is a regular file of at most `max_bytes` (its status in `st`), before a
// byte is read. FileError for one that cannot be opened or is not a regular file (a folder, a device, a
// pipe: O_NONBLOCK, so that a FIFO does not hang the open), LimitError for a larger one, each starting
// "<op>: " and naming the path.
Descriptor open_regular(const std::filesystem::path& path, std::string_view op, struct stat& st,
                        std::size_t max_bytes = std::numeric_limits<std::size_t>::max());

// An unsigned integer as `sizeof(U)` bytes at p, least significant first, whatever the machine's order.
template <class U>
U get_le(const void* p) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) v |= std::uint64_t{static_cast<const unsigned char*>(p)[i]} << (8 * i);
  return static_cast<U>(v);
}

template <class U>
void put_le(void* p, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i)
    static_cast<unsigned char*>(p)[i] = static_cast<unsigned char>(v >> (8 * i));
}

// What a file of this mode is, for messages: "a regular file", "a folder", "a pipe", "a symbolic link", ...
const char* kind_of(mode_t mode);

}  // namespace tapegrad::detail
