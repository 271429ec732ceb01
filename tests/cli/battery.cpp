// The command-line battery: the programs run as a hostile user would run them (bad flags, files that are not
// files, forged and re-sealed checkpoints, two runs on one folder, a full disk), each in its own process.
// Every case asserts an exit code from the documented set (train/program/run_program.hpp: ExitCode), a
// one-line message naming what was wrong, no death by a signal, bounded memory and time, and that what was on
// disk before is still there and still loads.
//
// The programs' paths come from CMake (TAPEGRAD_TRAIN, ...). TAPEGRAD_MUTANTS=<n> sets how many
// re-sealed mutants of a checkpoint the mutation case tries (default 24); it reports the worst peak
// memory and time it saw. (Loops over pairs name .first and .second: clang 14 cannot capture a
// structured binding in doctest's INFO.)
#include <tuple>

#include "cli/process.hpp"

using namespace tapegrad;
using namespace tapegrad::cli;
namespace fs = std::filesystem;

// ---- flags ------------------------------------------------------------------------------------------

TEST_CASE("cli: bad flags and values are refused in one line with exit 2, before anything runs") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus"}, "The following argument was not expected: --bogus"},
      {{"--task", "cycle", "--lr", "inf"}, "--lr: must be finite and >= 0, got 'inf'"},
      {{"--task", "cycle", "--lr", "nan"}, "--lr: must be finite"},
      {{"--task", "cycle", "--clip", "inf"}, "--clip: must be finite and >= 0, got 'inf'"},
      {{"--task", "cycle", "--seed", "-1"}, "--seed: must be a whole number from 0 to 18446744073709551615, got '-1'"},
      {{"--task", "cycle", "--steps", "99999999999999999999"}, "--steps: must be a whole number"},
      {{"--task", "cycle", "--batch", "9223372036854775807"}, "--batch: must be in [1, 16777216]"},
      {{"--task", "cycle", "--keep", "0", "--checkpoint-every", "5", "--out", "x"}, "--keep"},
      {{"--task", "cycle", "--max-memory", "-3"}, "--max-memory"},
      {{"--task", "cycle", "--features", "learned", "--d-model", "100000"},
       "would take about 504.7 GB, more than the limit of 4.0 GB; --max-memory 505 (GB) raises it"},
      {{"--task", "cycle", "--features", "learned", "--d-model", "33", "--heads", "2"}, "no d_head is given"},
      {{"--task", "cycle", "--features", "learned", "--d-model", "33", "--heads", "2", "--d-head", "0"},
       "--d-head: must be finite and > 0, got '0'"},
      {{"--task", "cycle", "--heads", "0"}, "--heads: must be finite and > 0, got '0'"},
      {{"--task", "cycle", "--heads", "100000000"}, "heads"},
      {{"--task", "parity"}, "--task: parity not in"},
      {{"inspect"}, "file is required"},
  };
  for (const auto& entry : cases) {
    const auto& args = entry.first;
    const auto& says = entry.second;
    INFO(fmt::format("train {}", fmt::join(args, " ")));
    check_refused(run(train(args)), ExitCode::bad_input, says);
  }
  // And d_head given, the same model trains.
  check_ok(run(train({"--task", "cycle", "--features", "learned", "--d-model", "33", "--heads", "2", "--d-head", "8",
                      "--steps", "3"})));
}

TEST_CASE("cli: every program turns bad flags into exit 2 and one line") {
  const std::vector<std::pair<const char*, std::vector<std::string>>> cases = {
      {TAPEGRAD_TRAIN, {"--bogus"}},     {TAPEGRAD_DEMO, {"--bogus"}},
      {TAPEGRAD_WALKTHROUGH, {"--bogus"}}, {TAPEGRAD_GRADCHECK, {"--bogus"}},
      {TAPEGRAD_CUSTOM, {"train", "--bogus"}},
  };
  for (const auto& entry : cases) {
    const auto& program = entry.first;
    const auto& args = entry.second;
    const std::string name = fs::path(program).filename().string();
    INFO(name);
    check_refused(run(with(program, args)), ExitCode::bad_input, "The following argument was not expected: --bogus", true, name);
  }
  check_refused(run(with(TAPEGRAD_CUSTOM, {})), ExitCode::bad_input, "A subcommand is required", true, "custom_model");
  check_refused(run(with(TAPEGRAD_DEMO, {"--steps", "0"})), ExitCode::bad_input, "--steps: must be finite and > 0, got '0'", true,
                "param_free_vs_learned");
  check_refused(run(with(TAPEGRAD_DEMO, {"--jobs", "0"})), ExitCode::bad_input, "--jobs", true, "param_free_vs_learned");
  const Outcome predict = run(with(TAPEGRAD_CUSTOM, {"predict", "/dev/zero"}));
  check_refused(predict, ExitCode::bad_input, "not a regular file", true, "custom_model");
}

TEST_CASE("cli: an --out that cannot be a run's folder is refused before training, and nothing in it is touched") {
  const fs::path dir = scratch("bad_out");
  write_text(dir / "file", "a user's file");
  const std::vector<std::pair<fs::path, std::string>> cases = {
      {dir / "file", "is a regular file, not a folder"},
      {"/dev/null", "is a character device, not a folder"},
      {dir / "file" / "sub", "cannot create the folder"},
  };
  for (const auto& entry : cases) {
    const auto& out = entry.first;
    const auto& says = entry.second;
    INFO(out.string());
    const Outcome r = run(train({"--task", "cycle", "--steps", "5", "--out", out.string()}));
    check_refused(r, ExitCode::bad_input, says);
    CHECK(r.out.empty());  // refused before the run printed its settings
  }
  CHECK(slurp(dir / "file") == "a user's file");
  // The flagship demo too: refused at once, not after its minute of training.
  const Outcome demo = run(with(TAPEGRAD_DEMO, {"--out", (dir / "file").string()}));
  check_refused(demo, ExitCode::bad_input, "is a regular file, not a folder", true, "param_free_vs_learned");
  CHECK(demo.seconds < 10);
  CHECK(slurp(dir / "file") == "a user's file");
}

TEST_CASE("cli: a folder with another run's files is refused unless --overwrite") {
  const fs::path run_dir = trained_run("another_run");
  const auto before = snapshot_files(run_dir);
  const Outcome again = run(train({"--task", "first_token", "--steps", "5", "--out", run_dir.string()}));
  check_refused(again, ExitCode::bad_input, "holds the files of an earlier train run");
  CHECK(snapshot_files(run_dir) == before);
  const Outcome replaced = run(train({"--task", "first_token", "--steps", "5", "--out", run_dir.string(), "--overwrite"}));
  check_ok(replaced);
  CHECK_FALSE(fs::exists(run_dir / "checkpoints" / "checkpoint-00000010.tgck"));
  CHECK(read_checkpoint(run_dir / "model.tgck").metadata.at("task") == "first_token");
}

TEST_CASE("cli: a read-only place for --out is refused naming the reason (where the platform lets a test mount)") {
  const fs::path dir = scratch("read_only") / "mnt";
  if (!mount_tmpfs(dir, "64k", true)) {
    MESSAGE("skipped: this process may not mount a tmpfs (needs root and CAP_SYS_ADMIN)");
    return;
  }
  const Outcome r = run(train({"--task", "cycle", "--steps", "5", "--out", (dir / "sub").string()}));
  ::umount(dir.c_str());
  check_refused(r, ExitCode::bad_input, "Read-only file system");
}

// ---- data files -------------------------------------------------------------------------------------

TEST_CASE("cli: data that is not a regular file, too large or too wide is refused at once, in little memory") {
  const fs::path dir = scratch("bad_data");
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  {  // 1.1 GB, sparse: costs no disk
    std::ofstream big(dir / "big.txt");
    big.seekp((std::streamoff{11} << 30) / 10);
    big << "a\tX\n";
  }
  std::string wide;
  for (int i = 0; i < 1'000'000; ++i) wide += "tok ";
  wide += "end\t";
  for (int i = 0; i < 1'000'000; ++i) wide += "_ ";
  wide += "X\n";
  write_text(dir / "wide.txt", wide);
  write_text(dir / "nolabels.txt", "a b\t_ _\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/dev/zero", "'/dev/zero' is not a regular file (a character device)"},
      {(dir / "fifo").string(), "is not a regular file (a pipe)"},
      {dir.string(), "is actually a directory"},
      {(dir / "big.txt").string(), "more than the limit of 1.1 GB"},
      {(dir / "wide.txt").string(), "more than the limit of"},
      {(dir / "nolabels.txt").string(), "no labels at all"},
  };
  for (const auto& entry : cases) {
    const auto& data = entry.first;
    const auto& says = entry.second;
    INFO(data);
    check_refused(run(train({"--data", data, "--steps", "5"})), ExitCode::bad_input, says);
  }
}

TEST_CASE("cli: a data file with a byte-order mark trains, its first token without the mark") {
  const fs::path dir = scratch("bom");
  std::string text = "\xEF\xBB\xBF";
  for (int i = 0; i < 40; ++i) text += i % 2 ? "b a\tY X\n" : "a b\tX Y\n";
  write_text(dir / "data.txt", text);
  const Outcome r = run(train({"--data", (dir / "data.txt").string(), "--steps", "5", "--out", (dir / "run").string()}));
  check_ok(r);
  CHECK(r.err.find("(40 examples, 3 tokens, 2 labels)") != std::string::npos);  // <pad>, a, b: no "\xEF\xBB\xBFa"
}

// ---- checkpoints: damaged, forged, re-sealed --------------------------------------------------------

TEST_CASE("cli: inspect and --resume refuse files that are not checkpoints, in one line") {
  const fs::path dir = scratch("not_checkpoints");
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  write_text(dir / "text.tgck", "hello");
  for (const std::string& file : {std::string("/dev/zero"), (dir / "fifo").string()}) {
    INFO(file);
    check_refused(run(train({"inspect", file})), ExitCode::bad_input, "is not a regular file");
    check_refused(run(train({"--resume", file})), ExitCode::bad_input, "is not a regular file");
  }
  check_refused(run(train({"inspect", (dir / "text.tgck").string()})), ExitCode::bad_input, "not a tapegrad checkpoint");
  check_refused(run(train({"--resume", (dir / "text.tgck").string()})), ExitCode::bad_input, "not a tapegrad checkpoint");
}

TEST_CASE("cli: forged checkpoints (valid checksums, hostile values) are refused before anything is built") {
  const fs::path run_dir = trained_run("forged");
  const Checkpoint good = read_checkpoint(run_dir / "model.tgck");
  const fs::path dir = run_dir.parent_path();
  auto forge = [&](const std::string& name, auto change) {
    Checkpoint c = good;
    change(c);
    save_checkpoint(dir / name, c);
    return (dir / name).string();
  };
  auto set = [](Checkpoint& c, const std::string& key, const std::string& value) {
    for (auto& s : c.model.config)
      if (s.name == key) s.value = value;
  };
  // The issue's 9.4 GB model: learned features 20000 wide. Its parameters are not the file's.
  const std::string wide = forge("wide.tgck", [&](Checkpoint& c) {
    set(c, "features", "learned");
    set(c, "d_embed", "20000");
  });
  const std::string vocab = forge("vocab.tgck", [&](Checkpoint& c) { set(c, "vocab", "65294"); });
  const std::string huge_task = forge("huge_task.tgck", [](Checkpoint& c) { c.metadata["task.train"] = "3000000000"; });
  const std::string not_number = forge("not_number.tgck", [](Checkpoint& c) { c.metadata["task.train"] = "many"; });
  const std::string no_task = forge("no_task.tgck", [](Checkpoint& c) { c.metadata.clear(); });
  const std::string huge_batch = forge("huge_batch.tgck", [](Checkpoint& c) {
    c.find("trainer.options.batch")->value = std::vector<std::string>{"16777216"};
  });
  const std::vector<std::pair<std::string, std::string>> cases = {
      {wide, "implies 1201620264 parameter values but the file holds 3539"},
      {vocab, "implies 12793576036 parameter values but the file holds 3539"},
      {huge_task, "more than the limit of"},
      {not_number, "resume: the checkpoint's metadata task.train is 'many'"},
      {no_task, "resume: the checkpoint does not say what data it was trained on"},
      {huge_batch, "more than the limit of"},
  };
  for (const auto& entry : cases) {
    const auto& file = entry.first;
    const auto& says = entry.second;
    INFO(file);
    const Outcome r = run(train({"--resume", file, "--steps", "30"}));
    check_refused(r, ExitCode::bad_input, says);
    CHECK(r.peak_mb < 200);  // nothing of the forged size was built
  }
}

TEST_CASE("cli: re-sealed random mutations of a checkpoint's payload are refused or load, never more") {
  const fs::path run_dir = trained_run("mutants");
  const std::string original = slurp(run_dir / "model.tgck");
  const char* env = std::getenv("TAPEGRAD_MUTANTS");
  const int count = env ? std::atoi(env) : 24;
  Rng rng(2026);
  double worst_mb = 0, worst_s = 0;
  int refused = 0;
  for (int i = 0; i < count; ++i) {
    std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(original.data()),
                                 reinterpret_cast<const std::byte*>(original.data() + original.size()));
    const int flips = 1 + static_cast<int>(rng.next_u64() % 4);
    for (int f = 0; f < flips; ++f) {
      const std::size_t at = 28 + rng.next_u64() % (bytes.size() - 28);  // the payload, after the header
      bytes[at] = static_cast<std::byte>(rng.next_u64() & 0xff);
    }
    test::reseal(bytes, [](std::span<const std::byte> b) { return Crc32().add(b.data(), b.size()).value(); });
    const fs::path file = run_dir.parent_path() / "mutant.tgck";
    write_text(file, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    for (const auto& args : {train({"inspect", file.string()}), train({"--resume", file.string(), "--steps", "20"})}) {
      const Outcome r = run(args);
      INFO(fmt::format("mutant {}: {}", i, args[1]));
      check_bounded(r);
      CHECK((r.code == 0 || r.code == static_cast<int>(ExitCode::bad_input)));
      refused += r.code != 0;
      worst_mb = std::max(worst_mb, r.peak_mb);
      worst_s = std::max(worst_s, r.seconds);
    }
  }
  MESSAGE(fmt::format("{} mutants, {} of {} runs refused; worst peak {:.0f} MB, worst time {:.2f} s", count, refused,
                      2 * count, worst_mb, worst_s));
}

// ---- runs and their folders -------------------------------------------------------------------------

TEST_CASE("cli: two runs on one --out: the second is refused naming the first, which goes on unharmed") {
  const fs::path other = trained_run("concurrent_other");  // a checkpoint to resume into the busy folder
  const fs::path dir = scratch("concurrent") / "run";
  Process first = start(train({"--task", "cycle", "--steps", "100000000", "--eval-every", "1000", "--checkpoint-every",
                               "200", "--keep", "2", "--out", dir.string()}));
  // Wait until the first run holds the lock and has saved a checkpoint.
  const std::string pid = std::to_string(first.pid);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!(fs::exists(dir / "checkpoints") && !fs::is_empty(dir / "checkpoints") && slurp(dir / ".tapegrad.lock") == pid)) {
    REQUIRE(still_running(first));
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const Outcome second = run(train({"--task", "cycle", "--steps", "50", "--out", dir.string()}));
  const Outcome second_resume =
      run(train({"--resume", (other / "model.tgck").string(), "--steps", "400", "--out", dir.string()}));
  REQUIRE(still_running(first));  // the refusals were made while the first run held the folder
  check_refused(second, ExitCode::bad_input, fmt::format("another run (pid {}) is using the folder", pid));
  check_refused(second_resume, ExitCode::bad_input, fmt::format("another run (pid {}) is using the folder", pid));
  ::kill(first.pid, SIGKILL);  // as a user's kill -9
  const Outcome killed = finish(first);
  CHECK(killed.signal == SIGKILL);
  // What it saved loads, and its latest checkpoint resumes in the same folder (the dead run's lock is gone).
  check_all_load(dir);
  std::vector<fs::path> saved(fs::directory_iterator(dir / "checkpoints"), fs::directory_iterator{});
  std::sort(saved.begin(), saved.end());
  REQUIRE_FALSE(saved.empty());
  const Checkpoint latest = read_checkpoint(saved.back());
  const auto step = read_trainer_state(latest).step;
  check_ok(run(train({"--resume", saved.back().string(), "--steps", std::to_string(step + 20), "--out", dir.string()})));
}

TEST_CASE("cli: two flagship demos on one --out: the second is refused at once, naming the first") {
  const fs::path dir = scratch("concurrent_demo") / "out";
  Process first = start(with(TAPEGRAD_DEMO, {"--out", dir.string(), "--tasks", "cycle"}));
  const std::string pid = std::to_string(first.pid);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (slurp(dir / ".tapegrad.lock") != pid) {
    REQUIRE(still_running(first));
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const Outcome second = run(with(TAPEGRAD_DEMO, {"--out", dir.string(), "--tasks", "cycle"}));
  REQUIRE(still_running(first));
  check_refused(second, ExitCode::bad_input, fmt::format("another run (pid {}) is using the folder", pid), true,
                "param_free_vs_learned");
  ::kill(first.pid, SIGKILL);
  CHECK(finish(first).signal == SIGKILL);
}

// The demo's output with its timings (the table's time column, the total) replaced by "<t>": what must
// not depend on how many runs train at once.
std::string without_timings(const std::string& text) {
  static const std::regex seconds(R"(\d+(\.\d+)?\s?s\b)");
  return std::regex_replace(text, seconds, "<t>");
}

TEST_CASE("cli: the demo prints the same tables, report and models for --jobs 1 and --jobs 2") {
  std::map<std::string, std::string> out, report;
  std::map<std::string, std::map<std::string, std::string>> models, pictures;
  std::map<std::string, int> codes;
  for (const std::string jobs : {"1", "2"}) {
    const fs::path dir = scratch("demo_jobs_" + jobs);
    const Outcome r = run(with(TAPEGRAD_DEMO, {"--out", dir.string(), "--tasks", "first_token,cycle", "--seeds", "2",
                                               "--steps", "50", "--jobs", jobs}));
    check_bounded(r);
    // Whether 50 steps make the claims hold (exit 0) or not (exit 1) must not depend on --jobs either.
    codes[jobs] = r.code;
    std::string printed = r.out;
    for (auto at = printed.find(dir.string()); at != std::string::npos; at = printed.find(dir.string()))
      printed.replace(at, dir.string().size(), "<dir>");
    out[jobs] = without_timings(printed);
    report[jobs] = without_timings(slurp(dir / "report.md"));
    models[jobs] = snapshot_files(dir / "models");
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".svg") pictures[jobs][entry.path().filename().string()] = slurp(entry.path());
  }
  // report.md links every picture the run wrote, and every link it has is a picture that is there.
  REQUIRE(pictures["1"].size() == 2 * 2 * 3);  // 2 tasks x 2 feature kinds x (attention, every seed, curves)
  for (const auto& picture : pictures["1"]) {  // no structured binding: clang 14 cannot capture one in CHECK_MESSAGE
    const std::string& name = picture.first;
    CHECK_MESSAGE(report["1"].find("(" + name + ")") != std::string::npos, name);
    if (name.starts_with("attention_"))
      CHECK_MESSAGE(picture.second.find("class=\"marked-cell\"") != std::string::npos, name);
  }
  static const std::regex link(R"(\]\(([^)]+)\))");
  for (auto it = std::sregex_iterator(report["1"].begin(), report["1"].end(), link); it != std::sregex_iterator(); ++it)
    CHECK_MESSAGE(pictures["1"].contains((*it)[1].str()), (*it)[1].str());
  // The no-routing ceiling is drawn only where it bounds parameter-free attention: fixed one-hot features.
  CHECK(pictures["1"]["curves_cycle.svg"].find("no-routing ceiling") != std::string::npos);
  CHECK(pictures["1"]["curves_cycle_embeddings.svg"].find("no-routing ceiling") == std::string::npos);
  CHECK(pictures["1"]["curves_cycle_embeddings.svg"].find("trainable embeddings") != std::string::npos);
  CHECK(pictures["1"] == pictures["2"]);
  CHECK(out["1"].find("first_token") != std::string::npos);
  CHECK(out["1"].find("trainable token embeddings") != std::string::npos);
  CHECK((codes["1"] == 0 || codes["1"] == static_cast<int>(ExitCode::check_failed)));
  CHECK(codes["1"] == codes["2"]);
  CHECK(out["1"] == out["2"]);
  CHECK(report["1"] == report["2"]);
  CHECK(models["1"].size() == 8);
  CHECK(models["1"] == models["2"]);
}

TEST_CASE("cli: resuming keeps only this run's checkpoints and leaves odd names, and stale temporaries go") {
  const fs::path run_dir = trained_run("keep_by_run");
  const fs::path ckpt = run_dir / "checkpoints";
  write_text(ckpt / "checkpoint-99999999999999999999.tgck", "a user's file");
  write_text(ckpt / "checkpoint-99999999.tgck", "a user's file");
  write_text(run_dir / ".model.tgck.tmp-4242", "left by a killed run");
  write_text(ckpt / ".checkpoint-00000030.tgck.tmp-4242", "left by a killed run");
  // The issue's case: resumed from step 10 of a 20-step run with --keep 1, it saves 12 and 15.
  const Outcome r = run(train({"--resume", (ckpt / "checkpoint-00000010.tgck").string(), "--steps", "17",
                               "--checkpoint-every", "3", "--keep", "1", "--out", run_dir.string()}));
  check_ok(r);
  CHECK(fs::exists(ckpt / "checkpoint-00000015.tgck"));  // its newest, kept
  CHECK_FALSE(fs::exists(ckpt / "checkpoint-00000012.tgck"));
  CHECK(fs::exists(ckpt / "checkpoint-00000020.tgck"));  // the first run's: not this run's to delete
  CHECK(slurp(ckpt / "checkpoint-99999999999999999999.tgck") == "a user's file");
  CHECK(slurp(ckpt / "checkpoint-99999999.tgck") == "a user's file");
  CHECK_FALSE(fs::exists(run_dir / ".model.tgck.tmp-4242"));
  CHECK_FALSE(fs::exists(ckpt / ".checkpoint-00000030.tgck.tmp-4242"));
}

TEST_CASE("cli: resume refuses changed data and steps behind it, and works from another folder") {
  const fs::path dir = scratch("resume_data");
  std::string train_text, eval_text;
  for (int i = 0; i < 60; ++i) train_text += i % 3 ? "a b c\tX Y Z\n" : "c b a\tZ Y X\n";
  for (int i = 0; i < 20; ++i) eval_text += i % 2 ? "a b c\tX Y Z\n" : "c b a\tZ Y X\n";
  write_text(dir / "tr.txt", train_text);
  write_text(dir / "ev.txt", eval_text);
  // Relative paths, from the data's folder.
  check_ok(run(train({"--data", "tr.txt", "--eval-data", "ev.txt", "--steps", "20", "--eval-every", "10",
                      "--checkpoint-every", "10", "--out", "run"}),
               {.cwd = dir}));
  const std::string ckpt = (dir / "run" / "checkpoints" / "checkpoint-00000010.tgck").string();
  // From another working directory: the stored paths are absolute.
  check_ok(run(train({"--resume", ckpt, "--steps", "30"}), {.cwd = fs::temp_directory_path()}));
  check_refused(run(train({"--resume", ckpt, "--steps", "5"})), ExitCode::bad_input,
                "--steps 5 is behind the checkpoint, which is at step 10");
  // The evaluation file changed: one curve must not mix two evaluation sets.
  write_text(dir / "ev.txt", eval_text + "a b c\tX Y Z\n");
  check_refused(run(train({"--resume", ckpt, "--steps", "30"})), ExitCode::bad_input, "the evaluation data differs");
  write_text(dir / "ev.txt", eval_text);
  // The same ids under swapped label names.
  std::string swapped = train_text;
  for (char& ch : swapped)
    if (ch == 'X')
      ch = 'Y';
    else if (ch == 'Y')
      ch = 'X';
  write_text(dir / "tr.txt", swapped);
  check_refused(run(train({"--resume", ckpt, "--steps", "30"})), ExitCode::bad_input, "the training data differs");
  // The data moved: the message says where it was looked for.
  write_text(dir / "tr.txt", train_text);
  fs::rename(dir / "tr.txt", dir / "moved.txt");
  check_refused(run(train({"--resume", ckpt, "--steps", "30"})), ExitCode::bad_input, "the checkpoint's data cannot be read");
}

// ---- a full disk ------------------------------------------------------------------------------------

TEST_CASE("cli: a write that fails (file size limit) ends with exit 4 naming the reason, what was saved stays") {
  const fs::path run_dir = trained_run("file_too_large");
  const auto before = snapshot_files(run_dir);
  const fs::path ckpt = run_dir / "checkpoints" / "checkpoint-00000020.tgck";
  // Checkpoints are 77 KB; 20 KB lets the curve be written but no checkpoint.
  const Outcome r = run(train({"--resume", ckpt.string(), "--steps", "40", "--checkpoint-every", "10", "--out",
                               run_dir.string()}),
                        {.cwd = {}, .max_file_bytes = 20'000});
  check_refused(r, ExitCode::system_failed, "File too large", false);
  CHECK(snapshot_files(run_dir).size() >= before.size());
  for (const auto& entry : before) {
    const auto& name = entry.first;
    const auto& bytes = entry.second;
    INFO(name);
    if (name == ".tapegrad-run") continue;  // the manifest: the resumed run lists what it began to write
    CHECK(slurp(run_dir / name) == bytes);  // the first run's files: every byte as it was
  }
  for (const auto& e : fs::recursive_directory_iterator(run_dir))
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  check_all_load(run_dir);
}

TEST_CASE("cli: a full disk ends with exit 4 and 'No space left on device', every saved checkpoint loads") {
  const fs::path dir = scratch("full_disk") / "mnt";
  if (!mount_tmpfs(dir, "200k")) {
    MESSAGE("skipped: this process may not mount a tmpfs (needs root and CAP_SYS_ADMIN); the file-size case covers it");
    return;
  }
  const Outcome r = run(train({"--task", "cycle", "--steps", "40", "--checkpoint-every", "5", "--keep", "100", "--out",
                               (dir / "run").string()}));
  check_refused(r, ExitCode::system_failed, "No space left on device", false);
  check_all_load(dir);
  ::umount(dir.c_str());
}

// The language models' bound counts their parameters without building the model (the library's
// DecoderLm::count_parameters): a model of tens of gigabytes is refused before anything of its size is taken.
TEST_CASE("cli: a language model larger than the examples' bound is refused in one line, in little memory") {
  const std::vector<std::tuple<const char*, std::vector<std::string>, std::string>> cases = {
      {TAPEGRAD_GPT, {"--data", TAPEGRAD_GPT_FORTUNES, "--d-model", "4096", "--layers", "64", "--heads", "4"},
       "more than the 8.0 GB this example allows; lower --d-model, --d-ff, --layers, --context or --batch"},
      {TAPEGRAD_GPT, {"--data", TAPEGRAD_GPT_FORTUNES, "--batch", "65536"}, "the model and a batch would take about"},
      {TAPEGRAD_CHAR_LM, {"--data", TAPEGRAD_CHAR_LM_WORDS, "--d-model", "4096", "--layers", "64", "--heads", "4"},
       "this example allows; lower --d-model, --d-ff, --layers or --batch"},
  };
  for (const auto& entry : cases) {  // not a structured binding: clang 14 cannot capture one in INFO's lambda
    const char* program = std::get<0>(entry);
    const std::string name = fs::path(program).filename().string();
    INFO(fmt::format("{} {}", name, fmt::join(std::get<1>(entry), " ")));
    const Outcome r = run(with(program, std::get<1>(entry)));
    check_refused(r, ExitCode::bad_input, std::get<2>(entry), true, name);
    CHECK(r.peak_mb < 300);
  }
}

// ---- training that goes wrong -----------------------------------------------------------------------

TEST_CASE("cli: a loss that turns NaN stops the run with exit 3 and a message that says what to do") {
  const Outcome r = run(train({"--task", "cycle", "--optimizer", "sgd", "--lr", "1e30", "--steps", "50"}));
  check_refused(r, ExitCode::training_stopped, "the loss is NaN at step", false);
  const Outcome anomaly = run(train({"--task", "cycle", "--optimizer", "sgd", "--lr", "1e30", "--steps", "50", "--anomaly"}));
  check_refused(anomaly, ExitCode::training_stopped, "anomaly:", false);
}

// CLI11 reads an unsigned flag with strtoull, which takes "-1" as 2^64 - 1 and saturates past 64 bits:
// every program's integer flags are checked before that (examples/command_line.cpp), and a rate that is
// not finite is named as the flag, not as the optimizer's argument.
TEST_CASE("cli: integers out of range and non-finite rates are refused by every program, naming the flag") {
  const std::vector<std::tuple<const char*, std::vector<std::string>, std::string>> cases = {
      {TAPEGRAD_GPT, {"--seed", "-1"}, "--seed: must be a whole number from 0 to 18446744073709551615, got '-1'"},
      {TAPEGRAD_GPT, {"--train-seed", "18446744073709551616"}, "--train-seed: must be a whole number from 0 to"},
      {TAPEGRAD_GPT, {"--lr", "inf"}, "--lr: must be finite and > 0, got 'inf'"},
      {TAPEGRAD_GPT, {"--lr", "nan"}, "--lr: must be finite and > 0, got 'nan'"},
      {TAPEGRAD_CHAR_LM, {"--seed", "-1"}, "--seed: must be a whole number from 0 to"},
      {TAPEGRAD_CHAR_LM, {"--lr", "inf"}, "--lr: must be finite and > 0, got 'inf'"},
      {TAPEGRAD_DEMO, {"--steps", "18446744073709551617"}, "--steps: must be a whole number from"},
  };
  for (const auto& entry : cases) {  // not a structured binding: clang 14 cannot capture one in INFO's lambda
    const auto& [program, args, says] = entry;
    const std::string name = fs::path(program).filename().string();
    const std::string shown = fmt::format("{} {}", name, fmt::join(std::get<1>(entry), " "));
    INFO(shown);
    check_refused(run(with(program, args)), ExitCode::bad_input, says, true, name);
  }
}
