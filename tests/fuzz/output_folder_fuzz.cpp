// libFuzzer target for a run's output folder as a shared folder leaves it: the manifest (anyone with
// write access to the folder can write it) is the fuzzer's bytes, and the folder holds a planted link
// ("sub" -> a folder of yours outside it), a link named like a temporary file, a subfolder and files.
// Whatever the manifest says, taking the folder (with or without --overwrite, resumed or not) must end
// in a tapegrad::Error or succeed, and no byte of the folder outside may change: its files, its
// temporary-looking dot-file and the link's target stay. The first byte picks the options.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "tapegrad/core/error.hpp"
#include "tapegrad/train/program/output_folder.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

std::map<std::string, std::string> contents(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::string& kept = out[e.path().string()];
    if (e.is_symlink()) {
      kept = "link";
    } else if (!e.is_regular_file()) {
      kept = "not a file";
    } else {
      std::ifstream in(e.path(), std::ios::binary);
      kept.assign(std::istreambuf_iterator<char>(in), {});
    }
  }
  return out;
}

struct Fixture {
  fs::path root, yours, run;
  std::map<std::string, std::string> yours_before;
  Fixture() {
    char pattern[] = "/tmp/output_folder_fuzz.XXXXXX";
    root = ::mkdtemp(pattern);
    yours = root / "yours";
    run = root / "run";
    fs::create_directories(yours / "deeper");
    put(yours / "x.txt", "yours");
    put(yours / "model.tgck", "yours");
    put(yours / ".x.txt.tmp-1", "yours, named like a temporary");
    put(yours / "deeper" / "y.txt", "yours");
    yours_before = contents(yours);
  }
  ~Fixture() { fs::remove_all(root); }
  // The run folder as a hostile neighbour left it, with `manifest` as its run manifest.
  void lay(const std::string& manifest) {
    std::error_code ec;
    fs::remove_all(run, ec);
    fs::create_directories(run / "a");
    put(run / "model.tgck", "the run's");
    put(run / "a" / "b.txt", "the run's");
    put(run / "a" / ".b.txt.tmp-7", "stale");
    fs::create_directory_symlink(yours, run / "sub");
    fs::create_directory_symlink(yours, run / "a" / "sub");
    fs::create_symlink(yours / "x.txt", run / ".x.txt.tmp-9");
    put(run / ".tapegrad-run", manifest);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Fixture fixture;
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  fixture.lay(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  try {
    OutputFolder out(fixture.run, {.program = (mode & 4) ? "char_lm" : "train", .overwrite = (mode & 1) != 0,
                                   .resume = (mode & 2) != 0});
    if (mode & 8) out.write("a/new.txt", "new");
  } catch (const Error&) {
  }
  if (contents(fixture.yours) != fixture.yours_before) {
    std::fprintf(stderr, "output_folder_fuzz: a file outside the run's folder changed\n");
    std::abort();
  }
  return 0;
}
