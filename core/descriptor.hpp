#pragma once
// A file descriptor owned by one object: closed when it goes out of scope (writing and reading a file,
// the pipes to a child process, a run's output folder held open). Internal: not part of the umbrella header.

#include <unistd.h>

namespace tapegrad::detail {

class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(int fd) : fd_(fd) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor(Descriptor&& other) noexcept : fd_(other.release()) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = other.release();
    }
    return *this;
  }
  ~Descriptor() { close(); }
  int release() {  // the descriptor, no longer owned
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  int get() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Closes it now and says how that went (0, or -1 with errno): for a file just written, whose close
  // can report a write the kernel deferred.
  int close_checked() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_ = -1;
};

}  // namespace tapegrad::detail
