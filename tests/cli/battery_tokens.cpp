// The command-line battery on gpt's prepared data (issue 52): token files a hostile user puts in a prepared
// folder, each refused before training in one line that names the file, with nothing written to --out;
// a token file truncated under a running training, an error in one line and no signal; a resume against
// changed data, refused.
#include <fstream>

#include "cli/process.hpp"
#include "tapegrad/train/data_tokens.hpp"
#include "token_files.hpp"

using namespace tapegrad;
using namespace tapegrad::cli;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> gpt(std::vector<std::string> args) { return with(TAPEGRAD_GPT, std::move(args)); }

// A tiny run of gpt on `data` into `out`.
std::vector<std::string> tiny_run(const fs::path& data, const fs::path& out, std::vector<std::string> extra = {},
                                  const std::string& steps = "4") {
  std::vector<std::string> args = {"--data", data.string(), "--attention", "learnable", "--context", "16", "--d-model", "16",
                                   "--heads", "2", "--layers", "1", "--batch", "4", "--steps", steps, "--curve-windows", "4",
                                   "--length", "10", "--out", out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return gpt(args);
}

// meta.json with one token file's recorded count and CRC made those of `file`: a hostile folder whose
// description agrees with its files, so that what is refused is the file itself.
void describe_as(const fs::path& meta, const TokenFile& was, std::uint64_t ids, std::uint32_t crc) {
  std::string text = slurp(meta);
  const std::string old = fmt::format("\"ids\":{},\"ids_crc32\":{}", was.size(), was.ids_crc32());
  REQUIRE(text.find(old) != std::string::npos);
  text.replace(text.find(old), old.size(), fmt::format("\"ids\":{},\"ids_crc32\":{}", ids, crc));
  write_text(meta, text);
}

}  // namespace

TEST_CASE("cli tokens: hostile token files in a prepared folder are refused in one line naming the file, --out untouched") {
  const fs::path root = scratch("tokens_hostile"), good = root / "good";
  check_ok(run(gpt({"--prepare-only", "--data", TAPEGRAD_GPT_FORTUNES, "--prepared", good.string()})));
  const TokenFile train(good / "train.bin"), validation(good / "val.bin");
  const std::string bytes = test::token_text(train);
  struct Case {
    std::string name, file, contents, says;
    bool describe = false;  // meta.json made to agree with the file's count and CRC
  };
  std::string outside = bytes;
  outside[100] = '~';  // not a byte of the test fortunes
  std::string swapped = bytes;  // other ids, every one in the vocabulary
  std::swap(swapped[100], swapped[bytes.find('\n') + 1]);
  REQUIRE(swapped != bytes);
  const std::string even = bytes.substr(0, bytes.size() / 2 * 2);
  std::string wide;  // the bytes as 2-byte ids
  for (const char c : bytes) wide += std::string{c, '\0'};
  const std::vector<Case> cases = {
      {"width", "train.bin", test::forged_token_file(3, 256, 2, std::string(6, 'a')), "says its ids are 3 bytes wide"},
      {"ids_outside", "train.bin", test::forged_token_file(1, 256, bytes.size(), outside),
       "holds id 126 at position 100, which the vocabulary it is read with does not have", true},
      {"vocab_smaller", "train.bin", test::forged_token_file(1, 100, bytes.size(), bytes),
       "holds ids of 1 bytes in a vocabulary of 100; gpt's prepared files hold bytes", true},
      {"odd_size", "train.bin", test::forged_token_file(2, 65536, bytes.size() / 2, bytes + "x"),
       "not a whole number of 2-byte ids"},
      {"count_lies", "train.bin", test::forged_token_file(1, 256, bytes.size() + 1, bytes), "says it holds"},
      {"width_lies", "train.bin", test::forged_token_file(2, 65536, even.size(), even),
       fmt::format("says it holds {} ids of 2 bytes, but {} bytes follow its header", even.size(), even.size())},
      {"wide_ids", "train.bin", test::forged_token_file(2, 65536, bytes.size(), wide),
       "holds ids of 2 bytes in a vocabulary of 65536", true},
      {"not_tokens", "train.bin", bytes, "is not a token file"},
      {"changed_ids", "train.bin", test::forged_token_file(1, 256, bytes.size(), swapped, train.ids_crc32()),
       "holds other ids than it was written with"},
      {"short", "val.bin", test::forged_token_file(1, 256, 10, bytes.substr(0, 10)),
       "the validation text '" + (root / "short" / "val.bin").string() + "': 10 bytes make no window of 17 bytes", true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const fs::path dir = root / c.name, out = root / ("out_" + c.name);
    fs::create_directories(dir);
    for (const char* name : {"train.bin", "val.bin", "meta.json"}) fs::copy_file(good / name, dir / name);
    write_text(dir / c.file, c.contents);
    if (c.describe) {
      const TokenFile forged(dir / c.file);
      describe_as(dir / "meta.json", c.file == "train.bin" ? train : validation, static_cast<std::uint64_t>(forged.size()),
                  forged.ids_crc32());
    }
    const Outcome r = run(tiny_run(dir, out));
    check_refused(r, ExitCode::bad_input, c.says, true, "gpt");
    CHECK(r.err.find((dir / c.file).string()) != std::string::npos);  // names the file
    CHECK_FALSE(fs::exists(out));
  }
}

TEST_CASE("cli tokens: a training file truncated under a running gpt ends it in one line, not SIGBUS") {
  const fs::path root = scratch("tokens_truncated"), prepared = root / "prepared";
  check_ok(run(gpt({"--prepare-only", "--data", TAPEGRAD_GPT_FORTUNES, "--prepared", prepared.string()})));
  Process p = start(tiny_run(prepared, root / "out", {"--eval-every", "1000000"}, "1000000"));
  // Once it trains (its first line is out), the file shrinks under it.
  const auto begun = std::chrono::steady_clock::now();
  while (still_running(p) && slurp(p.out).find("training:") == std::string::npos &&
         std::chrono::steady_clock::now() - begun < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  fs::resize_file(prepared / "train.bin", 64 + 100);
  const Outcome r = finish(p);
  // Caught by the size check before a read ("it holds 164 bytes, ... (truncated or rewritten)"), or, when
  // the file shrinks between that check and the read, by the short read ("it ends before id ...
  // (truncated)"): which one is the schedule's (a prefetching thread reads too), both are the one line.
  check_refused(r, ExitCode::bad_input, "' changed while in use: it ", false, "gpt");
  CHECK((r.err.find("it holds 164 bytes") != std::string::npos || r.err.find("it ends before id") != std::string::npos));
  CHECK(r.err.find("truncated") != std::string::npos);
  CHECK(r.err.find((prepared / "train.bin").string()) != std::string::npos);
}

TEST_CASE("cli tokens: a resume against changed data is refused in one line, and the same data resumes without preparing") {
  const fs::path root = scratch("tokens_resume"), data = root / "fortunes", prepared = root / "prepared";
  fs::create_directories(data);
  for (const auto& e : fs::directory_iterator(TAPEGRAD_GPT_FORTUNES)) fs::copy_file(e.path(), data / e.path().filename());
  check_ok(run(tiny_run(data, root / "run", {"--checkpoint-every", "4", "--prepared", prepared.string()}, "8")));
  const std::string checkpoint = (root / "run" / "checkpoints" / "learnable" / "checkpoint-00000004.tgck").string();
  const Outcome same = run(gpt({"--resume", checkpoint, "--out", (root / "same").string()}));
  check_ok(same);
  CHECK(same.out.find("prepared from this data before") != std::string::npos);
  std::ofstream(data / "proverbs", std::ios::app) << "%\nOne more fortune.\n";
  check_refused(run(gpt({"--resume", checkpoint, "--out", (root / "changed").string()})), ExitCode::bad_input,
                "resume: trainer: the training data differs from the data the checkpoint was trained on", true, "gpt");
  CHECK_FALSE(fs::exists(root / "changed"));
}
