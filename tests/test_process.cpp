// core/process: another program as a filter. Big input and output both ways at once (no deadlock on a
// full pipe), failures named by exit status, signal and standard error, a time limit, an output limit, a
// program that does not read its input, and one that is not on PATH.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/process.hpp"
#include "helpers.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

// An executable shell script in a scratch folder: a stand-in for a program that misbehaves.
fs::path script(const fs::path& dir, const std::string& name, const std::string& body) {
  const fs::path path = dir / name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

}  // namespace

TEST_CASE("run_filter: 20 MB in and out at once come back whole, without a deadlock on a full pipe") {
  std::string input;
  for (int i = 0; input.size() < 20'000'000; ++i) input += fmt::format("line {}\n", i);
  // cat writes as it reads: with input written first and output read after, both pipes fill and hang.
  CHECK(run_filter({"cat"}, input) == input);
  CHECK(run_filter({"cat"}, "") == "");
}

TEST_CASE("run_filter: a failing program is named with its exit status and the first line of its errors") {
  const fs::path dir = test::scratch_dir("process", "fails");
  const fs::path fails = script(dir, "fails", "cat >/dev/null; echo 'Error: bad input <here>' >&2; echo more >&2; exit 3");
  CHECK_THROWS_WITH_AS(run_filter({fails.string()}, "x", {.op = "draw"}),
                       fmt::format("draw: '{}' exited with status 3: Error: bad input <here>", fails.string()).c_str(),
                       ProcessError);
  const fs::path killed = script(dir, "killed", "kill -9 $$");
  CHECK_THROWS_WITH_AS(run_filter({killed.string()}, std::string(1'000'000, 'x'), {.op = "draw"}),
                       fmt::format("draw: '{}' was killed by signal 9 (Killed)", killed.string()).c_str(), ProcessError);
  // Exits 0 without reading 10 MB: our writes meet a closed pipe, which must be an EPIPE and not a
  // SIGPIPE that kills the test.
  CHECK(run_filter({"true"}, std::string(10'000'000, 'x')) == "");
  CHECK_THROWS_WITH_AS(run_filter({"false"}, "x", {.op = "draw"}), "draw: 'false' exited with status 1", ProcessError);
}

TEST_CASE("run_filter: a program past its time is stopped and named, and so is one past the output limit") {
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(run_filter({"sleep", "30"}, "", {.op = "draw", .timeout_seconds = 0.2}),
                       "draw: 'sleep' ran past its time limit of 0.2 s and was stopped", ProcessError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));  // not the 30 s it asked for
  // A process the program leaves behind with its standard output open does not hold the run: it ends
  // when the program does.
  CHECK(run_filter({"sh", "-c", "sleep 5 & echo done"}, "", {.timeout_seconds = 2}) == "done\n");
  CHECK_THROWS_WITH_AS(run_filter({"cat"}, std::string(100'000, 'x'), {.op = "draw", .max_output_bytes = 500}),
                       "draw: 'cat' wrote more than 500 bytes to its standard output, the limit; it was stopped",
                       LimitError);
}

TEST_CASE("run_filter: a program that is not there is named, with the hint, and never run through a shell") {
  CHECK_THROWS_WITH_AS(run_filter({"tapegrad-no-such-program"}, "x", {.op = "draw", .install_hint = "install it"}),
                       "draw: 'tapegrad-no-such-program' is not on PATH; install it", ProcessError);
  CHECK_THROWS_WITH_AS(run_filter({"/nonexistent/dot"}, "x", {.op = "draw"}),
                       "draw: cannot run '/nonexistent/dot': No such file or directory", ProcessError);
  // A shell would run this as two commands; as one program's name it is just not there, and the
  // message shows its control characters escaped.
  const fs::path dir = test::scratch_dir("process", "shell");
  const fs::path marker = dir / "ran";
  CHECK_THROWS_WITH_AS(run_filter({fmt::format("true; touch {}\n", marker.string())}, "x", {.op = "draw"}),
                       fmt::format("draw: cannot run 'true; touch {}\\x0a': No such file or directory", marker.string()).c_str(),
                       ProcessError);
  CHECK(!fs::exists(marker));
  CHECK_THROWS_AS(run_filter({}, "x"), UsageError);
  CHECK_THROWS_AS(run_filter({"cat"}, "x", {.timeout_seconds = 0}), ValueError);
}

TEST_CASE("program_on_path: names found in PATH's folders, paths to executable files") {
  CHECK(program_on_path("sh"));
  CHECK(program_on_path("/bin/sh"));
  CHECK(!program_on_path("tapegrad-no-such-program"));
  CHECK(!program_on_path("/nonexistent/sh"));
  CHECK(!program_on_path("/tmp"));  // a folder is not a program
  CHECK(!program_on_path(""));
}
