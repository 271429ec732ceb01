// safetensors: the format both ways, loading strictly and partially with conversions, the metadata tapegrad
// writes, and every rule of the reader, each with a crafted hostile file: its one-line refusal, the module
// untouched, and memory that stays bounded whatever sizes the file claims.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "helpers.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/layers/linear.hpp"
#include "tapegrad/train/checkpoint/safetensors.hpp"
#include "user_models.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

// A file: the header's 8-byte length (that of `header` unless `length` says otherwise), the header, the data.
std::string st_file(std::string_view header, std::string_view data = "", std::optional<std::uint64_t> length = std::nullopt) {
  std::string out(8, '\0');
  const std::uint64_t n = length.value_or(header.size());
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out.append(header).append(data);
}

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span<const char>(s)); }

std::string f32_bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) {
    const auto bits = std::bit_cast<std::uint32_t>(v);
    for (int i = 0; i < 4; ++i) out += static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  return out;
}

// The weight (2x1) and bias (1) of a Linear(2 -> 1) as a valid file: {"weight": F32 [2, 1], "bias": F32 [1]}.
const std::string kLinearHeader =
    R"({"weight":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]},"bias":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";

// Writes `file` to disk, loads it (strictly) into a Linear(2 -> 1), and returns the refusal's message after
// "safetensors '<path>': ", checking that it is one line and that the layer is unchanged.
std::string refusal(const std::string& file) {
  static const fs::path dir = test::scratch_dir("safetensors", "hostile");
  const fs::path path = dir / "hostile.safetensors";
  write_file(path, file);
  Rng rng(1);
  Linear<float> layer("", {.in = 2, .out = 1}, rng);
  const Tensor weight = layer.weight().value, bias = layer.bias().value;
  std::string message;
  try {
    load_safetensors(path, layer);
    FAIL("the file loaded");
  } catch (const FormatError& e) {
    message = e.what();
  }
  CHECK(layer.weight().value == weight);
  CHECK(layer.bias().value == bias);
  CHECK(message.find('\n') == std::string::npos);
  const std::string prefix = "safetensors '" + path.string() + "': ";
  REQUIRE_MESSAGE(message.starts_with(prefix), message);
  return message.substr(prefix.size());
}

std::string entry(std::string_view name, std::string_view dtype, std::string_view shape, std::string_view offsets) {
  return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":{}}})", name, dtype, shape, offsets);
}

// {"<entry>","<entry>",...}: a header of the given entries.
std::string object(std::initializer_list<std::string> entries) { return fmt::format("{{{}}}", fmt::join(entries, ",")); }

}  // namespace

// ---- the format -----------------------------------------------------------------------------------------------

TEST_CASE("safetensors: a module's weights go out and back bit for bit, in float and double, with tapegrad's metadata") {
  const fs::path dir = test::scratch_dir("safetensors", "round_trip");
  test::Mlp model({.in = 3, .hidden = 4, .out = 2, .seed = 1});
  save_safetensors(dir / "mlp.safetensors", model, {.metadata = {{"data", "halves"}}});
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);  // no temporary left behind
  test::Mlp copy({.in = 3, .hidden = 4, .out = 2, .seed = 2});
  const LoadReport report = load_safetensors(dir / "mlp.safetensors", copy);
  CHECK(report.loaded == std::vector<std::string>{"hidden.weight", "hidden.bias", "out.weight", "out.bias"});
  CHECK(report.converted.empty());
  for (const auto* p : model.parameters()) CHECK(copy.parameter(p->name).value == p->value);

  const std::string bytes = read_file(dir / "mlp.safetensors", 1 << 20);
  CHECK((8 + (bytes[0] & 0xff)) % 8 == 0);  // the data starts 8-byte aligned
  const SafetensorsView file = decode_safetensors(bytes_of(bytes), "mlp");
  CHECK(file.metadata.at("producer") == fmt::format("tapegrad {}", tapegrad_version()));
  CHECK(file.metadata.at("tapegrad.layout") == "tapegrad");
  CHECK(file.metadata.at("tapegrad.model") == "test_mlp");
  CHECK(file.metadata.at("tapegrad.config.hidden") == "4");
  CHECK(file.metadata.at("data") == "halves");
  CHECK(file.metadata.count("format") == 0);  // "pt" only for PyTorch's names
  CHECK(file.tensors[0].name == "hidden.weight");
  CHECK(file.tensors[0].dtype == SafetensorsDtype::f32);
  CHECK(file.tensors[0].shape == std::vector<std::uint64_t>{3, 4});

  // F64 from a float model, read back into a double twin: every float exactly.
  const std::vector<std::byte> f64 = encode_safetensors(model, {.dtype = SafetensorsDtype::f64});
  Rng rng(3);
  struct DoubleMlp : Module<double> {
    Linear<double> hidden, out;
    explicit DoubleMlp(Rng& r) : hidden("hidden", {.in = 3, .out = 4}, r), out("out", {.in = 4, .out = 2}, r) {
      register_child(hidden);
      register_child(out);
    }
  } twin(rng);
  CHECK(load_safetensors(decode_safetensors(f64, "f64"), twin).converted.empty());
  CHECK(twin.hidden.weight().value == model.parameter("hidden.weight").value.cast<double>());
  // And the double twin written as F32 loads into the float model as it was.
  test::Mlp again({.in = 3, .hidden = 4, .out = 2, .seed = 4});
  load_safetensors(decode_safetensors(encode_safetensors(twin, {.dtype = SafetensorsDtype::f32}), "f32"), again);
  CHECK(again.parameter("out.weight").value == model.parameter("out.weight").value);
  fs::remove_all(dir);
}

TEST_CASE("safetensors: read_safetensors gives a file's names, dtypes, shapes and tensors") {
  const fs::path dir = test::scratch_dir("safetensors", "read");
  Rng rng(3);
  Linear<float> layer("", {.in = 3, .out = 2}, rng);
  save_safetensors(dir / "linear.safetensors", layer);
  const SafetensorsFile f = read_safetensors(dir / "linear.safetensors");
  REQUIRE(f.tensors().size() == 2);
  CHECK(f.tensors()[0].name == "weight");
  CHECK(f.tensors()[0].dtype == SafetensorsDtype::f32);
  CHECK(f.tensors()[0].shape == std::vector<std::uint64_t>{3, 2});
  CHECK(f.tensor<float>("weight") == layer.weight().value);  // bit for bit
  CHECK(f.tensor<double>("bias").shape() == Shape::vec(2));
  CHECK(f.tensor<double>("bias")[1] == static_cast<double>(layer.bias().value[1]));
  const SafetensorsFile copy = f;  // shares the bytes its views point into
  CHECK(copy.tensor<float>("bias") == layer.bias().value);
  const std::string where = (dir / "linear.safetensors").string();
  CHECK_THROWS_WITH_AS(f.tensor<float>("nope"), fmt::format("safetensors '{}': no tensor named 'nope' (2 tensors)", where).c_str(),
                       NameError);
  // A rank the library's tensors do not have, and a dtype it does not read: named, not guessed.
  write_file(dir / "odd.safetensors",
             st_file(object({entry("four", "F32", "[1,1,1,2]", "[0,8]"), entry("ints", "I32", "[2]", "[8,16]")}),
                     f32_bytes({1, 2}) + std::string(8, '\0')));
  const SafetensorsFile odd = read_safetensors(dir / "odd.safetensors");
  const std::string odd_path = (dir / "odd.safetensors").string();
  CHECK_THROWS_WITH_AS(odd.tensor<float>("four"),
                       fmt::format("safetensors '{}': 'four' is 1x1x1x2, of rank 4; a tensor has rank 3 at most",
                                   odd_path).c_str(),
                       FormatError);
  CHECK_THROWS_WITH_AS(odd.tensor<float>("ints"),
                       fmt::format("safetensors '{}': 'ints' is I32; tapegrad reads F16, BF16, F32 and F64", odd_path).c_str(),
                       FormatError);
  CHECK_THROWS_AS(read_safetensors(dir / "missing.safetensors"), FileError);
}

TEST_CASE("safetensors: tapegrad writes F32 or F64 only, and keeps its own metadata keys") {
  test::Mlp model({.in = 2, .hidden = 2, .out = 2});
  CHECK_THROWS_WITH_AS(encode_safetensors(model, {.dtype = SafetensorsDtype::f16}),
                       "save_safetensors: tapegrad writes F32 or F64, not F16", ValueError);
  CHECK_THROWS_WITH_AS(encode_safetensors(model, {.metadata = {{"producer", "me"}}}),
                       "save_safetensors: the metadata key 'producer' is tapegrad's own; name the program's keys otherwise",
                       ValueError);
  CHECK_THROWS_AS(encode_safetensors(model, {.metadata = {{"tapegrad.mine", "x"}}}), ValueError);
}

TEST_CASE("safetensors: decode then encode gives a file that decodes to the same tensors and metadata") {
  const std::string file = st_file(object({R"("__metadata__":{"k":"v"})", entry("b", "I64", "[1]", "[4,12]"),
                                           entry("a", "F16", "[2]", "[0,4]"), entry("s", "F64", "[]", "[12,20]")}),
                                   std::string(20, '\x01'));
  const SafetensorsView view = decode_safetensors(bytes_of(file), "file");
  REQUIRE(view.tensors.size() == 3);
  CHECK(view.tensors[0].name == "a");  // in the order of their bytes
  CHECK(view.tensors[2].shape.empty());  // a scalar
  CHECK(view.tensors[2].numel() == 1);
  const std::vector<std::byte> again = encode_safetensors(view);
  const SafetensorsView back = decode_safetensors(again, "again");
  CHECK(back.metadata == view.metadata);
  REQUIRE(back.tensors.size() == 3);
  for (std::size_t k = 0; k < 3; ++k) {
    CHECK(back.tensors[k].name == view.tensors[k].name);
    CHECK(back.tensors[k].dtype == view.tensors[k].dtype);
    CHECK(back.tensors[k].shape == view.tensors[k].shape);
    CHECK(std::equal(back.tensors[k].data.begin(), back.tensors[k].data.end(), view.tensors[k].data.begin(),
                     view.tensors[k].data.end()));
  }
  SafetensorsView twice = view;
  twice.tensors.push_back(view.tensors[0]);
  CHECK_THROWS_WITH_AS(encode_safetensors(twice), "encode_safetensors: the name 'a' is given to two tensors", ValueError);
}

// ---- loading ----------------------------------------------------------------------------------------------------

TEST_CASE("safetensors: F16, BF16 and F64 load into a float module, converted, and the report names each conversion") {
  Rng rng(1);
  Linear<float> layer("", {.in = 2, .out = 1}, rng);
  // F16 0x3c00 = 1, 0xc000 = -2, 0x0001 = 2^-24 (subnormal); BF16 0x3fc0 = 1.5.
  const std::string file = st_file(
      object({entry("weight", "F16", "[2,1]", "[0,4]"), entry("bias", "BF16", "[1]", "[4,6]")}) + "     ",
      std::string("\x00\x3c\x00\xc0\xc0\x3f", 6));
  LoadReport report = load_safetensors(decode_safetensors(bytes_of(file), "f16"), layer);
  CHECK(layer.weight().value == Tensor(Shape::mat(2, 1), {1.0f, -2.0f}));
  CHECK(layer.bias().value == Tensor(Shape::vec(1), {1.5f}));
  CHECK(report.converted == std::vector<std::string>{"'weight' from F16 to F32", "'bias' from BF16 to F32"});
  CHECK(report.str() == "loaded 2 parameters; converted 'weight' from F16 to F32; converted 'bias' from BF16 to F32");
  const std::string subnormal = st_file(object({entry("weight", "F16", "[2,1]", "[0,4]"), entry("bias", "F64", "[1]", "[4,12]")}),
                                        std::string("\x01\x00\x00\x7c", 4) + std::string(8, '\0'));
  // 0x7c00 is +inf: not a weight.
  CHECK_THROWS_WITH_AS(load_safetensors(decode_safetensors(bytes_of(subnormal), "inf"), layer),
                       "load_safetensors: 'weight' holds inf as F32 at element 1 of 'weight'; a weight must be finite; "
                       "nothing was loaded",
                       FormatError);
  CHECK(layer.weight().value == Tensor(Shape::mat(2, 1), {1.0f, -2.0f}));  // unchanged
  report = load_safetensors(decode_safetensors(bytes_of(subnormal), "inf"), layer, {.strict = false});
  CHECK(report.loaded == std::vector<std::string>{"bias"});
  CHECK(report.converted == std::vector<std::string>{"'bias' from F64 to F32"});
  CHECK(report.mismatched.size() == 1);
  Rng drng(1);
  Linear<double> twin("", {.in = 2, .out = 1}, drng);
  const std::string tiny = st_file(object({entry("weight", "F16", "[2,1]", "[0,4]"), entry("bias", "F16", "[1]", "[4,6]")}),
                                   std::string("\x01\x00\x00\x00\x00\x80", 6));
  load_safetensors(decode_safetensors(bytes_of(tiny), "tiny"), twin);
  CHECK(twin.weight().value[0] == std::ldexp(1.0, -24));
  CHECK(twin.bias().value[0] == 0.0);
  CHECK(std::signbit(twin.bias().value[0]));  // F16 -0
}

TEST_CASE("safetensors: a strict load names every missing, unexpected and mismatched tensor, and changes nothing") {
  Rng rng(1);
  Linear<float> layer("", {.in = 2, .out = 1}, rng);
  const Tensor before = layer.weight().value;
  // weight 1x2 instead of 2x1, no bias, an I64 "bias.step" nobody asked for, and "extra".
  const std::string file = st_file(object({entry("weight", "F32", "[1,2]", "[0,8]"), entry("extra", "F32", "[1]", "[8,12]")}),
                                   f32_bytes({1, 2, 3}));
  const SafetensorsView view = decode_safetensors(bytes_of(file), "file");
  CHECK_THROWS_WITH_AS(load_safetensors(view, layer),
                       "load_safetensors: the file lacks the model's 'bias'; the model has no 'extra'; 'weight' is 1x2 "
                       "in the file but 2x1 in the model; nothing was loaded",
                       FormatError);
  CHECK(layer.weight().value == before);
  const LoadReport partial = load_safetensors(view, layer, {.strict = false});
  CHECK(partial.loaded.empty());
  CHECK(partial.missing == std::vector<std::string>{"bias"});
  CHECK(partial.unexpected == std::vector<std::string>{"extra"});
  CHECK(layer.weight().value == before);

  const std::string ints = st_file(object({entry("weight", "I32", "[2,1]", "[0,8]"), entry("bias", "F32", "[1]", "[8,12]")}),
                                   f32_bytes({1, 2, 7}));
  CHECK_THROWS_WITH_AS(load_safetensors(decode_safetensors(bytes_of(ints), "ints"), layer),
                       "load_safetensors: 'weight' is I32 in the file; tapegrad loads F16, BF16, F32 and F64; nothing was loaded",
                       FormatError);
  const LoadReport some = load_safetensors(decode_safetensors(bytes_of(ints), "ints"), layer, {.strict = false});
  CHECK(some.loaded == std::vector<std::string>{"bias"});
  CHECK(layer.bias().value[0] == 7.0f);
  CHECK(layer.weight().value == before);
}

TEST_CASE("safetensors: load_safetensors refuses a file that is missing, not a file, or over its size limit") {
  const fs::path dir = test::scratch_dir("safetensors", "files");
  Rng rng(1);
  Linear<float> layer("", {.in = 2, .out = 1}, rng);
  CHECK_THROWS_AS(load_safetensors(dir / "none.safetensors", layer), FileError);
  CHECK_THROWS_AS(load_safetensors(dir, layer), FileError);
  write_file(dir / "w.safetensors", st_file(kLinearHeader, f32_bytes({1, 2, 3})));
  CHECK_THROWS_AS(load_safetensors(dir / "w.safetensors", layer, {.max_bytes = 64}), LimitError);
  CHECK(load_safetensors(dir / "w.safetensors", layer).loaded.size() == 2);
  CHECK(layer.weight().value == Tensor(Shape::mat(2, 1), {1.0f, 2.0f}));
  fs::remove_all(dir);
}

// ---- hostile files: one rule each ----------------------------------------------------------------------------

TEST_CASE("safetensors hostile: the header's length: too short a file, over the cap, more than the file, no '{'") {
  CHECK(refusal("abc") == "the file has 3 bytes, fewer than the 8 of the header's length");
  CHECK(refusal(st_file("{}", "", 100'000'001)) == "the header's length is 100000001 bytes, more than the limit of 100000000");
  CHECK(refusal(st_file("{}", "", std::numeric_limits<std::uint64_t>::max())) ==
        "the header's length is 18446744073709551615 bytes, more than the limit of 100000000");
  CHECK(refusal(st_file("{}", "", 99'999'999)) ==
        "the header's length is 99999999 bytes but only 2 follow (the file is truncated or not safetensors)");
  CHECK(refusal(st_file(" {}")) == "the header does not start with '{' (it starts with the byte 0x20)");
  CHECK(refusal(st_file("[]")) == "the header does not start with '{' (it starts with the byte 0x5b)");
  CHECK(refusal(st_file("", "{}")) == "the header does not start with '{' (it starts with nothing: its length is 0)");
  // The file is named whole up to PATH_MAX, so a deep folder's message keeps the file's name.
  const std::string deep = "/home/" + std::string(300, 'd') + "/x.safetensors";
  CHECK_THROWS_WITH_AS(decode_safetensors(bytes_of("abc"), deep), doctest::Contains(("safetensors '" + deep + "': ").c_str()),
                       FormatError);
}

TEST_CASE("safetensors hostile: a header that is not UTF-8 or not JSON") {
  CHECK(refusal(st_file("{\"w\xff\":1}")) == "the header is not valid UTF-8 (byte 3 of the header, 0xff)");
  CHECK(refusal(st_file("{\"w\xc0\xaf\":1}")) == "the header is not valid UTF-8 (byte 3 of the header, 0xc0)");  // overlong '/'
  CHECK(refusal(st_file(R"({"w": })")).starts_with("the header is not valid JSON ([json.exception.parse_error.101] parse error at line 1, column 7"));
  CHECK(refusal(st_file(R"({"w":1} x)")).starts_with("the header is not valid JSON ("));
  // A surrogate escape that is not a pair: the JSON text is ASCII, the string it means is not UTF-8.
  CHECK(refusal(st_file(R"({"\ud800":1})")).starts_with("the header is not valid JSON ("));
}

TEST_CASE("safetensors hostile: a name or a key twice (parsers that keep different ones read different files)") {
  const std::string w = entry("w", "F32", "[1]", "[0,4]");
  CHECK(refusal(st_file(object({w, w}), f32_bytes({1}))) == "the name 'w' appears twice in the header");
  CHECK(refusal(st_file(R"({"w":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", f32_bytes({1}))) ==
        "the entry 'w' has the key 'dtype' twice");
  CHECK(refusal(st_file(R"({"__metadata__":{"k":"a","k":"b"}})")) == "the entry '__metadata__' has the key 'k' twice");
}

TEST_CASE("safetensors hostile: entries that are not tensors: nesting, not an object, unknown or missing keys, dtypes") {
  CHECK(refusal(st_file(R"({"w":{"dtype":"F32","shape":[{"a":1}],"data_offsets":[0,4]}})")) ==
        "the entry 'w' nests an object deeper than a safetensors header has any");
  CHECK(refusal(st_file(R"({"w":{"dtype":"F32","shape":[[[1]]],"data_offsets":[0,4]}})")) ==
        "the entry 'w' nests a list deeper than a safetensors header has any");
  CHECK(refusal(st_file(R"({"w":5})")) == "tensor 'w' is a number, not an object with dtype, shape and data_offsets");
  CHECK(refusal(st_file(R"({"w":[1]})")) == "tensor 'w' is an array, not an object with dtype, shape and data_offsets");
  CHECK(refusal(st_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":0}})", f32_bytes({1}))) ==
        "tensor 'w' has the unknown key 'extra'; a tensor has dtype, shape and data_offsets");
  CHECK(refusal(st_file(R"({"w":{"dtype":"F32","shape":[1]}})")) == "tensor 'w' has no data_offsets");
  CHECK(refusal(st_file(object({entry("w", "F4", "[1]", "[0,4]")}), f32_bytes({1}))) ==
        "tensor 'w' has the unknown dtype \"F4\"; the format's are BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, "
        "I32, U32, F32, I64, U64 or F64");
  CHECK(refusal(st_file(R"({"w":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})")) ==
        "tensor 'w' has the unknown dtype 32; the format's are BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, "
        "I32, U32, F32, I64, U64 or F64");
  // A name with a terminal escape sequence is shown, not obeyed.
  CHECK(refusal(st_file(R"({"a\u001b[2J":5})")) == "tensor 'a\\x1b[2J' is a number, not an object with dtype, shape and data_offsets");
}

TEST_CASE("safetensors hostile: shapes that are not sizes, and sizes that overflow or that the bytes do not hold") {
  CHECK(refusal(st_file(object({entry("w", "F32", "[-2]", "[0,4]")}))) ==
        "tensor 'w' has a shape with -2, not a non-negative integer below 2^64");
  CHECK(refusal(st_file(object({entry("w", "F32", "[2.0]", "[0,8]")}))) ==
        "tensor 'w' has a shape with 2.0, not a non-negative integer below 2^64");
  CHECK(refusal(st_file(object({entry("w", "F32", "[18446744073709551616]", "[0,8]")}))) ==
        "tensor 'w' has a shape with 1.8446744073709552e+19, not a non-negative integer below 2^64");
  CHECK(refusal(st_file(object({entry("w", "F32", "3", "[0,12]")}))) == "tensor 'w' has a shape that is a number, not a list");
  // A terabyte claimed by a 100-byte file: refused on the numbers, nothing allocated.
  CHECK(refusal(st_file(object({entry("w", "F32", "[1000000000,1000000000]", "[0,8]")}), f32_bytes({1, 2}))) ==
        "tensor 'w' is F32 1000000000x1000000000 (4000000000000000000 bytes) but its data_offsets [0, 8] hold 8 bytes");
  CHECK(refusal(st_file(object({entry("w", "F32", "[4294967296,4294967296]", "[0,8]")}))) ==
        "tensor 'w' has the shape 4294967296x4294967296, whose size overflows 64 bits");
  CHECK(refusal(st_file(object({entry("w", "F64", "[2305843009213693952]", "[0,8]")}))) ==  // 2^61 elements, 2^64 bytes
        "tensor 'w' has the shape 2305843009213693952, whose size overflows 64 bits");
}

TEST_CASE("safetensors hostile: data_offsets that are not [begin, end] of the tensor's bytes") {
  CHECK(refusal(st_file(object({entry("w", "F32", "[1]", "[0]")}))) ==
        "tensor 'w' has 1 data_offsets; it must have two, [begin, end]");
  CHECK(refusal(st_file(object({entry("w", "F32", "[1]", "[0,4,8]")}))) ==
        "tensor 'w' has 3 data_offsets; it must have two, [begin, end]");
  CHECK(refusal(st_file(object({entry("w", "F32", "[0]", "[8,0]")}))) ==
        "tensor 'w' has data_offsets [8, 0], which end before they begin");
  CHECK(refusal(st_file(object({entry("w", "F32", "[2]", "[0,4]")}), f32_bytes({1}))) ==
        "tensor 'w' is F32 2 (8 bytes) but its data_offsets [0, 4] hold 4 bytes");
  CHECK(refusal(st_file(object({entry("w", "F32", "[2]", "[0,8]")}), f32_bytes({1}))) ==
        "tensor 'w' has data_offsets [0, 8], past the end of the 4-byte data buffer (the file is truncated)");
}

TEST_CASE("safetensors hostile: tensors that do not tile the data buffer: holes, overlaps, bytes after the last") {
  CHECK(refusal(st_file(object({entry("w", "F32", "[2]", "[4,12]")}), f32_bytes({0, 1, 2}))) ==
        "the bytes [0, 4) of the data buffer belong to no tensor: a hole before tensor 'w'");
  CHECK(refusal(st_file(object({entry("a", "F32", "[2]", "[0,8]"), entry("b", "F32", "[2]", "[12,20]")}),
                        f32_bytes({0, 1, 2, 3, 4}))) == "the bytes [8, 12) of the data buffer belong to no tensor: a hole before tensor 'b'");
  CHECK(refusal(st_file(object({entry("a", "F32", "[2]", "[0,8]"), entry("b", "F32", "[2]", "[4,12]")}),
                        f32_bytes({0, 1, 2}))) == "tensor 'b' has data_offsets [4, 12], which overlap tensor 'a' (it ends at 8)");
  CHECK(refusal(st_file(object({entry("a", "F32", "[2]", "[0,8]"), entry("b", "F32", "[2]", "[0,8]")}),
                        f32_bytes({0, 1}))) == "tensor 'b' has data_offsets [0, 8], which overlap tensor 'a' (it ends at 8)");
  // A polyglot: a valid file with a ZIP's end-of-central-directory record after the last tensor. Built by
  // append: the sum of two temporaries drew a false -Warray-bounds from GCC 12 at -O3 (its inlined copy
  // "past the end" of a 32-byte string), once this file's unit no longer included the program headers.
  std::string zip_end("PK\x05\x06", 4);
  zip_end.append(18, '\0');
  CHECK(refusal(st_file(kLinearHeader, f32_bytes({1, 2, 3}) + zip_end)) ==
        "the file has 22 bytes after the last tensor 'bias' (which ends at 12 of the 34-byte data buffer)");
  CHECK(refusal(st_file("{}", "%PDF")) == "the file has 4 bytes after the header but no tensor");
}

TEST_CASE("safetensors hostile: __metadata__ that is not a map of strings to strings") {
  CHECK(refusal(st_file(R"({"__metadata__":[1]})")) == "__metadata__ is an array, not a map of strings to strings");
  CHECK(refusal(st_file(R"({"__metadata__":"x"})")) == "__metadata__ is a string, not a map of strings to strings");
  CHECK(refusal(st_file(R"({"__metadata__":{"k":1}})")) == "__metadata__ maps 'k' to a number; its values must be strings");
  CHECK(refusal(st_file(R"({"__metadata__":{"k":null}})")) == "__metadata__ maps 'k' to a null; its values must be strings");
}

TEST_CASE("safetensors hostile: a file that claims terabytes is refused in bounded memory") {
  // Files of a few hundred bytes whose numbers promise the most: each refused before anything is
  // allocated for it, so the process's peak memory does not move by more than the test's own noise.
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  for (int k = 0; k < 100; ++k) {
    refusal(st_file(object({entry("w", "F64", "[1000000,1000000,1000]", "[0,8]")}), f32_bytes({1, 2})));
    refusal(st_file("{}", "", 99'999'999));
    refusal(st_file(object({entry("w", "U8", "[4000000000]", "[0,4000000000]")}), f32_bytes({1})));
  }
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024);  // KiB
}

// ---- layouts ----------------------------------------------------------------------------------------------------

TEST_CASE("safetensors: a file that names its layout is refused in the other, strict or not, and the model is unchanged") {
  // A square weight: in the other layout every name and shape matches, and it would load transposed.
  Rng rng(1);
  Linear<float> square("", {.in = 2, .out = 2}, rng);
  const std::vector<std::byte> ours = encode_safetensors(square);
  const std::vector<std::byte> torch = encode_safetensors(square, {.layout = WeightLayout::pytorch});
  Rng other_rng(2);
  Linear<float> copy("", {.in = 2, .out = 2}, other_rng);
  const Tensor weight = copy.weight().value, bias = copy.bias().value;
  REQUIRE(weight != square.weight().value);
  for (const bool strict : {true, false}) {
    CAPTURE(strict);
    CHECK_THROWS_WITH_AS(load_safetensors(decode_safetensors(ours, "ours"), copy, {.layout = WeightLayout::pytorch, .strict = strict}),
                         "load_safetensors: the file's weights are in the 'tapegrad' layout (its tapegrad.layout metadata) "
                         "and this load asked for the 'pytorch' layout; nothing was loaded",
                         FormatError);
    CHECK_THROWS_WITH_AS(load_safetensors(decode_safetensors(torch, "torch"), copy, {.strict = strict}),
                         "load_safetensors: the file's weights are in the 'pytorch' layout (its tapegrad.layout metadata) "
                         "and this load asked for the 'tapegrad' layout; nothing was loaded",
                         FormatError);
    CHECK(copy.weight().value == weight);
    CHECK(copy.bias().value == bias);
  }
  // Each in its own layout: the same weights.
  CHECK(load_safetensors(decode_safetensors(torch, "torch"), copy, {.layout = WeightLayout::pytorch}).loaded.size() == 2);
  CHECK(copy.weight().value == square.weight().value);
  Linear<float> again("", {.in = 2, .out = 2}, other_rng);
  load_safetensors(decode_safetensors(ours, "ours"), again);
  CHECK(again.weight().value == square.weight().value);

  // A file that names no layout, as PyTorch writes them, is read in the layout asked for.
  SafetensorsView unnamed = decode_safetensors(torch, "torch");
  unnamed.metadata.clear();
  Linear<float> fresh("", {.in = 2, .out = 2}, other_rng);
  CHECK(load_safetensors(unnamed, fresh, {.layout = WeightLayout::pytorch}).loaded.size() == 2);
  CHECK(fresh.weight().value == square.weight().value);

  // A layout that is neither is refused as well, shown escaped and cut short.
  SafetensorsView odd = decode_safetensors(ours, "ours");
  odd.metadata["tapegrad.layout"] = "\x1b[2J" + std::string(5000, 'x');
  std::string message;
  try {
    load_safetensors(odd, fresh, {.strict = false});
  } catch (const FormatError& e) {
    message = e.what();
  }
  CHECK(message.starts_with("load_safetensors: the file's weights are in the '\\x1b[2Jxxx"));
  CHECK(message.ends_with("and this load asked for the 'tapegrad' layout; nothing was loaded"));
  CHECK(message.size() < 400);
  CHECK(fresh.weight().value == square.weight().value);  // unchanged by the refused load
}

// ---- many entries ------------------------------------------------------------------------------------------------

namespace {

// A header of n one-byte U8 tensors whose entries come in a scrambled order (7919 is prime, so i -> 7919 i
// mod n visits every slot when n is not its multiple), entry k naming "t<k>" and holding byte slot(k).
std::string scrambled(std::size_t n, const std::function<std::string(std::size_t, std::size_t)>& entry_of) {
  std::vector<std::string> entries;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t k = (i * 7919) % n;
    entries.push_back(entry_of(k, k));
  }
  return fmt::format("{{{}}}", fmt::join(entries, ","));
}

std::string u8(std::size_t name, std::size_t begin, std::size_t end) {
  return entry(fmt::format("t{}", name), "U8", fmt::format("[{}]", end - begin), fmt::format("[{},{}]", begin, end));
}

}  // namespace

TEST_CASE("safetensors: thousands of entries in any order decode in the order of their bytes, every rule enforced") {
  const std::size_t n = 5000;
  std::string data(n, '\0');
  for (std::size_t k = 0; k < n; ++k) data[k] = static_cast<char>(k % 251);
  const std::string header = scrambled(n, [](std::size_t name, std::size_t slot) { return u8(name, slot, slot + 1); });
  const std::string file = st_file(header, data);
  const SafetensorsView view = decode_safetensors(bytes_of(file), "many");
  REQUIRE(view.tensors.size() == n);
  bool in_order = true;
  for (std::size_t k = 0; k < n; ++k)
    in_order = in_order && view.tensors[k].name == fmt::format("t{}", k) && view.tensors[k].data.size() == 1 &&
               std::to_integer<int>(view.tensors[k].data[0]) == static_cast<int>(k % 251);
  CHECK(in_order);

  // One name twice, its two entries far apart in the header.
  const std::string twice = scrambled(n, [](std::size_t name, std::size_t slot) { return u8(name == 4000 ? 17 : name, slot, slot + 1); });
  CHECK(refusal(st_file(twice, data)) == "the name 't17' appears twice in the header");
  // A hole, an overlap and bytes left over, each among thousands of tensors that tile.
  const std::string hole = scrambled(n, [](std::size_t name, std::size_t slot) {
    return slot == 2500 ? entry("t2500", "U8", "[0]", "[2501,2501]") : u8(name, slot, slot + 1);
  });
  CHECK(refusal(st_file(hole, data)) == "the bytes [2500, 2501) of the data buffer belong to no tensor: a hole before tensor 't2500'");
  const std::string overlap = scrambled(n, [](std::size_t name, std::size_t slot) {
    return slot == 2500 ? u8(name, 2499, 2501) : slot == 2501 ? entry("t2501", "U8", "[0]", "[2501,2501]") : u8(name, slot, slot + 1);
  });
  CHECK(refusal(st_file(overlap, data)) == "tensor 't2500' has data_offsets [2499, 2501], which overlap tensor 't2499' (it ends at 2500)");
  CHECK(refusal(st_file(header, data + "PK")) ==
        "the file has 2 bytes after the last tensor 't4999' (which ends at 5000 of the 5002-byte data buffer)");
  // Zero-byte tensors may share an offset; names tell them apart, in the order of their bytes.
  const std::string empties = object({entry("b", "U8", "[0]", "[1,1]"), entry("a", "U8", "[0]", "[1,1]"),
                                      entry("c", "U8", "[1]", "[0,1]")});
  const SafetensorsView zero = decode_safetensors(bytes_of(st_file(empties, "x")), "empties");
  REQUIRE(zero.tensors.size() == 3);
  CHECK((zero.tensors[0].name == "c" && zero.tensors[1].name == "a" && zero.tensors[2].name == "b"));
}

TEST_CASE("safetensors hostile: the header is read as it is parsed, and a header that is not JSON is refused as such") {
  // The first problem is reported, but only once the whole header is known to be JSON.
  CHECK(refusal(st_file(R"({"w":5,"v":})")).starts_with("the header is not valid JSON ([json.exception.parse_error.101]"));
  CHECK(refusal(st_file(R"({"__metadata__":{},"__metadata__":{}})")) == "the name '__metadata__' appears twice in the header");
  CHECK(refusal(st_file(R"({"w":{"dtype":["F32"],"shape":[1],"data_offsets":[0,4]}})", f32_bytes({1}))) ==
        "tensor 'w' has a dtype that is a list, not a string; the format's are BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, "
        "F16, BF16, I32, U32, F32, I64, U64 or F64");
  CHECK(refusal(st_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":{"begin":0}}})")) ==
        "the entry 'w' nests an object deeper than a safetensors header has any");
  CHECK(refusal(st_file(R"({"__metadata__":{"k":["v"]}})")) == "__metadata__ maps 'k' to an array; its values must be strings");
  CHECK(refusal(st_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})")) ==
        "tensor 'w' has a data_offsets with \"4\", not a non-negative integer below 2^64");
  // An element that is a long string is echoed cut short.
  const std::string long_element = fmt::format(R"({{"w":{{"dtype":"F32","shape":["{}"],"data_offsets":[0,4]}}}})", std::string(10000, 'a'));
  const std::string message = refusal(st_file(long_element));
  CHECK(message.starts_with("tensor 'w' has a shape with \"aaaa"));
  CHECK(message.size() < 300);
}

// ---- what a file may hold ----------------------------------------------------------------------------------------

TEST_CASE("safetensors: a tensor's bytes are data, not inspected: a U8 tensor holding a ZIP decodes") {
  // What is promised is the file's structure (docs/safetensors.md): an archive after the last tensor is
  // refused ("hostile: tensors that do not tile"), one inside a tensor is that tensor's bytes.
  const std::string zip_end = std::string("PK\x05\x06", 4) + std::string(18, '\0');
  const std::string file = st_file(
      object({entry("weight", "F32", "[2,1]", "[0,8]"), entry("bias", "F32", "[1]", "[8,12]"), entry("archive", "U8", "[22]", "[12,34]")}),
      f32_bytes({1, 2, 3}) + zip_end);
  const SafetensorsView view = decode_safetensors(bytes_of(file), "zip");
  REQUIRE(view.tensors.size() == 3);
  CHECK(std::equal(view.tensors[2].data.begin(), view.tensors[2].data.end(), bytes_of(zip_end).begin()));
  // A strict load refuses it as a tensor the model does not have, nothing more; a partial one skips it.
  Rng rng(1);
  Linear<float> layer("", {.in = 2, .out = 1}, rng);
  CHECK_THROWS_WITH_AS(load_safetensors(view, layer), "load_safetensors: the model has no 'archive'; nothing was loaded",
                       FormatError);
  CHECK(load_safetensors(view, layer, {.strict = false}).unexpected == std::vector<std::string>{"archive"});
}
