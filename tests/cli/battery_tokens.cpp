// The command-line battery on gpt's prepared data (issue 52): token files a hostile user puts in a prepared
// folder, each refused before training in one line that names the file, with nothing written to --out;
// a token file truncated under a running training, an error in one line and no signal; a resume against
// changed data, refused. Issue 57: what meta.json claims is checked against the token files, a damaged
// one named; a preparation is whole or absent; a resume touches nothing outside --out before its checks;
// every loss from a sample carries its standard error; the default preparation is keyed by its data, and a
// read-only one is usable.
#include <fstream>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

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

// `dir`, made a copy of the fortunes (with `extra` appended to the last file).
fs::path fortunes_copy(const fs::path& dir, const std::string& extra = {}) {
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(TAPEGRAD_GPT_FORTUNES)) fs::copy_file(e.path(), dir / e.path().filename());
  if (!extra.empty()) std::ofstream(dir / "sayings", std::ios::app) << extra;
  return dir;
}

// The prepared folder `good` copied to `dir`, with `meta` as its meta.json.
fs::path prepared_copy(const fs::path& good, const fs::path& dir, const std::string& meta) {
  fs::create_directories(dir);
  for (const char* name : {"train.bin", "val.bin"}) fs::copy_file(good / name, dir / name);
  write_text(dir / "meta.json", meta);
  return dir;
}

// The line of gpt's table (or report) that starts with `row`.
std::string row_of(const std::string& text, const std::string& row) {
  for (const std::string& line : lines_of(text))
    if (line.starts_with(row)) return line;
  return {};
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
       // (meta.json's count of its fortunes refuses it before its length does)
       fmt::format("'validation_fortunes' is 5, but '{}' holds 0 fortunes", (root / "short" / "val.bin").string()), true},
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
  // Refused before anything is prepared: the recorded preparation is not this data's (issue 57).
  const auto kept = snapshot_files(prepared);
  check_refused(run(gpt({"--resume", checkpoint, "--out", (root / "changed").string()})), ExitCode::bad_input,
                "(the data changed since: its files, their sizes or modification times are not those meta.json lists)",
                true, "gpt");
  CHECK_FALSE(fs::exists(root / "changed"));
  CHECK(snapshot_files(prepared) == kept);
  // Prepared where --prepared says, the checkpoint's record of the data refuses it.
  check_refused(run(gpt({"--resume", checkpoint, "--prepared", (root / "again").string(), "--out", (root / "changed").string()})),
                ExitCode::bad_input, "resume: trainer: the training data differs from the data the checkpoint was trained on",
                true, "gpt");
  CHECK_FALSE(fs::exists(root / "changed"));
}

TEST_CASE("cli tokens: what meta.json claims is checked against its token files, a lie refused in one line naming the field") {
  const fs::path root = scratch("tokens_meta_lies"), good = root / "good";
  check_ok(run(gpt({"--prepare-only", "--data", TAPEGRAD_GPT_FORTUNES, "--prepared", good.string()})));
  using json = nlohmann::json;
  const json meta = json::parse(slurp(good / "meta.json"));
  std::set<int> bytes = {0x7e};  // the vocabulary with a byte the token files do not hold ('~')
  const std::string hex = meta["vocabulary"].get<std::string>();
  for (std::size_t i = 0; i < hex.size(); i += 2) bytes.insert(std::stoi(hex.substr(i, 2), nullptr, 16));
  std::string more_bytes;
  for (const int byte : bytes) more_bytes += fmt::format("{:02x}", byte);
  struct Case {
    std::string name, says;
    std::function<void(json&)> change;
  };
  const std::vector<Case> cases = {
      {"fortunes", "'fortunes'", [](json& j) { j["fortunes"] = 123456789; }},
      {"negative", "'train_fortunes'", [](json& j) { j["train_fortunes"] = -5; }},
      // Ten more fortunes, split as the rule says: only the pass over the ids can tell.
      {"split_kept", "'train_fortunes'",
       [](json& j) {
         j["fortunes"] = j["fortunes"].get<int>() + 10;
         j["train_fortunes"] = j["train_fortunes"].get<int>() + 9;
         j["validation_fortunes"] = j["validation_fortunes"].get<int>() + 1;
       }},
      {"vocabulary", "'vocabulary'", [&](json& j) { j["vocabulary"] = more_bytes; }},
      {"pair_count", "'train_pairs'", [](json& j) { j["train_pairs"][0][2] = j["train_pairs"][0][2].get<std::uint64_t>() + 1; }},
      {"pair_byte_wide", "4294967306", [](json& j) { j["train_pairs"][0][0] = 4294967306ULL; }},  // 10 at 32 bits
      {"text_bytes", "'text_bytes'", [](json& j) { j["text_bytes"] = 1; }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    json j = meta;
    c.change(j);
    const fs::path dir = prepared_copy(good, root / c.name, j.dump()), out = root / ("out_" + c.name);
    const Outcome r = run(tiny_run(dir, out));
    check_refused(r, ExitCode::bad_input, c.says, true, "gpt");
    CHECK(r.err.find(fmt::format("'{}'", (dir / "meta.json").string())) != std::string::npos);  // names the file
    CHECK_FALSE(fs::exists(out));
  }
  check_ok(run(tiny_run(prepared_copy(good, root / "same", meta.dump()), root / "out_same")));  // the truth runs
}

TEST_CASE("cli tokens: a damaged or hostile meta.json is refused naming the file and what is wrong") {
  const fs::path root = scratch("tokens_meta_damaged"), good = root / "good";
  check_ok(run(gpt({"--prepare-only", "--data", TAPEGRAD_GPT_FORTUNES, "--prepared", good.string()})));
  const std::string meta = slurp(good / "meta.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {meta + "x", "it holds bytes after its JSON value"},
      {"[1,2,3]", "it is not a JSON object"},
      {"1e400", "number overflow"},
      {meta.substr(0, meta.size() / 2), "unexpected end of input"},
      {"{}", "'format'"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(cases[i].first.substr(0, 20));
    const fs::path dir = prepared_copy(good, root / std::to_string(i), cases[i].first);
    const Outcome r = run(tiny_run(dir, root / ("out" + std::to_string(i))));
    check_refused(r, ExitCode::bad_input, "' is not gpt's description of prepared data: ", true, "gpt");
    CHECK(r.err.find(cases[i].second) != std::string::npos);
    CHECK(r.err.find(fmt::format("'{}'", (dir / "meta.json").string())) != std::string::npos);
  }
}

TEST_CASE("cli tokens: a preparation is whole or absent: one refused or failed leaves the earlier one usable") {
  const fs::path root = scratch("tokens_whole"), prepared = root / "prepared";
  check_ok(run(gpt({"--prepare-only", "--data", TAPEGRAD_GPT_FORTUNES, "--prepared", prepared.string()})));
  const auto before = snapshot_files(prepared);
  fs::create_directories(root / "nul");
  write_text(root / "nul" / "a", std::string("one\n%\ntwo\0\n", 11));
  fs::create_directories(root / "few");
  write_text(root / "few" / "a", "one\n%\ntwo\n%\nthree\n");
  for (const auto& refused : {std::pair{std::string("nul"), std::string("holds NUL bytes")},
                              std::pair{std::string("few"), std::string("holds 3 fortunes")}}) {
    const std::string& data = refused.first;  // a named reference, not a structured binding: clang 14's
    const std::string& says = refused.second;  // lambdas (CAPTURE) cannot capture one
    CAPTURE(data);
    check_refused(run(gpt({"--prepare-only", "--data", (root / data).string(), "--prepared", prepared.string()})),
                  ExitCode::bad_input, says, true, "gpt");
    CHECK(snapshot_files(prepared) == before);
    const Outcome again = run(gpt({"--prepare-only", "--data", prepared.string()}));
    check_ok(again);
    CHECK(again.out.find("found prepared") != std::string::npos);
  }
  // A crash (SIGKILL) while a new preparation is built beside the folder: the earlier one stays, and the
  // folder the crash left is removed by the next run that takes the lock.
  fs::create_directories(root / "large");
  {
    std::string block;
    for (int i = 0; i < 2000; ++i) block += fmt::format("fortune {} of a large text\n%\n", i);
    std::ofstream large(root / "large" / "a", std::ios::binary);
    for (int k = 0; k < 600; ++k) large << block;  // 35 MB: a second or so to prepare
  }
  Process crash = start(gpt({"--prepare-only", "--data", (root / "large").string(), "--prepared", prepared.string()}));
  const fs::path building = root / fmt::format(".prepared.tmp-{}", crash.pid);
  const auto begun = std::chrono::steady_clock::now();
  while (!fs::exists(building) && still_running(crash) &&
         std::chrono::steady_clock::now() - begun < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(crash.pid, SIGKILL);
  CHECK(finish(crash).signal == SIGKILL);
  CHECK(fs::exists(building));
  CHECK(snapshot_files(prepared) == before);
  const Outcome after = run(gpt({"--prepare-only", "--data", TAPEGRAD_GPT_FORTUNES, "--prepared", prepared.string()}));
  check_ok(after);
  CHECK(after.out.starts_with("gpt: found prepared"));
  CHECK_FALSE(fs::exists(building));
  fs::remove_all(root / "large");
  std::set<std::string> names;  // nothing left beside the folder
  for (const auto& e : fs::directory_iterator(root)) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"few", "nul", "prepared"});
  // A full disk, where this process may mount one.
  const fs::path mnt = root / "mnt";
  if (!mount_tmpfs(mnt, "96k")) {
    MESSAGE("skipped the full disk: this process may not mount a tmpfs");
    return;
  }
  const fs::path small = mnt / "prepared";
  check_ok(run(gpt({"--prepare-only", "--data", TAPEGRAD_GPT_FORTUNES, "--prepared", small.string()})));
  const auto small_before = snapshot_files(small);
  const fs::path big = root / "big";
  fs::create_directories(big);
  std::string text;
  for (int i = 0; i < 4000; ++i) text += fmt::format("fortune number {} of many, long enough\n%\n", i);
  write_text(big / "a", text);
  const Outcome full = run(gpt({"--prepare-only", "--data", big.string(), "--prepared", small.string()}));
  const auto small_after = snapshot_files(small);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(mnt)) left.insert(e.path().filename().string());
  ::umount(mnt.c_str());
  check_refused(full, ExitCode::system_failed, "No space left on device", true, "gpt");
  CHECK(small_after == small_before);
  CHECK(left == std::set<std::string>{"prepared"});
}

TEST_CASE("cli tokens: a resume touches nothing outside --out before its checks: data recorded absolute, no new place named") {
  const fs::path root = scratch("tokens_resume_outside"), prepared = root / "prepared";
  fortunes_copy(root / "fortunes");
  // Relative paths, as a user types them.
  check_ok(run(tiny_run("fortunes", root / "run", {"--checkpoint-every", "4", "--prepared", "prepared"}, "8"),
               {.cwd = root}));
  const fs::path checkpoint = root / "run" / "checkpoints" / "learnable" / "checkpoint-00000004.tgck";
  const Checkpoint c = read_checkpoint(checkpoint);
  CHECK(c.metadata.at("data") == (root / "fortunes").lexically_normal().string());
  CHECK(c.metadata.at("prepared") == prepared.lexically_normal().string());
  const auto before = snapshot_files(prepared);
  const auto forged = [&](const std::string& name, const std::string& key, const std::string& value) {
    Checkpoint f = read_checkpoint(checkpoint);
    f.metadata[key] = value;
    save_checkpoint(root / name, f);
    return (root / name).string();
  };
  // A place the checkpoint names that holds no preparation: nothing is made there.
  const Outcome elsewhere =
      run(gpt({"--resume", forged("elsewhere.tgck", "prepared", (root / "elsewhere").string()), "--out", (root / "r1").string()}));
  check_refused(elsewhere, ExitCode::bad_input, "give --prepared", true, "gpt");
  CHECK_FALSE(fs::exists(root / "elsewhere"));
  CHECK_FALSE(fs::exists(root / "r1"));
  // Other text where the checkpoint says its data is: the preparation it records is not rewritten.
  fortunes_copy(root / "other", "%\nOne more fortune.\n");
  const Outcome other = run(gpt({"--resume", forged("other.tgck", "data", (root / "other").string()), "--out", (root / "r2").string()}));
  check_refused(other, ExitCode::bad_input, "give --prepared", true, "gpt");
  CHECK(snapshot_files(prepared) == before);
  CHECK_FALSE(fs::exists(root / "r2"));
  // The checkpoint as written resumes from another folder.
  check_ok(run(gpt({"--resume", checkpoint.string(), "--out", (root / "r3").string()}), {.cwd = root / "fortunes"}));
}

TEST_CASE("cli tokens: every loss from a sample carries its standard error, or says why it has none") {
  const fs::path root = scratch("tokens_sampled");
  const Outcome r = run(tiny_run(TAPEGRAD_GPT_FORTUNES, root / "out", {"--eval-windows", "3", "--prepared", (root / "p").string()}));
  check_ok(r);
  for (const std::string row : {"  bigram", "  learnable"}) {
    CAPTURE(row);
    CHECK(row_of(r.out, row).find("\u00b1") != std::string::npos);
    CHECK(row_of(slurp(root / "out" / "report.md"), fmt::format("|{}", row.substr(1))).find("\u00b1") != std::string::npos);
  }
  const Outcome one = run(tiny_run(TAPEGRAD_GPT_FORTUNES, root / "one", {"--eval-windows", "1", "--prepared", (root / "p").string()}));
  check_ok(one);
  for (const std::string row : {"  bigram", "  learnable"}) CHECK(row_of(one.out, row).find("(one window: no error)") != std::string::npos);
}

TEST_CASE("cli tokens: the default preparation is keyed by its data, and a read-only one is usable through --prepared") {
  const fs::path root = scratch("tokens_keyed");
  const fs::path a = fortunes_copy(root / "a"), b = fortunes_copy(root / "b", "%\nOne more fortune.\n");
  for (const auto& [data, says] : {std::pair{a, "gpt: prepared "}, std::pair{b, "gpt: prepared "},
                                   std::pair{a, "gpt: found prepared"}, std::pair{b, "gpt: found prepared"}}) {
    const Outcome r = run(gpt({"--prepare-only", "--data", data.filename().string()}), {.cwd = root});
    check_ok(r);
    CHECK(r.out.starts_with(says));
  }
  const fs::path mnt = root / "mnt";
  if (!mount_tmpfs(mnt, "1m")) {
    MESSAGE("skipped the read-only preparation: this process may not mount a tmpfs");
    return;
  }
  check_ok(run(gpt({"--prepare-only", "--data", a.string(), "--prepared", (mnt / "p").string()})));
  REQUIRE(::mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) == 0);
  const Outcome r = run(tiny_run(a, root / "out", {"--prepared", (mnt / "p").string()}));
  const Outcome as_data = run(tiny_run(mnt / "p", root / "out_data"));
  ::umount(mnt.c_str());
  check_ok(r);
  CHECK(r.out.find("prepared from this data before") != std::string::npos);
  check_ok(as_data);
}
