// train/data_tokens.hpp, TokenWindows (train/data_source.hpp) and train/data_prepare.hpp: token files
// written and read back at every width, the windows a source reads from them, the hostile files they
// refuse (each in one line naming the file, never a crash), preparing text in one streaming pass; and
// the sampler's state, which says what it is for (issue 52's findings).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <thread>

#include "helpers.hpp"
#include "token_files.hpp"
#include "tapegrad/core/crc32.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/data_prepare.hpp"
#include "tapegrad/train/data_source.hpp"
#include "tapegrad/train/data_tokens.hpp"

using namespace tapegrad;
using test::forged_token_file;
namespace fs = std::filesystem;

namespace {

using test::put;
using test::slurp;

// ids 0, 1, ..., n - 1 modulo vocab, written at `width`.
fs::path written(const fs::path& path, int width, Index vocab, Index n) {
  TokenFileWriter w(path, width, vocab);
  std::vector<std::int32_t> ids;
  for (Index i = 0; i < n; ++i) ids.push_back(static_cast<std::int32_t>(i % vocab));
  w.append(ids);
  w.finish();
  return path;
}

}  // namespace

TEST_CASE("token files: ids of 1, 2 and 4 bytes written in pieces read back, the header says what they are") {
  const fs::path dir = test::scratch_dir("tokens", "round_trip");
  for (const auto& [bytes_wide, ids_known] : {std::pair{1, Index{256}}, std::pair{1, Index{7}}, std::pair{2, Index{65536}},
                                                std::pair{2, Index{300}}, std::pair{4, Index{1} << 31},
                                                std::pair{4, Index{70000}}}) {
    const int width = bytes_wide;  // copies: doctest's CAPTURE is a lambda, which cannot name a structured binding
    const Index vocab = ids_known;
    CAPTURE(width);
    CAPTURE(vocab);
    const fs::path path = dir / fmt::format("w{}_v{}.bin", width, vocab);
    TokenFileWriter w(path, width, vocab);
    std::vector<std::int32_t> all;
    Rng rng(static_cast<std::uint64_t>(width), 1);
    for (int piece = 0; piece < 3; ++piece) {
      std::vector<std::int32_t> ids;
      for (int i = 0; i < 100'000 + piece; ++i) ids.push_back(static_cast<std::int32_t>(rng.next_u64() % static_cast<std::uint64_t>(vocab)));
      w.append(ids);
      all.insert(all.end(), ids.begin(), ids.end());
    }
    CHECK_FALSE(fs::exists(path));  // not in place before it is whole
    w.finish();
    const TokenFile f(path);
    CHECK(f.width() == width);
    CHECK(f.vocab() == vocab);
    CHECK(f.size() == static_cast<Index>(all.size()));
    CHECK(fs::file_size(path) == 64 + all.size() * static_cast<std::size_t>(width));
    std::vector<std::int32_t> back(all.size());
    f.read(0, back);
    CHECK(back == all);
    std::vector<std::int32_t> middle(5);
    f.read(123'456, middle);
    CHECK(middle == std::vector<std::int32_t>(all.begin() + 123'456, all.begin() + 123'461));
    CHECK_NOTHROW(f.verify());
    Index scanned = 0;
    f.scan(10, f.size() - 20, [&](Index at, std::span<const std::int32_t> ids) {
      CHECK(at == 10 + scanned);
      CHECK(std::equal(ids.begin(), ids.end(), all.begin() + at));
      scanned += static_cast<Index>(ids.size());
    });
    CHECK(scanned == f.size() - 20);
  }
  // Bytes as their own ids; the fingerprint moves with any id, at the cost of the header alone.
  TokenFileWriter bytes(dir / "bytes.bin", 1, 256);
  bytes.append_bytes("hello, world");
  bytes.finish();
  TokenFileWriter other(dir / "other.bin", 1, 256);
  other.append_bytes("hello, wortd");
  other.finish();
  CHECK(TokenFile(dir / "bytes.bin").fingerprint() != TokenFile(dir / "other.bin").fingerprint());
  CHECK(TokenFile(dir / "bytes.bin").fingerprint() == TokenFile(dir / "bytes.bin").fingerprint());
  std::vector<std::int32_t> h(5);
  TokenFile(dir / "bytes.bin").read(0, h);
  CHECK(h == std::vector<std::int32_t>{'h', 'e', 'l', 'l', 'o'});
}

TEST_CASE("token files: append and append_bytes refuse an id outside the vocabulary before they append any of the call's") {
  const fs::path dir = test::scratch_dir("tokens", "append_bytes");
  TokenFileWriter w(dir / "small.bin", 1, 100);
  std::string bytes(std::size_t{3} << 20, 'a');  // three of the writer's 1 MiB buffers ahead of the refused byte
  bytes.push_back(static_cast<char>(200));
  const std::string refusal = "id 200 for '" + (dir / "small.bin").string() + "' is outside its vocabulary of 100";
  CHECK_THROWS_WITH_AS(w.append_bytes(bytes), doctest::Contains(refusal.c_str()), ValueError);
  CHECK_THROWS_WITH_AS(w.append(std::vector<std::int32_t>{'a', 'b', 200}), doctest::Contains(refusal.c_str()),
                       ValueError);  // append(ids) likewise: nothing of the call
  w.append_bytes("ab");
  w.finish();
  const TokenFile f(dir / "small.bin");
  REQUIRE(f.size() == 2);  // none of the refused calls' ids is in the file
  std::vector<std::int32_t> ids(2);
  f.read(0, ids);
  CHECK(ids == std::vector<std::int32_t>{'a', 'b'});
}

TEST_CASE("token files: a writer that does not finish leaves nothing, and the old file as it was") {
  const fs::path dir = test::scratch_dir("tokens", "unfinished");
  written(dir / "a.bin", 2, 1000, 50);
  const std::string before = slurp(dir / "a.bin");
  {
    TokenFileWriter w(dir / "a.bin", 2, 1000);
    w.append(std::vector<std::int32_t>{1, 2, 3});
    CHECK_THROWS_WITH_AS(w.append(std::vector<std::int32_t>{1000}),
                         ("token file: id 1000 for '" + (dir / "a.bin").string() + "' is outside its vocabulary of 1000").c_str(),
                         ValueError);
  }
  CHECK(slurp(dir / "a.bin") == before);
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);  // no temporary file left
  TokenFileWriter empty(dir / "e.bin", 1, 256);
  CHECK_THROWS_AS(empty.finish(), ValueError);
  CHECK_THROWS_AS(TokenFileWriter(dir / "x.bin", 3, 10), ValueError);
  CHECK_THROWS_AS(TokenFileWriter(dir / "x.bin", 1, 257), ValueError);
  CHECK_THROWS_AS(TokenFileWriter(dir / "x.bin", 2, 0), ValueError);
}

TEST_CASE("token files: hostile files are refused in one line naming the file") {
  const fs::path dir = test::scratch_dir("tokens", "hostile");
  const std::string ids2 = std::string("\x01\x00\x02\x00\x03\x00", 6);  // 1, 2, 3 at width 2
  struct Case {
    std::string name, bytes, says;
  };
  const std::vector<Case> cases = {
      {"width3", forged_token_file(3, 100, 2, std::string(6, '\1')), "says its ids are 3 bytes wide; a token file's are 1, 2 or 4"},
      {"width0", forged_token_file(0, 100, 2, ""), "says its ids are 0 bytes wide"},
      {"vocab_too_wide", forged_token_file(1, 300, 6, "abcdef"), "says its vocabulary has 300 ids; ids of 1 byte name 1 to 256"},
      {"vocab0", forged_token_file(2, 0, 3, ids2), "says its vocabulary has 0 ids"},
      {"vocab_past_int32", forged_token_file(4, (std::uint64_t{1} << 31) + 1, 1, std::string(4, '\0')), "ids of 4 bytes name 1 to 2147483648"},
      {"odd_size", forged_token_file(2, 100, 3, ids2 + "\x07"), "holds 7 bytes after its header, not a whole number of 2-byte ids"},
      {"count_lies_more", forged_token_file(2, 100, 4, ids2), "says it holds 4 ids of 2 bytes, but 6 bytes follow its header (3 ids)"},
      {"count_lies_less", forged_token_file(2, 100, 2, ids2), "says it holds 2 ids of 2 bytes, but 6 bytes follow its header (3 ids)"},
      {"width_lies", forged_token_file(1, 256, 3, ids2), "says it holds 3 ids of 1 byte, but 6 bytes follow its header (6 ids)"},
      {"no_ids", forged_token_file(1, 256, 0, ""), "says it holds 0 ids"},
      {"not_tokens", std::string(100, 'x'), "is not a token file"},
      {"short", std::string("tgtokens"), "is not a token file"},
      {"future", [&] {
         std::string f = forged_token_file(2, 100, 3, ids2);
         test::put_le<std::uint32_t>(f, 8, 2);
         test::reseal_token_header(f);
         return f;
       }(), "is a token file of format 2; this build reads format 1"},
      {"damaged", [&] {
         std::string f = forged_token_file(2, 100, 3, ids2);
         f[20] = 1;  // the vocabulary's size, after the checksum was taken
         return f;
       }(), "has a damaged header (its checksum does not match)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const fs::path path = dir / c.name;
    put(path, c.bytes);
    const std::string message = test::message_of([&] { TokenFile f(path, "--data"); });
    CHECK(message.starts_with("--data: '" + path.string() + "'"));
    CHECK(message.find(c.says) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
  CHECK_THROWS_AS(TokenFile(dir / "missing"), FileError);
  CHECK_THROWS_AS(TokenFile{dir}, FileError);  // a folder
}

TEST_CASE("token files: ids outside the vocabulary and ids changed after writing are refused, by verify and by reads") {
  const fs::path dir = test::scratch_dir("tokens", "ids");
  // The header says a vocabulary of 100; id 200 sits at position 5000.
  std::string payload;
  for (int i = 0; i < 10'000; ++i) payload += static_cast<char>(i == 5000 ? 200 : i % 100);
  put(dir / "outside", forged_token_file(1, 100, 10'000, payload));
  const TokenFile outside(dir / "outside", "--data");
  const std::string says = "--data: '" + (dir / "outside").string() + "' holds id 200 at position 5000, outside its vocabulary of 100";
  CHECK_THROWS_WITH_AS(outside.verify(), says.c_str(), FormatError);
  std::vector<std::int32_t> window(65);
  CHECK_NOTHROW(outside.read(0, window));
  CHECK_THROWS_WITH_AS(outside.read(4990, window), says.c_str(), FormatError);
  // An id the map has none for.
  written(dir / "mapped", 1, 256, 1000);
  std::vector<std::int32_t> map(256, -1);
  for (int b = 0; b < 200; ++b) map[static_cast<std::size_t>(b)] = b;
  CHECK_THROWS_WITH_AS(TokenFile(dir / "mapped").verify(map),
                       ("token file: '" + (dir / "mapped").string() +
                        "' holds id 200 at position 200, which the vocabulary it is read with does not have").c_str(),
                       FormatError);
  const TokenWindows through = TokenWindows::training(std::make_shared<const TokenFile>(dir / "mapped"), 8, map);
  SequenceBatch b;
  CHECK_NOTHROW(through.fill(std::vector<Index>{0}, b));
  CHECK_THROWS_AS(through.fill(std::vector<Index>{195}, b), FormatError);
  // read() through a map (as TokenWindows reads): the map's ids, and verify's refusal at the id's position.
  const TokenFile mapped(dir / "mapped");
  std::vector<std::int32_t> shifted(256, -1), ids(3);
  for (int id = 0; id < 200; ++id) shifted[static_cast<std::size_t>(id)] = 1000 + id;
  mapped.read(197, ids, shifted);
  CHECK(ids == std::vector<std::int32_t>{1197, 1198, 1199});
  CHECK_THROWS_WITH_AS(mapped.read(198, ids, shifted),
                       ("token file: '" + (dir / "mapped").string() +
                        "' holds id 200 at position 200, which the vocabulary it is read with does not have").c_str(),
                       FormatError);
  // Ids changed in place, the header kept: verify's CRC tells.
  written(dir / "changed", 2, 1000, 5000);
  {
    std::fstream f(dir / "changed", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 2 * 2500);
    f.put('\x05');
  }
  const std::string changed = test::message_of([&] { TokenFile(dir / "changed").verify(); });
  CHECK(changed.starts_with("token file: '" + (dir / "changed").string() + "' holds other ids than it was written with"));
}

TEST_CASE("token files: a file truncated or rewritten under a reader is an error in one line, never SIGBUS") {
  const fs::path dir = test::scratch_dir("tokens", "truncated");
  written(dir / "t.bin", 1, 256, 10'000);
  const auto file = std::make_shared<const TokenFile>(dir / "t.bin", "--data");
  const TokenWindows windows = TokenWindows::training(file, 64, {});
  SequenceBatch b;
  windows.fill(std::vector<Index>{0, 9000}, b);
  fs::resize_file(dir / "t.bin", 64 + 5000);
  const std::string truncated = test::message_of([&] { windows.fill(std::vector<Index>{9000}, b); });
  CHECK(truncated == "--data: '" + (dir / "t.bin").string() +
                         "' changed while in use: it holds 5064 bytes, 10064 when it was opened (truncated or rewritten)");
  CHECK_THROWS_AS(windows.fill(std::vector<Index>{0}, b), FormatError);  // wherever the window is
  // Rewritten in place at the same size: its modification time tells.
  written(dir / "r.bin", 1, 256, 10'000);
  const auto same = std::make_shared<const TokenFile>(dir / "r.bin");
  std::vector<std::int32_t> ids(10);
  same->read(0, ids);
  const auto was = fs::last_write_time(dir / "r.bin");
  {
    std::fstream f(dir / "r.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('x');
  }
  fs::last_write_time(dir / "r.bin", was + std::chrono::seconds(1));
  CHECK(test::message_of([&] { same->read(0, ids); }).find("changed while in use: it was modified after it was opened") !=
        std::string::npos);
  // Replaced by another file (a rename over it): the reader goes on with the file it opened.
  written(dir / "k.bin", 1, 256, 1000);
  const TokenFile kept(dir / "k.bin");
  written(dir / "k.bin", 1, 256, 10);
  std::vector<std::int32_t> tail(5);
  kept.read(995, tail);
  CHECK(tail == std::vector<std::int32_t>{995 % 256, 996 % 256, 997 % 256, 998 % 256, 999 % 256});
}

TEST_CASE("token files: ids changed in place with their size and modification time kept (touch -r) are an error under a reader") {
  const fs::path dir = test::scratch_dir("tokens", "changed_in_place");
  written(dir / "t.bin", 1, 256, 10'000);
  const TokenFile file(dir / "t.bin", "--data");
  std::vector<std::int32_t> ids(10);
  file.read(0, ids);
  struct stat before {};
  REQUIRE(::stat((dir / "t.bin").c_str(), &before) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the file system's clock tick
  {
    std::fstream f(dir / "t.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('x');
  }
  const timespec times[2] = {before.st_atim, before.st_mtim};  // touch -r: the times put back
  REQUIRE(::utimensat(AT_FDCWD, (dir / "t.bin").c_str(), times, 0) == 0);
  CHECK(fs::file_size(dir / "t.bin") == 10'064);
  CHECK(test::message_of([&] { file.read(0, ids); }) ==
        "--data: '" + (dir / "t.bin").string() +
            "' changed while in use: it was modified after it was opened (rewritten, or its times set back)");
}

TEST_CASE("token windows: training starts anywhere, consecutive windows advance by T, a sample is seeded") {
  const fs::path dir = test::scratch_dir("tokens", "windows");
  const auto file = std::make_shared<const TokenFile>(written(dir / "w.bin", 2, 1000, 23));
  const TokenWindows train = TokenWindows::training(file, 5);
  CHECK(train.size() == 18);  // starts 0 .. 17: ids [17, 23) is the last window of 6
  SequenceBatch b;
  train.fill(std::vector<Index>{0, 17}, b);
  CHECK(b.tokens == Ids(Shape::mat(2, 5), {0, 1, 2, 3, 4, 17, 18, 19, 20, 21}));
  CHECK(b.labels == Ids(Shape::mat(2, 5), {1, 2, 3, 4, 5, 18, 19, 20, 21, 22}));
  CHECK(b.weight() == 10);
  CHECK_FALSE(b.padded);
  CHECK_THROWS_WITH_AS(train.fill(std::vector<Index>{18}, b),
                       ("fill: example 18 is outside data source '" + (dir / "w.bin").string() + "' of 18 examples").c_str(),
                       ValueError);  // the words of every source

  const TokenWindows all = TokenWindows::consecutive(file, 5);
  CHECK(consecutive_windows(23, 5) == 4);  // [0, 5], [5, 10], [10, 15], [15, 20]; ids 21, 22 left out
  CHECK(all.size() == 4);
  CHECK(all.predicted() == 20);
  all.fill(std::vector<Index>{3}, b);
  CHECK(b.tokens == Ids(Shape::mat(1, 5), {15, 16, 17, 18, 19}));
  CHECK(b.labels == Ids(Shape::mat(1, 5), {16, 17, 18, 19, 20}));
  const TokenWindows every_other = TokenWindows::consecutive(file, 5, 2);
  CHECK(every_other.size() == 2);
  CHECK(every_other.start(1) == 10);
  CHECK(every_other.fingerprint() != all.fingerprint());
  CHECK(TokenWindows::sample(file, 5, 4, 1).fingerprint() == all.fingerprint());  // a sample of all: all, in order
  for (const Index context : {0, -3}) {  // refused by every kind, before anything divides by it
    const std::string refusal = fmt::format("token file: windows of a context of {}; give 1 or more", context);
    CHECK_THROWS_WITH_AS(TokenWindows::training(file, context), refusal.c_str(), ValueError);
    CHECK_THROWS_WITH_AS(TokenWindows::consecutive(file, context), refusal.c_str(), ValueError);
    CHECK_THROWS_WITH_AS(TokenWindows::sample(file, context, 3, 1), refusal.c_str(), ValueError);
  }
  CHECK_FALSE(TokenWindows::sample(file, 5, 9, 1).sampled());

  // A sample of a larger file: distinct consecutive windows, the same for a seed, another for another.
  const auto big = std::make_shared<const TokenFile>(written(dir / "big.bin", 2, 60000, 100'001));
  const TokenWindows s1 = TokenWindows::sample(big, 10, 300, 7), again = TokenWindows::sample(big, 10, 300, 7),
                     s2 = TokenWindows::sample(big, 10, 300, 8);
  CHECK(s1.sampled());
  CHECK(s1.size() == 300);
  CHECK(s1.population() == 10'000);
  std::set<Index> starts;
  for (Index k = 0; k < s1.size(); ++k) {
    CHECK(s1.start(k) % 10 == 0);
    CHECK(s1.start(k) == again.start(k));
    starts.insert(s1.start(k));
  }
  CHECK(starts.size() == 300);
  CHECK(s1.fingerprint() == again.fingerprint());
  CHECK(s1.fingerprint() != s2.fingerprint());
  std::vector<std::int32_t> w(11);
  s1.window(299, w);
  CHECK(w.front() == s1.start(299) % 60000);

  // A file shorter than one window, in one line naming it.
  const auto tiny = std::make_shared<const TokenFile>(written(dir / "tiny.bin", 1, 256, 10), "--data");
  CHECK_THROWS_WITH_AS(TokenWindows::training(tiny, 10),
                       ("--data: '" + (dir / "tiny.bin").string() +
                        "' holds 10 ids, fewer than one window of 11 (a context of 10 and the id after it)").c_str(),
                       FormatError);
  CHECK_THROWS_AS(TokenWindows::training(tiny, 4, std::vector<std::int32_t>(100, 0)), ValueError);  // a map of 100 for 256
}

TEST_CASE("prepare: documents stream into two token files, every k-th to validation, with their counts") {
  const fs::path dir = test::scratch_dir("tokens", "prepare");
  TextSplitWriter out(dir / "train.bin", dir / "val.bin", {.validation_every = 3, .separator = "|"});
  for (int d = 0; d < 7; ++d) {
    out.bytes("doc");
    out.bytes(std::to_string(d));
    out.end_document();
  }
  CHECK_FALSE(fs::exists(dir / "train.bin"));
  const TextSplitWriter::Summary s = out.finish();
  CHECK(test::token_text(TokenFile(dir / "train.bin")) == "doc0|doc1|doc3|doc4|doc6|");
  CHECK(test::token_text(TokenFile(dir / "val.bin")) == "doc2|doc5|");
  CHECK(s.documents[0] == 5);
  CHECK(s.documents[1] == 2);
  CHECK(s.bytes[0] == 25);
  CHECK(s.byte_counts['|'] == 7);
  CHECK(s.byte_counts['d'] == 7);
  CHECK(s.train_pairs['d' * 256 + 'o'] == 5);
  CHECK(s.train_pairs['|' * 256 + 'd'] == 4);  // across documents, in the training file's order
  CHECK(s.train_pairs['5' * 256 + '|'] == 0);  // a validation document's
  // Both files or neither: no validation document, nothing put in place.
  const fs::path none = test::scratch_dir("tokens", "prepare_none");
  {
    TextSplitWriter few(none / "train.bin", none / "val.bin", {.validation_every = 10});
    few.bytes("only one");
    few.end_document();
    CHECK_THROWS_AS(few.finish(), ValueError);
  }
  CHECK(fs::is_empty(none));
}

TEST_CASE("prepare: a write that fails (a full disk, a file-size limit) leaves the earlier pair of files, never half a pair") {
  const fs::path dir = test::scratch_dir("tokens", "prepare_half");
  const auto prepare = [&](std::string_view training, std::size_t validation_bytes) {
    TextSplitWriter out(dir / "train.bin", dir / "val.bin", {.validation_every = 2, .separator = "|"});
    out.bytes(training);
    out.end_document();
    out.bytes(std::string(validation_bytes, 'v'));
    out.end_document();
    out.finish();
  };
  prepare("the earlier training document", 10);
  const std::string train = slurp(dir / "train.bin"), validation = slurp(dir / "val.bin");
  // In a child, under a file-size limit that the training file fits and the validation file does not.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{8192, 8192};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(9);
    try {
      prepare("a new training document", 20'000);
    } catch (const IoError&) {
      ::_exit(0);
    }
    ::_exit(1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(slurp(dir / "train.bin") == train);  // the earlier pair, both files
  CHECK(slurp(dir / "val.bin") == validation);
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 2);  // no temporary file left
}

TEST_CASE("prepare: a file that cannot be put in place (its name is a folder) puts the other one back, never half a pair") {
  const fs::path dir = test::scratch_dir("tokens", "prepare_rename");
  const auto prepare = [&](std::string_view training) {
    TextSplitWriter out(dir / "train.bin", dir / "val.bin", {.validation_every = 2, .separator = "|"});
    out.bytes(training);
    out.end_document();
    out.bytes("validation");
    out.end_document();
    out.finish();
  };
  const auto entries = [&] { return std::distance(fs::directory_iterator(dir), fs::directory_iterator()); };
  const std::string refusal = "prepare: renaming into place '" + (dir / "val.bin").string() + "' failed";
  // Over an earlier pair, both files replaced (the training file by exchange, the one it replaced removed).
  prepare("the first training document");
  prepare("the earlier training document");
  CHECK(test::token_text(TokenFile(dir / "train.bin")) == "the earlier training document|");
  CHECK(test::token_text(TokenFile(dir / "val.bin")) == "validation|");
  CHECK(entries() == 2);
  // The two names one file: refused, nothing left.
  const fs::path one = test::scratch_dir("tokens", "prepare_one");
  {
    TextSplitWriter out(one / "t.bin", one / "." / "t.bin", {.validation_every = 2});
    out.bytes("a");
    out.end_document();
    out.bytes("b");
    out.end_document();
    CHECK_THROWS_WITH_AS(out.finish(), doctest::Contains("are one file; give two"), ValueError);
  }
  CHECK(fs::is_empty(one));
  // Putting a file back needs names exchanged (renameat2's RENAME_EXCHANGE), which not every file system does.
  put(dir / "a", "a");
  put(dir / "b", "b");
  if (::renameat2(AT_FDCWD, (dir / "a").c_str(), AT_FDCWD, (dir / "b").c_str(), RENAME_EXCHANGE) != 0) {
    MESSAGE("skipped: the file system of ", dir.string(), " does not exchange names");
    return;
  }
  fs::remove(dir / "a");
  fs::remove(dir / "b");
  // The training file's name held a file: it holds it again.
  const std::string train = slurp(dir / "train.bin");
  fs::remove(dir / "val.bin");
  fs::create_directories(dir / "val.bin" / "inside");
  CHECK_THROWS_WITH_AS(prepare("a new training document"), doctest::Contains(refusal.c_str()), IoError);
  CHECK(slurp(dir / "train.bin") == train);
  CHECK(fs::is_directory(dir / "val.bin" / "inside"));
  CHECK(entries() == 2);  // no temporary file left
  // It held nothing: it holds nothing again.
  fs::remove(dir / "train.bin");
  CHECK_THROWS_WITH_AS(prepare("a new training document"), doctest::Contains(refusal.c_str()), IoError);
  CHECK_FALSE(fs::exists(dir / "train.bin"));
  CHECK(entries() == 1);
}

TEST_CASE("read_file_pieces reads to the end a file whose size the system reports as 0 (/proc), and names its limit") {
  std::string status;
  const std::size_t n = read_file_pieces("/proc/self/status", 1 << 20, "--data", [&](std::string_view p) { status += p; });
  CHECK(n > 0);
  CHECK(n == status.size());
  CHECK(status.starts_with("Name:"));
  const fs::path dir = test::scratch_dir("tokens", "pieces");
  put(dir / "ten", "0123456789");
  std::string got;
  CHECK(read_file_pieces(dir / "ten", 10, "op", [&](std::string_view p) { got += p; }, 3) == 10);  // at the limit
  CHECK(got == "0123456789");
  CHECK_THROWS_WITH_AS(read_file_pieces("/proc/self/status", 16, "--data", [](std::string_view) {}),
                       "--data: '/proc/self/status' holds more than the limit of 16 bytes", LimitError);
}

TEST_CASE("sampler state in a checkpoint: a computed order keeps its number of examples") {
  Sampler s(100'000, 7, 3);
  s.next();
  const Checkpoint c = decode_checkpoint(encode_checkpoint(snapshot({{"batches", s}})), "memory");
  // Another n is refused by name, nothing changed; the same n goes on in the same order.
  Sampler other(70'000, 7, 3);
  const Sampler::State other_before = other.state();
  CHECK_THROWS_AS(restore(c, {{"batches", other}}), FormatError);
  CHECK(other.state().order == other_before.order);
  CHECK(other.state().cursor == other_before.cursor);
  Sampler resumed(100'000, 7, 99);
  restore(c, {{"batches", resumed}});
  CHECK(resumed.state().examples == 100'000);
  const std::span<const Index> a = resumed.next();
  const std::vector<Index> got(a.begin(), a.end());
  const std::span<const Index> b = s.next();
  CHECK(got == std::vector<Index>(b.begin(), b.end()));
  // A stored order keeps its permutation (and so its size).
  Sampler small(1000, 7, 3);
  Sampler small_back(1000, 7, 4);
  restore(decode_checkpoint(encode_checkpoint(snapshot({{"batches", small}})), "memory"), {{"batches", small_back}});
  CHECK(small_back.state().order == small.state().order);
  CHECK(small_back.state().examples == 1000);
}
