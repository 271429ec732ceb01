#pragma once
// A file descriptor owned by one object: closed when it goes out of scope (reading a file, the pipes to
// a child process). Internal to core/ (core/file_io.cpp, core/process.cpp).

#include <unistd.h>

namespace tapegrad::detail {

class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(int fd) : fd_(fd) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() { close(); }
  int get() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace tapegrad::detail
