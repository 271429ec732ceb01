// core/file_io: bounded reads that refuse what is not a regular file before reading a byte, the folder
// lock that gives a run its output folder (a second holder is refused, naming the first; a dead holder
// leaves no lock behind), and the cleanup of a killed writer's temporary files.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <fstream>

#include "helpers.hpp"
#include "tapegrad/core/descriptor.hpp"
#include "tapegrad/core/error.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/program/output_folder.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) { return test::scratch_dir("file_io", name); }

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// Runs `body` in a child process and returns its exit status (the child never returns into doctest).
template <class F>
int in_child(F body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("read_file: the whole file under the limit, a device, a folder, a pipe or a larger file is refused unread") {
  const fs::path dir = scratch("read");
  write_text(dir / "a.txt", "hello");
  CHECK(read_file(dir / "a.txt", 5, "op") == "hello");
  CHECK(read_file(dir / "a.txt", 100, "op") == "hello");
  CHECK_THROWS_WITH_AS(read_file(dir / "a.txt", 4, "op"),
                       fmt::format("op: '{}' holds 5 bytes, more than the limit of 4 bytes", (dir / "a.txt").string()).c_str(),
                       LimitError);
  CHECK_THROWS_WITH_AS(read_file("/dev/zero", 100, "op"), "op: '/dev/zero' is not a regular file (a character device)",
                       FileError);
  CHECK_THROWS_WITH_AS(read_file(dir, 100, "op"), fmt::format("op: '{}' is not a regular file (a folder)", dir.string()).c_str(),
                       FileError);
  // A FIFO would block a reader forever if it were opened: refused from its type alone.
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(read_file(dir / "fifo", 100, "op"),
                       fmt::format("op: '{}' is not a regular file (a pipe)", (dir / "fifo").string()).c_str(), FileError);
  CHECK_THROWS_WITH_AS(read_file(dir / "missing", 100, "op"),
                       fmt::format("op: cannot open '{}': No such file or directory", (dir / "missing").string()).c_str(),
                       FileError);
  fs::remove_all(dir);
}

TEST_CASE("Descriptor: moved into itself it keeps its file open, moved to another it is closed once, by the other") {
  detail::Descriptor d(::open("/dev/null", O_RDONLY));
  REQUIRE(d.open());
  const int fd = d.get();
  detail::Descriptor& same = d;  // a self-move through a reference, as a swap of two slots can make one
  d = std::move(same);
  CHECK(d.get() == fd);
  CHECK(::fcntl(fd, F_GETFD) != -1);  // still open
  {
    detail::Descriptor other;
    other = std::move(d);
    CHECK(other.get() == fd);
    CHECK_FALSE(d.open());
  }
  CHECK(::fcntl(fd, F_GETFD) == -1);  // closed when `other` went
}

TEST_CASE("format_bytes: sizes as the messages give them, in decimal units") {
  CHECK(format_bytes(5) == "5 bytes");
  CHECK(format_bytes(37e3) == "37 KB");
  CHECK(format_bytes(9.4e9) == "9.4 GB");
  CHECK(format_bytes(4.0 * (1ull << 30)) == "4.3 GB");
}

TEST_CASE("write_file: past a file-size limit, an IoError naming the file in any program, not death by SIGXFSZ") {
  const fs::path dir = scratch("file_size_limit");
  // A child with the signal's default action, as a user's own main() has it: the library's writer, not
  // run_program, must turn the limit into an error (run_program ignores SIGXFSZ for the programs).
  const int status = in_child([&] {
    ::signal(SIGXFSZ, SIG_DFL);
    const rlimit limit{4096, 4096};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 9;
    try {
      write_file(dir / "big.bin", std::string(1 << 16, 'x'));
    } catch (const IoError& e) {
      const std::string expected =
          fmt::format("write_file: writing failed for '{}': File too large", (dir / "big.bin").string());
      return std::string(e.what()) == expected ? 0 : 1;
    } catch (...) {
      return 2;
    }
    return 3;
  });
  CHECK(status == 0);  // 128 + 25 if SIGXFSZ ended it
  CHECK(fs::is_empty(dir));  // no temporary file left
}

TEST_CASE("FolderLock: a second holder is refused, naming the first, the lock dies with its process") {
  const fs::path dir = scratch("lock");
  {
    const FolderLock first(dir / "run", "--out");
    CHECK(fs::is_directory(dir / "run"));
    // Another process (flock locks belong to the open file, so a second lock in this process would be
    // refused too, but the real case is another run).
    const int refused = in_child([&] {
      try {
        FolderLock second(dir / "run", "--out");
      } catch (const BusyError& e) {
        const std::string expected = fmt::format("--out: another run (pid {}) is using the folder '{}'; wait for it to finish "
                                                 "or choose another",
                                                 ::getppid(), (dir / "run").string());
        return std::string(e.what()) == expected ? 7 : 1;
      } catch (...) {
        return 2;
      }
      return 3;
    });
    CHECK(refused == 7);
  }
  // Released: another process takes it.
  CHECK(in_child([&] {
          FolderLock again(dir / "run", "--out");
          return 0;
        }) == 0);
  // A holder killed with SIGKILL leaves no lock behind.
  const int killed = in_child([&] {
    FolderLock held(dir / "run", "--out");
    ::raise(SIGKILL);
    return 0;
  });
  CHECK(killed == 128 + SIGKILL);
  CHECK_NOTHROW(FolderLock(dir / "run", "--out"));

  // A file where the folder should be; a folder that cannot be made.
  write_text(dir / "file", "x");
  CHECK_THROWS_WITH_AS(FolderLock(dir / "file", "--out"),
                       fmt::format("--out: '{}' is a regular file, not a folder of the run; nothing is written or removed through it (a "
                                   "link can be moved to another folder while the run writes)",
                                   (dir / "file").string())
                           .c_str(),
                       FileError);
  CHECK_THROWS_WITH_AS(FolderLock(dir / "file" / "sub", "--out"), doctest::Contains("--out: cannot create the folder"),
                       FileError);
  fs::remove_all(dir);
}

TEST_CASE("is_temporary_name: write_file's temporary names, and no user's dot-file") {
  CHECK(is_temporary_name(temporary_path("out/model.tgck").filename().native()));
  CHECK(is_temporary_name(".curve.csv.tmp-12"));
  CHECK_FALSE(is_temporary_name(".curve.csv.tmp-"));     // no pid
  CHECK_FALSE(is_temporary_name(".curve.csv.tmp-12a"));  // not a pid
  CHECK_FALSE(is_temporary_name("curve.csv.tmp-12"));    // not a dot-file
  CHECK_FALSE(is_temporary_name("..tmp-12"));            // no name before it
  CHECK_FALSE(is_temporary_name(".bashrc"));
}

TEST_CASE("OutputFolder: opening the folder removes a killed writer's .<name>.tmp-<pid> files, nothing else") {
  const fs::path dir = scratch("stale");
  for (const char* name : {".model.tgck.tmp-123", ".curve.csv.tmp-99999", ".notes.tmp-draft", ".tmp-12", "model.tgck",
                           "keep.tmp-5"})
    write_text(dir / name, "x");
  { const OutputFolder out(dir, {.program = "train"}); }
  CHECK_FALSE(fs::exists(dir / ".model.tgck.tmp-123"));
  CHECK_FALSE(fs::exists(dir / ".curve.csv.tmp-99999"));
  for (const char* kept : {".notes.tmp-draft", ".tmp-12", "model.tgck", "keep.tmp-5"}) CHECK(fs::exists(dir / kept));
  fs::remove_all(dir);
}
