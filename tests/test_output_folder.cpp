// train/program/output_folder and write_file's targets: a run's folder holds its files and nothing else of it
// is touched. The manifest names the program and its files; another program's folder, a user's file at a name
// the run writes, an earlier run without --overwrite, an input among the files --overwrite would remove, a
// device node, a pipe or a symbolic link in a target's place are all refused, naming the path, with every
// byte of the folder as it was; plan() refuses, before any work, a name too long to write.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "helpers.hpp"
#include "tapegrad/core/error.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/program/output_folder.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

// Named, not anonymous: the suite is compiled in unity batches, where test_file_io.cpp has helpers of these names.
namespace output_folder_test {

fs::path folder_scratch(const std::string& name) { return test::scratch_dir("output_folder", name); }

using test::put;
using test::slurp;

// Every entry under `dir` (the lock file aside): its kind and, for a regular file, its bytes.
std::map<std::string, std::string> folder_contents(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename() == ".tapegrad.lock") continue;
    const std::string key = fs::relative(e.path(), dir).string();
    out[key] = e.is_symlink()                                  ? "link -> " + fs::read_symlink(e.path()).string()
               : fs::is_regular_file(fs::symlink_status(e.path())) ? slurp(e.path())
                                                                    : "(not a file)";
  }
  return out;
}

OutputFolderOptions as(const std::string& program, bool overwrite = false) {
  return {.program = program, .overwrite = overwrite};
}

}  // namespace output_folder_test

using namespace output_folder_test;

TEST_CASE("OutputFolder: a run's files are listed in its manifest before they are written") {
  const fs::path dir = folder_scratch("manifest") / "run";
  {
    OutputFolder out(dir, as("train"));
    out.plan({"model.tgck", "checkpoints/checkpoint-00000010.tgck"});
    CHECK_FALSE(fs::exists(dir / ".tapegrad-run"));  // planning writes nothing
    out.write("model.tgck", "weights");
    out.write("checkpoints/checkpoint-00000010.tgck", "state");
    out.remove("checkpoints/checkpoint-00000010.tgck");
    CHECK(out.files() == std::vector<std::string>{"model.tgck"});
  }
  CHECK(slurp(dir / "model.tgck") == "weights");
  CHECK(slurp(dir / ".tapegrad-run") == "tapegrad-run 1\nprogram train\nfile model.tgck\n");
  CHECK_FALSE(fs::exists(dir / "checkpoints" / "checkpoint-00000010.tgck"));
}

TEST_CASE("OutputFolder: another program's folder is refused, and nothing in it changes") {
  const fs::path dir = folder_scratch("other") / "run";
  { OutputFolder(dir, as("train")).write("model.tgck", "train's model"); }
  const auto before = folder_contents(dir);
  CHECK_THROWS_WITH_AS(OutputFolder(dir, as("custom_model")),
                       doctest::Contains("holds the files of a train run ('model.tgck'); choose another folder for this "
                                         "custom_model run"),
                       FileError);
  CHECK_THROWS_AS(OutputFolder(dir, as("custom_model", true)), FileError);  // --overwrite does not change that
  CHECK(folder_contents(dir) == before);
}

TEST_CASE("OutputFolder: an earlier run's files go only with --overwrite, and only those, a user's file stays") {
  const fs::path dir = folder_scratch("overwrite") / "run";
  { OutputFolder(dir, as("char_lm")).write("report.md", "old report"); }
  put(dir / "my_precious_model.tgck", "mine");
  put(dir / "samples_mywords.txt", "my words");
  CHECK_THROWS_WITH_AS(OutputFolder(dir, as("char_lm")),
                       doctest::Contains("holds the files of an earlier char_lm run ('report.md'); choose a new folder, "
                                         "or --overwrite to replace them"),
                       FileError);
  {
    OutputFolder out(dir, as("char_lm", true));
    CHECK_FALSE(fs::exists(dir / "report.md"));
    CHECK(slurp(dir / "my_precious_model.tgck") == "mine");
    CHECK(slurp(dir / "samples_mywords.txt") == "my words");
    // A file the run writes that a user put there is refused, not replaced.
    CHECK_THROWS_WITH_AS(out.write("samples_mywords.txt", "x"),
                         doctest::Contains("samples_mywords.txt' is there and no earlier char_lm run in this folder wrote "
                                           "it; it is not replaced"),
                         FileError);
    CHECK_THROWS_AS(out.plan({"my_precious_model.tgck"}), FileError);
  }
  CHECK(slurp(dir / "samples_mywords.txt") == "my words");
}

TEST_CASE("OutputFolder: --overwrite refuses to remove a file this run reads, a resumed run replaces its own") {
  const fs::path dir = folder_scratch("inputs") / "run";
  { OutputFolder(dir, as("char_lm")).write("samples_bigram.txt", "words"); }
  const auto before = folder_contents(dir);
  CHECK_THROWS_WITH_AS(OutputFolder(dir, {.program = "char_lm", .overwrite = true, .inputs = {dir / "samples_bigram.txt"}}),
                       doctest::Contains("samples_bigram.txt' is an input of this run"), FileError);
  CHECK(folder_contents(dir) == before);
  OutputFolder resumed(dir, {.program = "char_lm", .resume = true});
  resumed.write("samples_bigram.txt", "new words");
  CHECK(slurp(dir / "samples_bigram.txt") == "new words");
}

TEST_CASE("write_file and OutputFolder: a device, a pipe, a folder or a symbolic link in a target's place is refused") {
  const fs::path dir = folder_scratch("targets");
  put(dir / "target.md", "the link's target");
  fs::create_symlink(dir / "target.md", dir / "link.md");
  REQUIRE(::mkfifo((dir / "pipe").c_str(), 0644) == 0);
  fs::create_directory(dir / "folder.md");
  const bool root = ::geteuid() == 0;
  if (root) REQUIRE(::mknod((dir / "null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0);  // a /dev/null of our own
  const auto before = folder_contents(dir);
  CHECK_THROWS_WITH_AS(write_file(dir / "link.md", "x"), doctest::Contains("link.md' is a symbolic link, not a regular file"),
                       FileError);
  CHECK_THROWS_WITH_AS(write_file(dir / "pipe", "x"), doctest::Contains("pipe' is a pipe, not a regular file"), FileError);
  CHECK_THROWS_WITH_AS(write_file(dir / "folder.md", "x"), doctest::Contains("is a folder, not a regular file"), FileError);
  if (root)
    CHECK_THROWS_WITH_AS(write_file(dir / "null", "x"), doctest::Contains("null' is a character device"), FileError);
  CHECK(folder_contents(dir) == before);
  CHECK(slurp(dir / "target.md") == "the link's target");
  // No temporary left behind either.
  for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("OutputFolder: plan() refuses a name whose temporary file would pass the file system's limits, before any work") {
  const fs::path base = folder_scratch("long");
  // A folder of 4070 bytes: it can be made and locked (4085 bytes with its lock file), but a checkpoint's
  // temporary file in its subfolder passes PATH_MAX (4096).
  fs::path deep = base;
  while (deep.native().size() + 201 < 4070 - 10) deep /= std::string(200, 'd');
  deep /= std::string(4070 - deep.native().size() - 1, 'e');
  REQUIRE(deep.native().size() == 4070);
  REQUIRE_NOTHROW(fs::create_directories(deep));
  OutputFolder out(deep, as("train"));
  CHECK_THROWS_WITH_AS(out.plan({"checkpoints/checkpoint-00002000.tgck"}),
                       doctest::Contains("choose a shorter folder"), FileError);
  CHECK_THROWS_WITH_AS(out.plan({std::string(250, 'n') + ".tgck"}),
                       doctest::Contains("its temporary file's name would be longer than the 255 bytes"), FileError);
  CHECK_THROWS_WITH_AS(check_writable(deep / "checkpoints" / "checkpoint-00002000.tgck", "op"),
                       doctest::Contains("op: '"), FileError);
  // Names outside the program's own alphabet are a mistake in the program.
  CHECK_THROWS_AS(out.plan({"../escape.tgck"}), UsageError);
  CHECK_THROWS_AS(out.plan({"/etc/passwd"}), UsageError);
}

TEST_CASE("OutputFolder: a damaged manifest is named, not guessed at") {
  const fs::path dir = folder_scratch("damaged");
  put(dir / ".tapegrad-run", "tapegrad-run 1\nprogram train\nfile ../../etc/passwd\n");
  CHECK_THROWS_WITH_AS(OutputFolder(dir, as("train")), doctest::Contains("is damaged (line 3: not a file of the run)"),
                       FileError);
  CHECK(fs::exists(dir / ".tapegrad-run"));
}

// A planted link in a shared folder (another user's, or a world-writable one): nothing outside the run's
// folder is removed, truncated or written, whatever the manifest lists and whatever the link is called.
TEST_CASE("OutputFolder: a link planted below the folder leads no removal, sweep, lock or write outside it") {
  const fs::path root = folder_scratch("planted");
  const fs::path outside = root / "yours", dir = root / "run";
  fs::create_directories(outside);
  fs::create_directories(dir);
  put(outside / "x.txt", "your file");
  put(outside / ".x.txt.tmp-123", "your dot-file, named like a temporary");
  put(outside / "notes.md", "your notes");
  const auto yours = folder_contents(outside);

  // 1. A listed path through a link: refused, naming the link, with or without --overwrite, even for a
  //    run of another program (which is refused anyway), and the sweep does not go through it either (3).
  fs::create_directory_symlink(outside, dir / "sub");
  put(dir / ".tapegrad-run", "tapegrad-run 1\nprogram train\nfile sub/x.txt\nfile model.tgck\n");
  put(dir / "model.tgck", "model");
  for (const bool overwrite : {true, false})
    CHECK_THROWS_WITH_AS(OutputFolder(dir, as("train", overwrite)),
                         doctest::Contains("sub' is a symbolic link, not a folder of the run"), FileError);
  CHECK_THROWS_AS(OutputFolder(dir, as("custom_model", true)), FileError);
  CHECK_THROWS_AS(OutputFolder(dir, {.program = "train", .resume = true}), FileError);
  CHECK(folder_contents(outside) == yours);
  CHECK(slurp(dir / "model.tgck") == "model");

  // A run's own write or plan through such a link is refused too.
  fs::remove(dir / ".tapegrad-run");
  fs::remove(dir / "model.tgck");
  {
    OutputFolder out(dir, as("train"));
    CHECK_THROWS_WITH_AS(out.write("sub/new.txt", "x"), doctest::Contains("sub' is a symbolic link"), FileError);
    CHECK_THROWS_AS(out.plan({"sub/new.txt"}), FileError);
    CHECK_THROWS_AS(out.claim("sub/deeper/new.txt"), FileError);
  }
  CHECK(folder_contents(outside) == yours);

  // 2. The lock file planted as a link to your file (a dangling one too), or as a hard link: refused
  //    before a byte is written.
  fs::remove(dir / ".tapegrad-run");
  fs::remove(dir / ".tapegrad.lock");
  fs::create_symlink(outside / "notes.md", dir / ".tapegrad.lock");
  CHECK_THROWS_WITH_AS(OutputFolder(dir, as("train")), doctest::Contains(".tapegrad.lock' is a symbolic link, not a regular file"),
                       FileError);
  CHECK_THROWS_AS(FolderLock(dir, "--out"), FileError);
  fs::remove(dir / ".tapegrad.lock");
  fs::create_symlink(outside / "missing.md", dir / ".tapegrad.lock");
  CHECK_THROWS_AS(FolderLock(dir, "--out"), FileError);
  CHECK_FALSE(fs::exists(outside / "missing.md"));
  fs::remove(dir / ".tapegrad.lock");
  fs::create_hard_link(outside / "notes.md", dir / ".tapegrad.lock");
  CHECK_THROWS_WITH_AS(FolderLock(dir, "--out"), doctest::Contains("is not a regular file of its own (it is a hard link"),
                       FileError);
  fs::remove(dir / ".tapegrad.lock");
  // A pipe there is named as what it is (O_NONBLOCK: the open does not hang on it).
  REQUIRE(::mkfifo((dir / ".tapegrad.lock").c_str(), 0644) == 0);
  CHECK_THROWS_WITH_AS(FolderLock(dir, "--out"), doctest::Contains(".tapegrad.lock' is a pipe, not a regular file"),
                       FileError);
  fs::remove(dir / ".tapegrad.lock");
  CHECK(folder_contents(outside) == yours);

  // The folder itself given as a link (with or without a trailing slash): refused, nothing written there.
  fs::create_directory_symlink(outside, root / "link");
  CHECK_THROWS_WITH_AS(FolderLock(root / "link", "--out"), doctest::Contains("link' is a symbolic link, not a folder of the run"),
                       FileError);
  CHECK_THROWS_AS(OutputFolder(fs::path((root / "link").string() + "/"), as("train")), FileError);
  CHECK(folder_contents(outside) == yours);
  fs::remove_all(root);
}

// The sweep of a killed writer's temporaries removes regular files only, and follows no link in the folder.
TEST_CASE("OutputFolder: the sweep leaves a link named like a temporary file, and its target") {
  const fs::path dir = folder_scratch("stale_links");
  put(dir / "target", "kept");
  fs::create_symlink(dir / "target", dir / ".model.tgck.tmp-77");
  put(dir / ".curve.csv.tmp-12", "stale");
  { const OutputFolder out(dir, as("train")); }
  CHECK_FALSE(fs::exists(dir / ".curve.csv.tmp-12"));
  CHECK(fs::is_symlink(dir / ".model.tgck.tmp-77"));
  CHECK(slurp(dir / "target") == "kept");
  fs::remove_all(dir);
}
