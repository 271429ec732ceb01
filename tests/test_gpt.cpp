// examples/gpt: the data's preparation on a small synthetic fortune folder (which files, the split into
// fortunes, the validation fortunes, the streams, the vocabulary, preparing once, the refusals), the
// fingerprint of checkpoints written before token files, the bigram, and the model (nanoGPT's parameter
// count and initialisation, sampling with and without the cache).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "gpt/model.hpp"
#include "gpt/prepare.hpp"
#include "gpt/text.hpp"
#include "helpers.hpp"
#include "token_files.hpp"
#include "tapegrad/core/crc32.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

using test::put;
using test::slurp;

// Fortune k: "f<k>\n" and, for odd k, a second line.
std::string fortune(int k) { return fmt::format("f{}\n", k) + (k % 2 ? fmt::format("line two of {}\n", k) : ""); }

// 23 fortunes in three files read in byte order ("B" < "a" < "b"), with empty fortunes, a last line without
// its newline, and files that are not read: names with a '.', a folder.
fs::path fortune_folder() {
  const fs::path dir = test::scratch_dir("gpt", "fortunes");
  std::string b_upper, a, b;
  for (int k = 0; k < 5; ++k) b_upper += fortune(k) + "%\n";  // 0 .. 4, each closed by its separator
  a = "%\n%\n";                                               // two empty fortunes first
  for (int k = 5; k < 15; ++k) a += fortune(k) + (k < 14 ? "%\n" : "");  // 5 .. 14, the last one not closed
  for (int k = 15; k < 22; ++k) b += fortune(k) + "%\n";
  b += "f22 has no newline";
  put(dir / "B", b_upper);
  put(dir / "a", a);
  put(dir / "b", b);
  put(dir / "a.dat", std::string("\0\1\2", 3));  // fortune's index files: binary, and left out
  put(dir / "notes.txt", "not fortunes\n%\n");
  fs::create_directories(dir / "sub");
  put(dir / "sub" / "c", "inside a folder\n%\n");
  return dir;
}

}  // namespace

TEST_CASE("gpt data: a file splits into fortunes at lines that are exactly '%', each line with its newline") {
  const gpt::FileFortunes f = gpt::split_fortunes("a\nb\n%\n\n%\n%\n% not a separator\n%%\n %\nlast");
  REQUIRE(f.fortunes.size() == 3);
  CHECK(f.fortunes[0] == "a\nb\n");
  CHECK(f.fortunes[1] == "\n");  // a blank line is a fortune's byte; only nothing at all is empty
  CHECK(f.fortunes[2] == "% not a separator\n%%\n %\nlast\n");
  CHECK(f.empty == 1);
  CHECK(gpt::split_fortunes("").fortunes.empty());
  CHECK(gpt::split_fortunes("x\r\n%\r\ny\n").fortunes == std::vector<std::string>{"x\r\n%\r\ny\n"});  // "%\r" is not "%"
  CHECK(gpt::split_fortunes("a\n%").fortunes == std::vector<std::string>{"a\n"});  // a last "%" without its newline
  CHECK(gpt::split_fortunes("%").empty == 1);
}

TEST_CASE("gpt data: the streaming splitter gives split_fortunes' fortunes whatever the pieces") {
  struct Collect final : gpt::FortuneSplitter::Sink {
    std::vector<std::string> fortunes{""};
    Index empty = 0;
    void bytes(std::string_view b) override { fortunes.back() += b; }
    void close(bool is_empty) override {
      if (is_empty)
        ++empty;
      else
        fortunes.emplace_back();
    }
  };
  for (const std::string_view text : {"a\nb\n%\n\n%\n%\n% not a separator\n%%\n %\nlast", "a\n%", "%", "%\n%\nx",
                                      "x\r\n%\r\ny\n", "", "\n", "%%\n%\n"}) {
    const gpt::FileFortunes whole = gpt::split_fortunes(text);
    for (std::size_t piece = 1; piece <= 4; ++piece) {
      CAPTURE(text);
      CAPTURE(piece);
      Collect c;
      gpt::FortuneSplitter splitter(c);
      for (std::size_t at = 0; at < text.size(); at += piece) splitter.feed(text.substr(at, piece));
      splitter.finish();
      c.fortunes.pop_back();  // the one opened after the last close
      CHECK(c.fortunes == whole.fortunes);
      CHECK(c.empty == whole.empty);
    }
  }
}

TEST_CASE("gpt data: prepared in one pass: the files in byte order, every 10th fortune for validation, the two streams") {
  const fs::path dir = fortune_folder(), prepared = test::scratch_dir("gpt", "prepared");
  const gpt::Prepared p = gpt::prepare_data(dir, prepared, "--data");
  CHECK(p.made);
  CHECK(p.files == std::vector<std::string>{"B", "a", "b"});
  CHECK(p.fortunes == 23);
  CHECK(p.empty == 2);
  CHECK(p.train_fortunes == 21);
  CHECK(p.validation_fortunes == 2);
  std::string train, validation;
  for (int k = 0; k < 23; ++k) {
    const std::string f = k == 22 ? "f22 has no newline\n" : fortune(k);
    (k % 10 == 9 ? validation : train) += f + "%\n";
  }
  CHECK(test::token_text(*p.validation) == validation);  // fortunes 9 and 19
  CHECK(test::token_text(*p.train) == train);
  CHECK(p.vocabulary.bytes() == gpt::ByteVocabulary::of(train, validation).bytes());
  CHECK(p.train_pairs['f' * 256 + '1'] > 0);
  CHECK(p.text_bytes == fs::file_size(dir / "B") + fs::file_size(dir / "a") + fs::file_size(dir / "b"));
  for (const char* name : {"train.bin", "val.bin", "meta.json"}) CHECK(fs::exists(prepared / name));
  // One file is read as it is.
  const gpt::Prepared one = gpt::prepare_data(dir / "a", test::scratch_dir("gpt", "prepared_one"), "--data");
  CHECK(one.files == std::vector<std::string>{"a"});
  CHECK(one.fortunes == 10);
  CHECK(test::token_text(*one.validation) == fortune(14) + "%\n");
}

TEST_CASE("gpt data: prepared once: the same data is found prepared, changed data is prepared again") {
  const fs::path dir = fortune_folder(), prepared = test::scratch_dir("gpt", "again");
  const gpt::Prepared first = gpt::prepare_data(dir, prepared, "--data");
  const auto written = fs::last_write_time(prepared / "train.bin");
  const gpt::Prepared second = gpt::prepare_data(dir, prepared, "--data");
  CHECK_FALSE(second.made);
  CHECK(fs::last_write_time(prepared / "train.bin") == written);
  CHECK(second.train->fingerprint() == first.train->fingerprint());
  CHECK(second.fortunes == 23);
  CHECK(second.vocabulary.bytes() == first.vocabulary.bytes());
  CHECK(second.train_pairs == first.train_pairs);
  // --data may name the prepared folder itself.
  const gpt::Prepared direct = gpt::prepare_data(prepared, "unused", "--data");
  CHECK_FALSE(direct.made);
  CHECK(direct.validation->fingerprint() == first.validation->fingerprint());
  CHECK_FALSE(fs::exists("unused"));
  // Another fortune in a file: prepared again, other files.
  std::ofstream(dir / "b", std::ios::app) << "\n%\nf23\n";
  const gpt::Prepared third = gpt::prepare_data(dir, prepared, "--data");
  CHECK(third.made);
  CHECK(third.fortunes == 24);
  CHECK(third.train->fingerprint() != first.train->fingerprint());
  // Another source into the same folder: prepared again for it.
  CHECK(gpt::prepare_data(dir / "a", prepared, "--data").made);
  CHECK(gpt::prepare_data(dir / "a", prepared, "--data").fortunes == 10);
}

TEST_CASE("gpt data: refusals name the flag and the path, in one line") {
  const fs::path dir = test::scratch_dir("gpt", "refusals"), prepared = test::scratch_dir("gpt", "refusals_prepared");
  const std::string empty = "--data: the folder '" + dir.string() +
                            "' holds no file to read (it reads the regular files whose names have no '.')";
  CHECK_THROWS_WITH_AS(gpt::prepare_data(dir, prepared, "--data"), empty.c_str(), FileError);
  put(dir / "only.txt", "a\n%\n");
  CHECK_THROWS_AS(gpt::prepare_data(dir, prepared, "--data"), FileError);  // still nothing without a '.'
  put(dir / "few", "a\n%\nb\n%\n");
  CHECK_THROWS_WITH_AS(gpt::prepare_data(dir, prepared, "--data"),
                       ("--data: '" + dir.string() +
                        "' holds 2 fortunes; every 10th is for validation, so at least 10 are needed (fortunes are "
                        "separated by lines that are exactly '%')").c_str(),
                       FormatError);
  put(dir / "binary", std::string("a\0b", 3));
  CHECK_THROWS_WITH_AS(gpt::prepare_data(dir, prepared, "--data"),
                       ("--data: '" + (dir / "binary").string() + "' is not a text file (it holds NUL bytes)").c_str(),
                       FormatError);
  CHECK_THROWS_WITH_AS(gpt::prepare_data(dir / "missing", prepared, "--data"),
                       ("--data: cannot open '" + (dir / "missing").string() + "': No such file or directory").c_str(),
                       FileError);
  CHECK_THROWS_WITH_AS(gpt::prepare_data("/dev/null", prepared, "--data"),
                       "--data: '/dev/null' is neither a folder nor a regular file", FileError);
  // Nothing of the refused preparations is left in the folder but its lock.
  for (const auto& e : fs::directory_iterator(prepared)) CHECK(e.path().filename() == ".lock");
  // A --prepared folder with a file of someone else's is not written into.
  const fs::path yours = test::scratch_dir("gpt", "refusals_yours");
  put(yours / "notes.txt", "mine");
  CHECK_THROWS_WITH_AS(gpt::prepare_data(fortune_folder(), yours, "--data"),
                       ("--prepared: '" + yours.string() +
                        "' holds 'notes.txt', which is not gpt's prepared data; give a new or empty folder, or one gpt "
                        "prepared").c_str(),
                       FileError);
  CHECK(slurp(yours / "notes.txt") == "mine");
  // Nor is a preparation of gpt's where a folder or a link has one of gpt's names: the data changed, a new
  // preparation would be swapped in and the earlier one removed whole, with what that folder held (it was,
  // before this refusal) or the link itself.
  const fs::path data = fortune_folder(), earlier = test::scratch_dir("gpt", "refusals_earlier");
  gpt::prepare_data(data, earlier, "--data");
  put(data / "c", fortune(30) + "%\n");  // the preparation is stale: the next call prepares again
  fs::remove(earlier / "val.bin");
  fs::create_directory(earlier / "val.bin");
  put(earlier / "val.bin" / "notes.txt", "mine");
  const auto refusal = [&](const char* name, const char* kind) {
    return "--prepared: '" + earlier.string() + "' holds '" + name + "' (" + kind +
           "), which is not gpt's prepared data; give a new or empty folder, or one gpt prepared";
  };
  CHECK_THROWS_WITH_AS(gpt::prepare_data(data, earlier, "--data"), refusal("val.bin", "a folder").c_str(), FileError);
  CHECK(slurp(earlier / "val.bin" / "notes.txt") == "mine");
  fs::remove_all(earlier / "val.bin");
  fs::create_symlink(yours / "notes.txt", earlier / "val.bin");
  CHECK_THROWS_WITH_AS(gpt::prepare_data(data, earlier, "--data"), refusal("val.bin", "a link").c_str(), FileError);
  CHECK(fs::is_symlink(earlier / "val.bin"));
  CHECK(slurp(yours / "notes.txt") == "mine");
  // A folder with a temporary's name is no temporary of gpt's either (gpt's are files).
  fs::remove(earlier / "val.bin");
  fs::create_directory(earlier / ".val.bin.tmp-1");
  put(earlier / ".val.bin.tmp-1" / "notes.txt", "mine");
  CHECK_THROWS_WITH_AS(gpt::prepare_data(data, earlier, "--data"), refusal(".val.bin.tmp-1", "a folder").c_str(),
                       FileError);
  CHECK(slurp(earlier / ".val.bin.tmp-1" / "notes.txt") == "mine");
}

TEST_CASE("gpt data: a file that reports no size (/proc) is read to its end (issue 52: it held '0 fortunes')") {
  const fs::path prepared = test::scratch_dir("gpt", "proc");
  CHECK_THROWS_WITH_AS(gpt::prepare_data("/proc/self/status", prepared, "--data"),
                       "--data: '/proc/self/status' holds 1 fortune; every 10th is for validation, so at least 10 are "
                       "needed (fortunes are separated by lines that are exactly '%')",
                       FormatError);
}

TEST_CASE("gpt data: two files larger together than the old 256 MiB limit are prepared (issue 52)") {
  // Each file alone was within the limit; the second was refused with what was left of it, as if a
  // per-file limit. Now the text streams through and no limit is left.
  const fs::path dir = test::scratch_dir("gpt", "large"), prepared = test::scratch_dir("gpt", "large_prepared");
  std::string block;
  for (int k = 0; block.size() < (std::size_t{1} << 20); ++k) block += fortune(k) + "%\n";
  const std::size_t copies = 130;  // 130 MiB a file
  for (const char* name : {"a", "b"}) {
    std::ofstream out(dir / name, std::ios::binary);
    for (std::size_t i = 0; i < copies; ++i) out << block;
  }
  const gpt::Prepared p = gpt::prepare_data(dir, prepared, "--data");
  CHECK(p.text_bytes == 2 * copies * block.size());
  CHECK(p.text_bytes > (std::uint64_t{256} << 20));
  CHECK(p.train->size() + p.validation->size() == static_cast<Index>(p.text_bytes));
  CHECK(p.validation_fortunes * 10 == p.fortunes);
  fs::remove_all(dir);
  fs::remove_all(prepared);
}

TEST_CASE("gpt data: a prepared folder given as --data is checked: files other than meta.json names, bytes outside it") {
  const fs::path dir = fortune_folder(), prepared = test::scratch_dir("gpt", "hostile_prepared");
  const gpt::Prepared p = gpt::prepare_data(dir, prepared, "--data");
  const Index n = p.train->size();
  // A token file of other ids in train.bin's place.
  {
    TokenFileWriter w(prepared / "train.bin", 1, 256);
    w.append_bytes(std::string(static_cast<std::size_t>(n), 'f'));
    w.finish();
  }
  CHECK(test::message_of([&] { gpt::prepare_data(prepared, "", "--data"); })
            .starts_with("--data: '" + (prepared / "train.bin").string() + "' is not the file meta.json names"));
  // One whose bytes meta.json's vocabulary lacks, its CRC made to match: refused by the pass over its ids.
  std::string bytes = test::token_text(*p.train);
  bytes[100] = '~';
  {
    TokenFileWriter w(prepared / "train.bin", 1, 256);
    w.append_bytes(bytes);
    w.finish();
  }
  const std::string meta = slurp(prepared / "meta.json");
  const TokenFile forged(prepared / "train.bin");
  std::string patched = meta;
  const std::string crc = fmt::format("\"ids_crc32\":{}", p.train->ids_crc32());
  REQUIRE(patched.find(crc) != std::string::npos);
  patched.replace(patched.find(crc), crc.size(), fmt::format("\"ids_crc32\":{}", forged.ids_crc32()));
  put(prepared / "meta.json", patched);
  CHECK(test::message_of([&] { gpt::prepare_data(prepared, "", "--data"); }) ==
        "--data: '" + (prepared / "train.bin").string() +
            "' holds id 126 at position 100, which the vocabulary it is read with does not have");
}

TEST_CASE("gpt data: the byte vocabulary is the sorted set of both streams' bytes") {
  const gpt::ByteVocabulary v = gpt::ByteVocabulary::of("hello\n", "%\xe2");
  CHECK(v.bytes() == std::string("\n%ehlo\xe2"));
  CHECK(v.size() == 7);
  CHECK(v.id('\n') == 0);
  CHECK(v.id('o') == 5);
  CHECK(v.id('z') == -1);
  CHECK(v.hex() == "0a2565686c6fe2");
  CHECK(gpt::ByteVocabulary::from_hex(v.hex(), "x").bytes() == v.bytes());
  CHECK(v.encode("hole", "--prompt") == std::vector<std::int32_t>{3, 5, 4, 2});
  CHECK(v.decode(std::vector<std::int32_t>{3, 2, 4, 4, 5}) == "hello");
  CHECK(v.map()['o'] == 5);
  CHECK(v.map()['z'] == -1);
  std::array<std::uint64_t, 256> counts{};
  for (unsigned char c : std::string("hello\n%\xe2")) ++counts[c];
  CHECK(gpt::ByteVocabulary::of_counts(counts).bytes() == v.bytes());
  CHECK_THROWS_WITH_AS(v.encode("he~", "--prompt"),
                       "--prompt: byte 0x7e ('~') at position 2 is not in the vocabulary of 7 bytes", ValueError);
  CHECK_THROWS_WITH_AS(v.encode("h\x01", "--prompt"),
                       "--prompt: byte 0x01 ('0x01') at position 1 is not in the vocabulary of 7 bytes", ValueError);
  for (std::string_view bad : {"", "0a0a", "0A", "0a2", "2565x1", "650a"})
    CHECK_THROWS_AS(gpt::ByteVocabulary::from_hex(bad, "gpt"), ValueError);
}

TEST_CASE("gpt data: windows of a prepared file name their data as held windows did, for checkpoints written then") {
  const fs::path dir = test::scratch_dir("gpt", "held");
  std::string bytes(10'000, '\0');  // past the fingerprint's 1024-id pieces
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 % 251);
  TokenFileWriter w(dir / "t.bin", 1, 256);
  w.append_bytes(bytes);
  w.finish();
  const auto file = std::make_shared<const TokenFile>(dir / "t.bin");
  const gpt::ByteVocabulary v = gpt::ByteVocabulary::of(bytes, "");
  // What the in-memory windows' fingerprint was: the geometry, then every id as a 32-bit word.
  auto held = [&](Index context, Index stride, Index count) {
    Crc32 crc;
    for (Index x : {context, stride, count}) crc.add_le(static_cast<std::uint64_t>(x));
    for (char c : bytes) crc.add_le(static_cast<std::int32_t>(v.id(static_cast<unsigned char>(c))));
    return crc.value();
  };
  CHECK(gpt::held_fingerprint(TokenWindows::training(file, 5, v.map())) == held(5, 1, 9'995));
  CHECK(gpt::held_fingerprint(TokenWindows::consecutive(file, 5, 1, v.map())) == held(5, 5, 1'999));
  CHECK(gpt::held_fingerprint(TokenWindows::consecutive(file, 5, 3, v.map())) == held(5, 15, 666));
}

TEST_CASE("gpt data: the bigram's probabilities are add-one smoothed counts, its loss the mean over the predicted bytes") {
  const gpt::ByteVocabulary v = gpt::ByteVocabulary::of("ab", "");
  std::vector<std::uint64_t> pairs(256 * 256, 0);  // training "ababb": pairs ab, ba, ab, bb
  pairs['a' * 256 + 'b'] = 2;
  pairs['b' * 256 + 'a'] = 1;
  pairs['b' * 256 + 'b'] = 1;
  const gpt::Bigram bigram(pairs, v);
  CHECK(bigram.probability(0, 1) == doctest::Approx(3.0 / 4));  // (2 + 1) / (2 + 2)
  CHECK(bigram.probability(1, 0) == doctest::Approx(2.0 / 4));
  CHECK(bigram.probability(1, 1) == doctest::Approx(2.0 / 4));
  CHECK(bigram.count_parameters() == 4);
  const fs::path dir = test::scratch_dir("gpt", "bigram");
  TokenFileWriter w(dir / "v.bin", 1, 256);
  w.append_bytes("abbab");  // windows of 2: "abb", "bab"
  w.finish();
  const TokenWindows windows = TokenWindows::consecutive(std::make_shared<const TokenFile>(dir / "v.bin"), 2, 1, v.map());
  std::vector<double> per_window;
  const double ab = std::log(0.75), bb = std::log(0.5), ba = std::log(0.5);
  CHECK(bigram.nll(windows, &per_window) == doctest::Approx(-(ab + bb + ba + ab) / 4));
  REQUIRE(per_window.size() == 2);
  CHECK(per_window[0] == doctest::Approx(-(ab + bb) / 2));
  CHECK(per_window[1] == doctest::Approx(-(ba + ab) / 2));
  pairs['a' * 256 + 'z'] = 1;  // a byte outside the vocabulary
  CHECK_THROWS_AS(gpt::Bigram(pairs, v), ValueError);
}

TEST_CASE("gpt model: nanoGPT's parameters and initialisation") {
  // Shakespeare's 65 characters at nanoGPT's CPU setting: 809,856 parameters, which nanoGPT prints as
  // "0.80M" (it leaves out the 64 x 128 positions).
  std::string hex;
  for (int b = 0; b < 65; ++b) hex += fmt::format("{:02x}", b + 32);
  gpt::Gpt<float>::Config c;
  c.vocabulary = hex;
  gpt::Gpt<float> model(c);
  CHECK(model.count_parameters() == 809856);
  CHECK(gpt::Gpt<float>::count_parameters_of(c) == 809856);
  c.attention = AttentionMode::parameter_free;
  CHECK(gpt::Gpt<float>(c).count_parameters() == 809856 - 4 * (4 * 128 * 128 + 4 * 128));
  auto sd = [](const Tensor& t) { return std::sqrt(t.array().template cast<double>().square().mean()); };
  CHECK(sd(model.parameter("embed.table").value) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(sd(model.parameter("stack.blocks.1.attn.wq").value) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(sd(model.parameter("stack.blocks.1.attn.wo").value) == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  CHECK(sd(model.parameter("stack.blocks.3.ff.linear2.weight").value) == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  CHECK(model.parameter("stack.blocks.0.attn.bq").value.array().abs().maxCoeff() == 0);
  CHECK(model.parameter("stack.norm.weight").value.array().minCoeff() == 1);
  gpt::Gpt<float>::Config bad = c;
  bad.vocabulary = "zz";
  CHECK_THROWS_AS(gpt::Gpt<float>::count_parameters_of(bad), ValueError);
  CHECK_THROWS_AS(gpt::Gpt<float>{bad}, ValueError);
}

TEST_CASE("gpt model: the same text sampled with and without the cache, past the context") {
  const gpt::ByteVocabulary v = gpt::ByteVocabulary::of("abcdefgh %\n", "");
  for (AttentionMode mode : {AttentionMode::learnable, AttentionMode::parameter_free}) {
    CAPTURE(to_string(mode));
    gpt::Gpt<float> model(
        {{.context = 8, .d_model = 16, .n_heads = 2, .n_layers = 2, .attention = mode, .seed = 4}, v.hex()});
    for (auto* p : model.parameters()) p->value.array() *= 4;  // further from uniform than at the start
    model.eval();
    const std::vector<std::int32_t> prompt = v.encode("%\n", "prompt");
    const auto cached = sample(model, prompt, {.count = 40, .seed = 9});
    CHECK(cached == sample(model, prompt, {.count = 40, .seed = 9, .cache = false}));
    CHECK(cached != sample(model, prompt, {.count = 40, .seed = 10}));
  }
}
