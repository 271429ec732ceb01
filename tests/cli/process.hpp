#pragma once
// The command-line batteries' tools (tests/cli/battery.cpp, tests/cli/battery_files.cpp): run a program as
// a user would, in its own process, and check what it did: its exit code from the documented set, a
// one-line message, no death by a signal, bounded memory and time, and the files around it.
//
// The programs' paths come from CMake (TAPEGRAD_TRAIN, ...).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "reseal.hpp"
#include "tapegrad/core/crc32.hpp"
#include "tapegrad/core/parallel.hpp"
#include "tapegrad/core/rng.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"

namespace tapegrad::cli {

namespace fs = std::filesystem;


// Bounds for every run: a refusal is immediate, and none of these runs trains for long. They are
// generous (sanitizer builds are several times slower and larger), and far below what the issue saw
// (9.4 GB, 34 s; runs that never stopped).
constexpr double kMaxPeakMb = 1024;
constexpr double kMaxSeconds = 60;
constexpr double kKillAfterSeconds = 180;

struct Outcome {
  int code = -1;    // the exit code, if it exited
  int signal = 0;   // the signal that ended it, if one did
  bool timed_out = false;
  std::string out, err;
  double seconds = 0;
  double peak_mb = 0;
};

struct RunOptions {
  fs::path cwd;              // empty: this process's
  rlim_t max_file_bytes = 0; // nonzero: RLIMIT_FSIZE (writes past it fail with EFBIG, or raise SIGXFSZ)
  bool ignore_sigxfsz = true; // with max_file_bytes: the harness ignores SIGXFSZ; false: the program must
  rlim_t max_address_space = 0;  // nonzero: RLIMIT_AS (ulimit -v), in bytes
  std::vector<std::pair<std::string, std::string>> env = {};  // set in the child before it starts the program
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline fs::path work_root() {
  const fs::path root = fs::path(TAPEGRAD_CLI_WORK) / fmt::format("pid{}", ::getpid());
  fs::create_directories(root);
  return root;
}

// A fresh folder for one case.
inline fs::path scratch(const std::string& name) {
  const fs::path dir = work_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

struct Process {
  pid_t pid = -1;
  fs::path out, err;
  std::chrono::steady_clock::time_point start;
};

inline Process start(const std::vector<std::string>& argv, const RunOptions& o = {}) {
  static int counter = 0;
  Process p;
  const fs::path logs = work_root() / "logs";
  fs::create_directories(logs);
  p.out = logs / fmt::format("{}.out", counter);
  p.err = logs / fmt::format("{}.err", counter++);
  p.start = std::chrono::steady_clock::now();
  p.pid = ::fork();
  REQUIRE(p.pid >= 0);
  if (p.pid == 0) {
    const int out = ::open(p.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(p.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(120);
    if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) ::_exit(121);
    for (const auto& [name, value] : o.env)
      if (::setenv(name.c_str(), value.c_str(), 1) != 0) ::_exit(124);
    if (o.max_file_bytes) {
      // Ignored, it stays ignored across exec (writes past the limit fail with EFBIG); at its default it
      // kills a program that does not handle it, as a shell's `ulimit -f` would.
      ::signal(SIGXFSZ, o.ignore_sigxfsz ? SIG_IGN : SIG_DFL);
      const rlimit limit{o.max_file_bytes, o.max_file_bytes};
      if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(122);
    }
    if (o.max_address_space) {
      const rlimit limit{o.max_address_space, o.max_address_space};
      if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(125);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(123);
  }
  return p;
}

inline bool still_running(const Process& p) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(p.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

inline Outcome finish(Process& p) {
  Outcome r;
  int status = 0;
  rusage usage{};
  for (;;) {
    const pid_t done = ::wait4(p.pid, &status, WNOHANG, &usage);
    REQUIRE(done >= 0);
    if (done == p.pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count() > kKillAfterSeconds) {
      r.timed_out = true;
      ::kill(p.pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count();
  r.peak_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KB on Linux
  if (WIFEXITED(status)) r.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = slurp(p.out);
  r.err = slurp(p.err);
  return r;
}

inline Outcome run(const std::vector<std::string>& argv, const RunOptions& o = {}) {
  Process p = start(argv, o);
  return finish(p);
}

inline std::vector<std::string> with(std::string program, std::vector<std::string> args) {
  args.insert(args.begin(), std::move(program));
  return args;
}
inline std::vector<std::string> train(std::vector<std::string> args) { return with(TAPEGRAD_TRAIN, std::move(args)); }

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::string describe(const Outcome& r) {
  return fmt::format("exit {} signal {}{} in {:.2f} s, peak {:.0f} MB\nstderr:\n{}", r.code, r.signal,
                     r.timed_out ? " (killed: too slow)" : "", r.seconds, r.peak_mb, r.err);
}

// Ended by itself, in bounded time and memory.
inline void check_bounded(const Outcome& r) {
  INFO(describe(r));
  CHECK(r.signal == 0);
  CHECK_FALSE(r.timed_out);
  CHECK(r.seconds < kMaxSeconds);
  CHECK(r.peak_mb < kMaxPeakMb);
}

// Refused: the documented code, and as the last line of stderr one message "<program>: ..." (not
// prefixed twice) that contains `says`. With `one_line`, nothing else was printed to stderr.
inline void check_refused(const Outcome& r, ExitCode code, const std::string& says, bool one_line = true,
                   const std::string& program = "train") {
  check_bounded(r);
  INFO(describe(r));
  CHECK(r.code == static_cast<int>(code));
  const auto lines = lines_of(r.err);
  REQUIRE_FALSE(lines.empty());
  if (one_line) CHECK(lines.size() == 1);
  const std::string& last = lines.back();
  CHECK(last.starts_with(program + ": "));
  CHECK_FALSE(last.starts_with(program + ": " + program + ": "));
  CHECK(last.find(says) != std::string::npos);
}

inline void check_ok(const Outcome& r) {
  check_bounded(r);
  INFO(describe(r));
  CHECK(r.code == 0);
}

// A finished run of the cycle task with checkpoints at 10 and 20: what later cases damage or resume.
inline fs::path trained_run(const std::string& name) {
  const fs::path dir = scratch(name) / "run";
  check_ok(run(train({"--task", "cycle", "--steps", "20", "--eval-every", "10", "--checkpoint-every", "10", "--out",
                      dir.string()})));
  REQUIRE(fs::exists(dir / "model.tgck"));
  return dir;
}

// Every file under `dir` with its bytes.
inline std::map<std::string, std::string> snapshot_files(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != ".tapegrad.lock")
      files[fs::relative(e.path(), dir).string()] = slurp(e.path());
  return files;
}

// Every checkpoint under `dir` loads.
inline void check_all_load(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".tgck") {
      INFO(e.path().string());
      CHECK_NOTHROW(read_checkpoint(e.path()));
      ++n;
    }
  CHECK(n > 0);
}

inline void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// A tmpfs of `size` at `dir`, if this process may mount one (root in a container that allows it).
inline bool mount_tmpfs(const fs::path& dir, const std::string& size, bool read_only = false) {
  fs::create_directories(dir);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) return false;
  if (read_only && ::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
    ::umount(dir.c_str());
    return false;
  }
  return true;
}

}  // namespace tapegrad::cli
