#include "tapegrad/core/file_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "tapegrad/core/error.hpp"

namespace tapegrad {

void write_file(const std::filesystem::path& path, std::string_view content, Durability durability,
                std::string_view op) {
  namespace fs = std::filesystem;
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    fail<Error>("{}: cannot create the folder '{}' for '{}': {}", op, dir.string(), path.string(), ec.message());
  const fs::path tmp = dir / fmt::format(".{}.tmp-{}", path.filename().string(), ::getpid());
  auto fail_io = [&](const char* what) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    fail<Error>("{}: {} failed for '{}': {}", op, what, path.string(), reason);
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_io("creating the temporary file");
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail_io("writing");
    }
    done += static_cast<std::size_t>(n);
  }
  if (durability == Durability::durable && ::fsync(fd) != 0) {
    ::close(fd);
    fail_io("fsync");
  }
  if (::close(fd) != 0) fail_io("closing");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail_io("renaming into place");
  if (durability == Durability::durable) {  // the rename is durable once the folder's entry is on disk
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
}

}  // namespace tapegrad
