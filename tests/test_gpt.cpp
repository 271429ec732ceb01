// examples/gpt: the data reader on a small synthetic fortune folder (which files, the split into fortunes,
// the validation fortunes, the streams, the vocabulary, the windows, the refusals), the bigram, and the
// model (nanoGPT's parameter count and initialisation, sampling with and without the cache).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gpt/model.hpp"
#include "gpt/text.hpp"
#include "helpers.hpp"
#include "tapegrad/core/crc32.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& p, std::string_view text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

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

TEST_CASE("gpt data: the files of a folder in byte order, every 10th fortune for validation, the two streams") {
  const fs::path dir = fortune_folder();
  const gpt::Corpus c = gpt::read_corpus(dir, "--data");
  CHECK(c.files == std::vector<std::string>{"B", "a", "b"});
  CHECK(c.fortunes == 23);
  CHECK(c.empty == 2);
  CHECK(c.train_fortunes == 21);
  CHECK(c.validation_fortunes == 2);
  std::string train, validation;
  for (int k = 0; k < 23; ++k) {
    const std::string f = k == 22 ? "f22 has no newline\n" : fortune(k);
    (k % 10 == 9 ? validation : train) += f + "%\n";
  }
  CHECK(c.validation == validation);  // fortunes 9 and 19
  CHECK(c.train == train);
  // One file is read as it is.
  const gpt::Corpus one = gpt::read_corpus(dir / "a", "--data");
  CHECK(one.files == std::vector<std::string>{"a"});
  CHECK(one.fortunes == 10);
  CHECK(one.validation == fortune(14) + "%\n");
  fs::remove_all(dir);
}

TEST_CASE("gpt data: refusals name the flag and the path, in one line") {
  const fs::path dir = test::scratch_dir("gpt", "refusals");
  const std::string empty = "--data: the folder '" + dir.string() +
                            "' holds no file to read (it reads the regular files whose names have no '.')";
  CHECK_THROWS_WITH_AS(gpt::read_corpus(dir, "--data"), empty.c_str(), FileError);
  put(dir / "only.txt", "a\n%\n");
  CHECK_THROWS_AS(gpt::read_corpus(dir, "--data"), FileError);  // still nothing without a '.'
  put(dir / "few", "a\n%\nb\n%\n");
  CHECK_THROWS_WITH_AS(gpt::read_corpus(dir, "--data"),
                       ("--data: '" + dir.string() +
                        "' holds 2 fortunes; every 10th is for validation, so at least 10 are needed (fortunes are "
                        "separated by lines that are exactly '%')").c_str(),
                       FormatError);
  put(dir / "binary", std::string("a\0b", 3));
  CHECK_THROWS_WITH_AS(gpt::read_corpus(dir, "--data"),
                       ("--data: '" + (dir / "binary").string() + "' is not a text file (it holds NUL bytes)").c_str(),
                       FormatError);
  CHECK_THROWS_WITH_AS(gpt::read_corpus(dir / "missing", "--data"),
                       ("--data: cannot open '" + (dir / "missing").string() + "': No such file or directory").c_str(),
                       FileError);
  CHECK_THROWS_WITH_AS(gpt::read_corpus("/dev/null", "--data"), "--data: '/dev/null' is neither a folder nor a regular file",
                       FileError);
  fs::remove_all(dir);
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
  CHECK_THROWS_WITH_AS(v.encode("he~", "--prompt"),
                       "--prompt: byte 0x7e ('~') at position 2 is not in the vocabulary of 7 bytes", ValueError);
  CHECK_THROWS_WITH_AS(v.encode("h\x01", "--prompt"),
                       "--prompt: byte 0x01 ('0x01') at position 1 is not in the vocabulary of 7 bytes", ValueError);
  for (std::string_view bad : {"", "0a0a", "0A", "0a2", "2565x1", "650a"})
    CHECK_THROWS_AS(gpt::ByteVocabulary::from_hex(bad, "gpt"), ValueError);
}

TEST_CASE("gpt data: a stream becomes its ids in place, a byte each") {
  const gpt::ByteVocabulary v = gpt::ByteVocabulary::of("hello\n", "%\xe2");
  std::string text = "hole\xe2hole\xe2hole\xe2hole\xe2";  // longer than a std::string holds in itself
  const char* where = text.data();
  const gpt::TokenBytes ids = v.encode_in_place(std::move(text), "--data");
  CHECK(ids->substr(0, 5) == std::string("\x03\x05\x04\x02\x06", 5));
  CHECK(ids->size() == 20);
  CHECK(ids->data() == where);  // the same buffer: the text is not held twice
  CHECK_THROWS_WITH_AS(v.encode_in_place("he~", "--data"),
                       "--data: byte 0x7e ('~') at position 2 is not in the vocabulary of 7 bytes", ValueError);
}

TEST_CASE("gpt data: training windows start anywhere, validation windows advance by the context") {
  std::string bytes(23, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i);
  const gpt::TokenBytes ids = std::make_shared<const std::string>(bytes);
  const gpt::Windows train = gpt::Windows::training("train", ids, 5);
  CHECK(train.size() == 18);  // starts 0 .. 17: bytes [17, 23) is the last window of 6
  SequenceBatch b;
  train.fill(std::vector<Index>{0, 17}, b);
  CHECK(b.tokens == Ids(Shape::mat(2, 5), {0, 1, 2, 3, 4, 17, 18, 19, 20, 21}));
  CHECK(b.labels == Ids(Shape::mat(2, 5), {1, 2, 3, 4, 5, 18, 19, 20, 21, 22}));
  CHECK(b.weight() == 10);
  CHECK_FALSE(b.padded);
  CHECK_THROWS_AS(train.fill(std::vector<Index>{18}, b), ValueError);

  const gpt::Windows validation = gpt::Windows::validation("validation", ids, 5);
  CHECK(gpt::validation_windows(23, 5) == 4);  // [0, 5], [5, 10], [10, 15], [15, 20]; bytes 21, 22 left out
  CHECK(validation.size() == 4);
  CHECK(validation.predicted() == 20);
  validation.fill(std::vector<Index>{3}, b);
  CHECK(b.tokens == Ids(Shape::mat(1, 5), {15, 16, 17, 18, 19}));
  CHECK(b.labels == Ids(Shape::mat(1, 5), {16, 17, 18, 19, 20}));
  const gpt::Windows every_other = gpt::Windows::validation("curve", ids, 5, 2);
  CHECK(every_other.size() == 2);
  CHECK(every_other.start(1) == 10);
  CHECK(every_other.fingerprint() != validation.fingerprint());
  // The fingerprint is the CRC-32 of the ids as 32-bit words, as when they were held so: today's
  // checkpoints name their data by it.
  Crc32 old;
  for (Index v : {Index{5}, Index{5}, Index{4}}) old.add_le(static_cast<std::uint64_t>(v));
  for (std::int32_t i = 0; i < 23; ++i) old.add_le(i);
  CHECK(validation.fingerprint() == old.value());
  std::string long_stream(10'000, '\0');  // past the fingerprint's 1024-id pieces
  for (std::size_t i = 0; i < long_stream.size(); ++i) long_stream[i] = static_cast<char>(i * 7 % 251);
  Crc32 long_old;
  for (Index v : {Index{5}, Index{1}, Index{9'995}}) long_old.add_le(static_cast<std::uint64_t>(v));
  for (char c : long_stream) long_old.add_le(static_cast<std::int32_t>(static_cast<unsigned char>(c)));
  CHECK(gpt::Windows::training("t", std::make_shared<const std::string>(long_stream), 5).fingerprint() == long_old.value());
  // A context longer than the text: no window, in one line naming the flag.
  CHECK_THROWS_WITH_AS(gpt::Windows::validation("--data: the validation text", ids, 23),
                       "--data: the validation text: 23 bytes make no window of 24 bytes (--context 23 + 1); give a "
                       "shorter --context or more text",
                       ValueError);
  CHECK_THROWS_AS(gpt::Windows::training("train", ids, 23), ValueError);
}

TEST_CASE("gpt data: the bigram's probabilities are add-one smoothed counts, its loss the mean over the predicted bytes") {
  const std::vector<std::uint8_t> train = {0, 1, 0, 1, 1};  // pairs 01, 10, 01, 11
  const gpt::Bigram bigram(train, 2);
  CHECK(bigram.probability(0, 1) == doctest::Approx(3.0 / 4));  // (2 + 1) / (2 + 2)
  CHECK(bigram.probability(1, 0) == doctest::Approx(2.0 / 4));
  CHECK(bigram.probability(1, 1) == doctest::Approx(2.0 / 4));
  CHECK(bigram.parameter_count() == 4);
  const std::vector<std::uint8_t> validation = {0, 1, 1, 0};
  CHECK(bigram.nll(validation, 2) == doctest::Approx(-(std::log(0.75) + std::log(0.5)) / 2));
  CHECK_THROWS_AS(bigram.nll(validation, 4), ValueError);
}

TEST_CASE("gpt model: nanoGPT's parameters and initialisation") {
  // Shakespeare's 65 characters at nanoGPT's CPU setting: 809,856 parameters, which nanoGPT prints as
  // "0.80M" (it leaves out the 64 x 128 positions).
  std::string hex;
  for (int b = 0; b < 65; ++b) hex += fmt::format("{:02x}", b + 32);
  gpt::Gpt<float>::Config c{.vocabulary = hex};
  gpt::Gpt<float> model(c);
  CHECK(model.count_parameters() == 809856);
  CHECK(gpt::Gpt<float>::count_parameters(c) == 809856);
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
  CHECK_THROWS_AS(gpt::Gpt<float>::count_parameters(bad), ValueError);
  CHECK_THROWS_AS(gpt::Gpt<float>{bad}, ValueError);
}

TEST_CASE("gpt model: the same text sampled with and without the cache, past the context") {
  const gpt::ByteVocabulary v = gpt::ByteVocabulary::of("abcdefgh %\n", "");
  for (AttentionMode mode : {AttentionMode::learnable, AttentionMode::parameter_free}) {
    CAPTURE(to_string(mode));
    gpt::Gpt<float> model({.vocabulary = v.hex(), .context = 8, .d_model = 16, .n_heads = 2, .n_layers = 2, .attention = mode,
                      .seed = 4});
    for (auto* p : model.parameters()) p->value.array() *= 4;  // further from uniform than at the start
    model.eval();
    const std::vector<std::int32_t> prompt = v.encode("%\n", "prompt");
    const auto cached = sample(model, prompt, {.count = 40, .seed = 9});
    CHECK(cached == sample(model, prompt, {.count = 40, .seed = 9, .cache = false}));
    CHECK(cached != sample(model, prompt, {.count = 40, .seed = 10}));
  }
}
