#include "tapegrad/core/file_io.hpp"

#include "tapegrad/core/descriptor.hpp"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tapegrad/core/error.hpp"

namespace tapegrad {
namespace {

// FileError unless `name` in `folder` is missing or a regular file (not following a link): an atomic
// write renames over its target, which would replace a device node (as root, /dev/null), a pipe or a
// symbolic link (leaving its target stale) with a plain file. `shown` is the path messages give.
void refuse_non_regular_target(int folder, const char* name, const std::filesystem::path& shown, std::string_view op) {
  struct stat st {};
  if (::fstatat(folder, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;  // missing: it will be created
  if (S_ISREG(st.st_mode)) return;
  fail<FileError>("{}: '{}' is {}, not a regular file; it is not replaced (write to a regular file's own path)", op,
                  escaped(shown), detail::kind_of(st.st_mode));
}

// The folder `path` is in ("." for a bare name), made with its parents where missing: E naming both if it
// cannot be.
template <class E>
std::filesystem::path make_folder_of(const std::filesystem::path& path, std::string_view op) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail<E>("{}: cannot create the folder '{}' for '{}': {}", op, escaped(dir), escaped(path), ec.message());
  return dir;
}

// A limit of the file system `dir` is on (pathconf), or `fallback` where it states none.
long path_limit(const std::filesystem::path& dir, int which, long fallback) {
  const long v = ::pathconf(dir.c_str(), which);
  return v > 0 ? v : fallback;
}

}  // namespace

std::filesystem::path temporary_path(const std::filesystem::path& path) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  return dir / fmt::format(".{}.tmp-{}", path.filename().string(), ::getpid());
}

void write_file(const std::filesystem::path& path, std::string_view content, Durability durability,
                std::string_view op) {
  const std::filesystem::path dir = make_folder_of<IoError>(path, op);
  const detail::Descriptor folder(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!folder.open())
    fail<IoError>("{}: cannot open the folder '{}' for '{}': {}", op, escaped(dir), escaped(path),
                  std::strerror(errno));
  write_file_at(folder.get(), path.filename().native(), content, durability, op, path);
}

void write_file_at(int folder, std::string_view name, std::string_view content, Durability durability,
                   std::string_view op, const std::filesystem::path& shown) {
  if (name.empty() || name.find('/') != std::string_view::npos || name == "." || name == "..")
    fail<UsageError>("write_file_at: '{}' is not a file name (no folder in it)", escaped(name));
  const std::string target(name);
  refuse_non_regular_target(folder, target.c_str(), shown, op);
  const std::string tmp = fmt::format(".{}.tmp-{}", target, ::getpid());
  auto fail_io = [&](const char* what) {
    fail<IoError>("{}: {} failed for '{}': {}", op, what, escaped(shown), std::strerror(errno));
  };
  try {  // whatever fails, the temporary file is removed
    // fail_io reads errno before it throws; the descriptor is closed after, as the exception leaves.
    // O_NOFOLLOW: a link planted at the temporary file's name is not written through.
    detail::Descriptor fd(::openat(folder, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd.open()) fail_io("creating the temporary file");
    if (!detail::write_all(fd.get(), content.data(), content.size())) fail_io("writing");
    if (durability == Durability::durable && ::fsync(fd.get()) != 0) fail_io("fsync");
    if (::close(fd.release()) != 0) fail_io("closing");            // a write the kernel deferred can fail here
    refuse_non_regular_target(folder, target.c_str(), shown, op);  // again: something may have taken its place
    if (::renameat(folder, tmp.c_str(), folder, target.c_str()) != 0) fail_io("renaming into place");
  } catch (...) {
    ::unlinkat(folder, tmp.c_str(), 0);
    throw;
  }
  if (durability == Durability::durable) ::fsync(folder);  // the rename is durable once the folder's entry is on disk
}

bool is_temporary_name(std::string_view name) {
  const std::size_t at = name.rfind(".tmp-");
  return name.size() > 1 && name[0] == '.' && at != std::string_view::npos && at > 1 && at + 5 < name.size() &&
         name.find_first_not_of("0123456789", at + 5) == std::string_view::npos;
}

void check_writable(const std::filesystem::path& path, std::string_view op) {
  namespace fs = std::filesystem;
  refuse_non_regular_target(AT_FDCWD, path.c_str(), path, op);
  const fs::path dir = make_folder_of<FileError>(path, op);
  // The longest name the write gives the file system is its temporary file's.
  const fs::path tmp = temporary_path(path);
  const long name_max = path_limit(dir, _PC_NAME_MAX, NAME_MAX), path_max = path_limit(dir, _PC_PATH_MAX, PATH_MAX);
  if (static_cast<long>(tmp.filename().native().size()) > name_max)
    fail<FileError>(
        "{}: '{}' could not be written: its temporary file's name would be longer than the {} bytes the file "
        "system allows",
        op, escaped(path), name_max);
  if (static_cast<long>(tmp.native().size()) >= path_max)
    fail<FileError>(
        "{}: '{}' could not be written: the path would be {} bytes, and the system takes paths shorter than "
        "{}; choose a shorter folder",
        op, escaped(path), tmp.native().size(), path_max);
  const detail::Descriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.open() && errno != EEXIST)
    fail<FileError>("{}: '{}' could not be written: {}", op, escaped(path), std::strerror(errno));
  if (fd.open()) ::unlink(tmp.c_str());
}

namespace detail {

bool write_all(int fd, const void* data, std::size_t n, std::int64_t offset) {
  // A file-size limit (ulimit -f) makes these writes fail with EFBIG, which the writer reports, instead of
  // ending the process with SIGXFSZ, whatever the program does with that signal: it is blocked in this
  // thread while they run, and any they raised is taken off before the thread's mask is restored. So every
  // program, a user's own main() too, gets the one-line IoError and no temporary file left behind.
  sigset_t xfsz, before;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  ::pthread_sigmask(SIG_BLOCK, &xfsz, &before);
  const auto* from = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t k = offset < 0 ? ::write(fd, from + done, n - done)
                                 : ::pwrite(fd, from + done, n - done, static_cast<off_t>(offset + done));
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) errno = ENOSPC;  // a write that makes no progress is a full device
    if (k <= 0) break;
    done += static_cast<std::size_t>(k);
  }
  if (!sigismember(&before, SIGXFSZ)) {  // (blocked already: the caller's to handle)
    const int error = errno;             // the failed write's, which the writer reports
    const timespec now{};
    while (::sigtimedwait(&xfsz, nullptr, &now) == SIGXFSZ) {
    }
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    errno = error;
  }
  return done == n;
}

std::size_t read_all(int fd, void* to, std::size_t n, std::int64_t offset, const std::filesystem::path& path,
                     std::string_view op) {
  auto* into = static_cast<char*>(to);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t k = offset < 0 ? ::read(fd, into + done, n - done)
                                 : ::pread(fd, into + done, n - done, static_cast<off_t>(offset + done));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail<IoError>("{}: reading '{}' failed: {}", op, escaped(path), std::strerror(errno));
    if (k == 0) break;
    done += static_cast<std::size_t>(k);
  }
  return done;
}

const char* kind_of(mode_t mode) {
  return S_ISREG(mode)    ? "a regular file"
         : S_ISDIR(mode)  ? "a folder"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISFIFO(mode) ? "a pipe"
         : S_ISLNK(mode)  ? "a symbolic link"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a regular file";
}

Descriptor open_regular(const std::filesystem::path& path, std::string_view op, struct stat& st,
                        std::size_t max_bytes) {
  Descriptor f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!f.open()) fail<FileError>("{}: cannot open '{}': {}", op, escaped(path), std::strerror(errno));
  if (::fstat(f.get(), &st) != 0) fail<FileError>("{}: cannot read '{}': {}", op, escaped(path), std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    fail<FileError>("{}: '{}' is not a regular file ({})", op, escaped(path), kind_of(st.st_mode));
  if (static_cast<std::size_t>(st.st_size) > max_bytes)
    fail<LimitError>("{}: '{}' holds {}, more than the limit of {}", op, escaped(path),
                     format_bytes(static_cast<double>(st.st_size)), format_bytes(static_cast<double>(max_bytes)));
  return f;
}

}  // namespace detail

std::string read_file(const std::filesystem::path& path, std::size_t max_bytes, std::string_view op) {
  struct stat st {};
  const detail::Descriptor f = detail::open_regular(path, op, st, max_bytes);
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  out.resize(detail::read_all(f.get(), out.data(), out.size(), -1, path, op));  // shorter if it shrank a moment ago
  return out;
}

std::size_t read_file_pieces(const std::filesystem::path& path, std::size_t max_bytes, std::string_view op,
                             const std::function<void(std::string_view)>& piece, std::size_t piece_bytes) {
  struct stat st {};
  const detail::Descriptor f = detail::open_regular(path, op, st, max_bytes);
  // To the end of the file, not to the size fstat gave: a file in /proc reports 0 and holds text. One byte
  // past the limit is read to tell a file at the limit from a larger one.
  std::string buffer(std::max<std::size_t>(1, piece_bytes), '\0');
  std::size_t total = 0;
  for (;;) {
    const std::size_t want = std::min(buffer.size(), max_bytes - total + (max_bytes - total < buffer.size() ? 1 : 0));
    const std::size_t n = detail::read_all(f.get(), buffer.data(), want, -1, path, op);
    if (n == 0) break;
    if (n > max_bytes - total)
      fail<LimitError>("{}: '{}' holds more than the limit of {}", op, escaped(path),
                       format_bytes(static_cast<double>(max_bytes)));
    total += n;
    piece(std::string_view(buffer.data(), n));
  }
  return total;
}

}  // namespace tapegrad
