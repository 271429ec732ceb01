#include "tapegrad/core/process.hpp"

#include "tapegrad/core/descriptor.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/file_io.hpp"

extern char** environ;  // POSIX names it but declares it in no header (glibc: <unistd.h> with _GNU_SOURCE)

namespace tapegrad {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxErrorBytes = 4096;  // of the program's standard error, kept for the message
constexpr std::size_t kChunkBytes = 64 * 1024;

using detail::Descriptor;

// A descriptor moved above 0, 1 and 2 (free when this process was started with one of them closed), so
// that the child's dup2 onto its standard streams never meets the descriptor itself.
int above_stdio(int fd) {
  if (fd > 2) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  return moved;
}

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
  std::string_view line(errors);
  line = line.substr(0, line.find('\n'));
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

  int pair[2], out[2], err[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    fail<ProcessError>("{}: cannot make a pipe for '{}': {}", op, name, std::strerror(errno));
  Descriptor to_child(above_stdio(pair[0])), child_in(above_stdio(pair[1]));
  if (::pipe2(out, O_CLOEXEC) != 0)
    fail<ProcessError>("{}: cannot make a pipe for '{}': {}", op, name, std::strerror(errno));
  Descriptor from_out(above_stdio(out[0])), child_out(above_stdio(out[1]));
  if (::pipe2(err, O_CLOEXEC) != 0)
    fail<ProcessError>("{}: cannot make a pipe for '{}': {}", op, name, std::strerror(errno));
  Descriptor from_err(above_stdio(err[0])), child_err(above_stdio(err[1]));
  for (const Descriptor* fd : {&to_child, &child_in, &from_out, &child_out, &from_err, &child_err})
    if (!fd->open()) fail<ProcessError>("{}: cannot make a pipe for '{}': {}", op, name, std::strerror(errno));

  // The child gets the three ends as its standard streams; every other descriptor of ours is
  // close-on-exec. Its signal mask is cleared and SIGPIPE set back to the default, whatever ours are.
  Spawn spawn;
  posix_spawn_file_actions_adddup2(&spawn.actions, child_in.get(), 0);
  posix_spawn_file_actions_adddup2(&spawn.actions, child_out.get(), 1);
  posix_spawn_file_actions_adddup2(&spawn.actions, child_err.get(), 2);
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
  child_in.close();
  child_out.close();
  child_err.close();

  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::min(options.timeout_seconds, 1e9)));
  auto refuse_if_late = [&] {
    if (Clock::now() >= deadline)
      fail<ProcessError>("{}: '{}' ran past its time limit of {} s and was stopped", op, name, options.timeout_seconds);
  };
  std::string output, errors;
  std::size_t written = 0;
  if (input.empty()) to_child.close();
  char buffer[kChunkBytes];
  // Read whichever of standard output and error has data, write input whenever the program takes it.
  while (from_out.open() || from_err.open()) {
    refuse_if_late();
    pollfd fds[3];
    nfds_t n = 0;
    for (const Descriptor* fd : {&from_out, &from_err})
      if (fd->open()) fds[n++] = {fd->get(), POLLIN, 0};
    if (to_child.open()) fds[n++] = {to_child.get(), POLLOUT, 0};
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    const int ready = ::poll(fds, n, static_cast<int>(std::clamp<long long>(left, 0, INT_MAX)));
    if (ready < 0 && errno != EINTR)
      fail<ProcessError>("{}: waiting for '{}' failed: {}", op, name, std::strerror(errno));
    for (nfds_t k = 0; ready > 0 && k < n; ++k) {
      if (fds[k].revents == 0) continue;
      if (fds[k].fd == to_child.get()) {
        const std::size_t chunk = std::min(input.size() - written, kChunkBytes);
        const ssize_t sent = ::send(to_child.get(), input.data() + written, chunk, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent > 0) written += static_cast<std::size_t>(sent);
        // EPIPE: the program stopped reading; its exit status says why.
        if (written == input.size() || (sent < 0 && errno != EAGAIN && errno != EINTR)) to_child.close();
        continue;
      }
      Descriptor& from = fds[k].fd == from_out.get() ? from_out : from_err;
      const ssize_t got = ::read(from.get(), buffer, sizeof buffer);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got < 0) fail<ProcessError>("{}: reading the output of '{}' failed: {}", op, name, std::strerror(errno));
      if (got == 0) {
        from.close();
      } else if (&from == &from_out) {
        output.append(buffer, static_cast<std::size_t>(got));
        if (output.size() > options.max_output_bytes)
          fail<LimitError>("{}: '{}' wrote more than {} to its standard output, the limit; it was stopped", op, name,
                           format_bytes(static_cast<double>(options.max_output_bytes)));
      } else {
        errors.append(
            buffer, std::min(static_cast<std::size_t>(got), kMaxErrorBytes - std::min(errors.size(), kMaxErrorBytes)));
      }
    }
  }
  to_child.close();

  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(spawn.pid, &status, WNOHANG);
    if (done == spawn.pid) break;
    if (done < 0 && errno != EINTR)
      fail<ProcessError>("{}: waiting for '{}' failed: {}", op, name, std::strerror(errno));
    refuse_if_late();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  spawn.pid = -1;
  if (WIFSIGNALED(status))
    fail<ProcessError>("{}: '{}' was killed by signal {} ({}){}", op, name, WTERMSIG(status),
                       strsignal(WTERMSIG(status)), first_line(errors));
  if (WEXITSTATUS(status) != 0)
    fail<ProcessError>("{}: '{}' exited with status {}{}", op, name, WEXITSTATUS(status), first_line(errors));
  return output;
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
