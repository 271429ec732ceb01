#include "tapegrad/core/process.hpp"

#include "tapegrad/core/descriptor.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tapegrad/core/error.hpp"

extern char** environ;  // POSIX names it but declares it in no header (glibc: <unistd.h> with _GNU_SOURCE)

namespace tapegrad {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxErrorBytes = 4096;  // of the program's standard error, kept for the message

using detail::Descriptor;

// posix_spawn's settings, and the child it started, killed and reaped on the way out unless it was
// reaped: whatever throws, no program is left running and no zombie is left behind.
struct Spawn {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  pid_t pid = -1;
  Spawn() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
  }
  ~Spawn() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  Spawn(const Spawn&) = delete;
  Spawn& operator=(const Spawn&) = delete;
};

// The first line the program wrote to its standard error, as a message quotes it: ": Error: ...", or
// nothing when it wrote none.
std::string first_line(const std::string& errors) {
  std::string_view line = std::string_view(errors).substr(0, errors.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  return line.empty() ? std::string() : fmt::format(": {}", escaped(line));
}

}  // namespace

std::string run_filter(const std::vector<std::string>& argv, std::string_view input, const FilterOptions& options) {
  const std::string_view op = options.op;
  if (argv.empty() || argv[0].empty()) fail<UsageError>("{}: no program to run", op);
  if (!(options.timeout_seconds > 0))
    fail<ValueError>("{}: the timeout must be a positive number of seconds, got {}", op, options.timeout_seconds);
  const std::string name = escaped(argv[0]);

  // The program's three standard streams are files in memory: its input, written whole and rewound
  // before it starts, and its output and errors, read after it ends. Neither side ever waits on the
  // other, and a program that exits without reading its input meets no closed pipe.
  auto memory_file = [&](const char* stream) {
    // Each moved above 0, 1 and 2 (free when this process was started with one of them closed), so that
    // the child's dup2 onto its standard streams never meets the descriptor itself.
    const Descriptor made(::memfd_create(stream, MFD_CLOEXEC));
    Descriptor fd(made.open() ? ::fcntl(made.get(), F_DUPFD_CLOEXEC, 3) : -1);
    if (!fd.open())
      fail<ProcessError>("{}: cannot make a file for the {} of '{}': {}", op, stream, name, std::strerror(errno));
    return fd;
  };
  Descriptor in = memory_file("input");
  const Descriptor out = memory_file("output"), err = memory_file("errors");
  if (!detail::write_all(in.get(), input.data(), input.size()) || ::lseek(in.get(), 0, SEEK_SET) != 0)
    fail<ProcessError>("{}: cannot write the input of '{}': {}", op, name, std::strerror(errno));

  // The child gets the three files as its standard streams; every other descriptor of ours is
  // close-on-exec. Its signal mask is cleared and SIGPIPE set back to the default, whatever ours are.
  Spawn spawn;
  posix_spawn_file_actions_adddup2(&spawn.actions, in.get(), 0);
  posix_spawn_file_actions_adddup2(&spawn.actions, out.get(), 1);
  posix_spawn_file_actions_adddup2(&spawn.actions, err.get(), 2);
  sigset_t none, pipe_signal;
  sigemptyset(&none);
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  posix_spawnattr_setsigmask(&spawn.attributes, &none);
  posix_spawnattr_setsigdefault(&spawn.attributes, &pipe_signal);
  posix_spawnattr_setflags(&spawn.attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));  // posix_spawnp does not write them
  args.push_back(nullptr);
  if (const int rc =
          ::posix_spawnp(&spawn.pid, argv[0].c_str(), &spawn.actions, &spawn.attributes, args.data(), environ);
      rc != 0) {
    spawn.pid = -1;
    const std::string hint = options.install_hint.empty() ? std::string() : fmt::format("; {}", options.install_hint);
    if (rc == ENOENT && argv[0].find('/') == std::string::npos)
      fail<ProcessError>("{}: '{}' is not on PATH{}", op, name, hint);
    fail<ProcessError>("{}: cannot run '{}': {}{}", op, name, std::strerror(rc), rc == ENOENT ? hint : std::string());
  }
  in.close();  // the program holds its own: the input's memory goes when it ends

  // Wait for it to end, stopping it past the deadline or once its output is over the limit (fstat: the
  // file's offset is the program's, shared, and is not moved here).
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::min(options.timeout_seconds, 1e9)));
  auto size_of = [](const Descriptor& fd) {
    struct stat st {};
    return ::fstat(fd.get(), &st) == 0 ? static_cast<std::size_t>(st.st_size) : std::size_t{0};
  };
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(spawn.pid, &status, WNOHANG);
    if (done == spawn.pid) spawn.pid = -1;  // reaped: nothing left to kill
    if (done < 0 && errno != EINTR)
      fail<ProcessError>("{}: waiting for '{}' failed: {}", op, name, std::strerror(errno));
    if (size_of(out) > options.max_output_bytes)
      fail<LimitError>("{}: '{}' wrote more than {} to its standard output, the limit; it was stopped", op, name,
                       format_bytes(static_cast<double>(options.max_output_bytes)));
    if (spawn.pid < 0) break;
    if (Clock::now() >= deadline)
      fail<ProcessError>("{}: '{}' ran past its time limit of {} s and was stopped", op, name, options.timeout_seconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto contents = [&](const Descriptor& fd, std::size_t max) {
    std::string text(std::min(size_of(fd), max), '\0');
    text.resize(detail::read_all(fd.get(), text.data(), text.size(), 0, fmt::format("the output of {}", argv[0]), op));
    return text;
  };
  const std::string errors = contents(err, kMaxErrorBytes);
  if (WIFSIGNALED(status))
    fail<ProcessError>("{}: '{}' was killed by signal {} ({}){}", op, name, WTERMSIG(status),
                       strsignal(WTERMSIG(status)), first_line(errors));
  if (WEXITSTATUS(status) != 0)
    fail<ProcessError>("{}: '{}' exited with status {}{}", op, name, WEXITSTATUS(status), first_line(errors));
  return contents(out, options.max_output_bytes);
}

bool program_on_path(std::string_view program) {
  auto executable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (program.empty()) return false;
  if (program.find('/') != std::string_view::npos) return executable(std::string(program));
  const char* path = std::getenv("PATH");
  std::string_view folders = path ? path : "/bin:/usr/bin";  // posix_spawnp's search without PATH (glibc)
  for (;;) {
    const auto colon = folders.find(':');
    const std::string_view folder = folders.substr(0, colon);
    if (executable(fmt::format("{}/{}", folder.empty() ? "." : folder, program))) return true;
    if (colon == std::string_view::npos) return false;
    folders.remove_prefix(colon + 1);
  }
}

}  // namespace tapegrad
