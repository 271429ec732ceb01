#pragma once
// A file descriptor owned by one object: closed when it goes out of scope (writing and reading a file,
// the pipes to a child process, a run's output folder held open); and the hold on SIGXFSZ that the
// library's file writers (write_file, token files) write under. Internal: not part of the umbrella header.

#include <pthread.h>
#include <signal.h>
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

// While alive, a file-size limit (ulimit -f) makes this thread's writes fail with EFBIG, which the writer
// reports, instead of ending the process with SIGXFSZ, whatever the program does with that signal: it is
// blocked in this thread, and any the writes raised is taken off before the thread's mask is restored. So
// every program, a user's own main() too, gets the one-line IoError and no temporary file left behind.
class FileSizeSignalHeld {
 public:
  FileSizeSignalHeld() {
    sigemptyset(&xfsz_);
    sigaddset(&xfsz_, SIGXFSZ);
    ::pthread_sigmask(SIG_BLOCK, &xfsz_, &before_);
  }
  ~FileSizeSignalHeld() {
    if (sigismember(&before_, SIGXFSZ)) return;  // blocked already: the caller's to handle
    const timespec now{};
    while (::sigtimedwait(&xfsz_, nullptr, &now) == SIGXFSZ) {
    }
    ::pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }
  FileSizeSignalHeld(const FileSizeSignalHeld&) = delete;
  FileSizeSignalHeld& operator=(const FileSizeSignalHeld&) = delete;

 private:
  sigset_t xfsz_{};
  sigset_t before_{};
};

}  // namespace tapegrad::detail
