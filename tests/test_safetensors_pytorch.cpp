// safetensors in PyTorch's names and layouts: files PyTorch's modules wrote (tests/data/safetensors/, by
// tests/data/make_golden_safetensors.py) load into tapegrad's twins and reproduce PyTorch's outputs, and
// tapegrad writes the twins byte for byte as PyTorch did. The other way, a tapegrad file loaded into PyTorch,
// is ctest's safetensors_to_torch (examples/safetensors_to_torch.py). A user's module maps its own names.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>

#include "golden_file.hpp"
#include "helpers.hpp"
#include "safetensors_twins.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/layers/linear.hpp"
#include "tapegrad/train/checkpoint/safetensors.hpp"
#include "user_models.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

fs::path golden_path(const std::string& stem) { return fs::path(TAPEGRAD_TEST_DATA) / "safetensors" / (stem + ".safetensors"); }

std::string file_bytes(const fs::path& path) { return read_file(path, 1 << 20); }

// Loads the golden file <name>.<dtype> into tapegrad's twin of type T and checks that it reproduces
// PyTorch's outputs within `tolerance` (absolute and relative), and that the report names every conversion.
template <class T>
void check_golden(const std::string& name, const std::string& dtype, double tolerance) {
  const std::string stem = name + "." + dtype;
  CAPTURE(stem);
  const auto cases = test::read_golden("safetensors/outputs.txt");
  const test::GoldenCase& c = cases.at(stem);
  Rng rng(7);
  test::Twin<T> twin = test::make_twin<T>(name, rng);
  const LoadReport report = load_safetensors(golden_path(stem), *twin.model, {.layout = WeightLayout::pytorch});
  CHECK(report.loaded.size() == twin.model->parameters().size());
  const auto upper = [](std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return s;
  };
  const std::string ours = std::is_same_v<T, float> ? "F32" : "F64";
  if (upper(dtype) == ours) {
    CHECK(report.converted.empty());
  } else {
    const std::string bytes = file_bytes(golden_path(stem));
    REQUIRE(report.converted.size() == decode_safetensors(std::as_bytes(std::span<const char>(bytes)), stem).tensors.size());
    CHECK(report.converted.front().ends_with(fmt::format("' from {} to {}", upper(dtype), ours)));
  }
  const TensorT<T> y = twin.takes_ids ? twin.forward({}, c.ids.at("ids")) : twin.forward(c.inputs.front().second.cast<T>(), {});
  const std::string diff = test::mismatch(y, c.output, tolerance, tolerance);
  CHECK_MESSAGE(diff.empty(), diff);
}

// Every golden file of `name`: F64 into the double twin (1e-12), F32 into the float twin (1e-5).
void check_golden_pair(const std::string& name) {
  check_golden<double>(name, "f64", 1e-12);
  check_golden<float>(name, "f32", 1e-5);
}

// tapegrad writes the twin, once loaded from PyTorch's F64 file, as PyTorch wrote it: the same names,
// shapes and bytes (the layout's transposes and packing undone and done again, bit for bit).
void check_writes_as_pytorch(const std::string& name) {
  CAPTURE(name);
  Rng rng(8);
  test::Twin<double> twin = test::make_twin<double>(name, rng);
  load_safetensors(golden_path(name + ".f64"), *twin.model, {.layout = WeightLayout::pytorch});
  const std::vector<std::byte> ours = encode_safetensors(*twin.model, {.layout = WeightLayout::pytorch});
  const std::string theirs_bytes = file_bytes(golden_path(name + ".f64"));
  const SafetensorsView mine = decode_safetensors(ours, "ours");
  const SafetensorsView theirs = decode_safetensors(std::as_bytes(std::span<const char>(theirs_bytes)), "theirs");
  REQUIRE(mine.tensors.size() == theirs.tensors.size());
  for (std::size_t k = 0; k < mine.tensors.size(); ++k) {
    const SafetensorsTensor &a = mine.tensors[k], &b = theirs.tensors[k];
    CAPTURE(b.name);
    CHECK(a.name == b.name);  // in PyTorch's state_dict order, which the golden script wrote
    CHECK(a.dtype == b.dtype);
    CHECK(a.shape == b.shape);
    CHECK(std::equal(a.data.begin(), a.data.end(), b.data.begin(), b.data.end()));
  }
  CHECK(mine.metadata.at("format") == "pt");
  CHECK(mine.metadata.at("tapegrad.layout") == "pytorch");
}

}  // namespace

TEST_CASE("safetensors golden: nn.Linear's file loads into a Linear and reproduces its outputs, F64/F32/F16/BF16") {
  check_golden_pair("linear");
  // F16 and BF16 convert exactly to double: PyTorch's outputs of the rounded weights to 1e-12.
  check_golden<double>("linear", "f16", 1e-12);
  check_golden<double>("linear", "bf16", 1e-12);
  check_golden<float>("linear", "f16", 1e-5);
  check_golden<float>("linear", "bf16", 1e-5);
  check_writes_as_pytorch("linear");
}

TEST_CASE("safetensors golden: nn.MultiheadAttention's file loads into a learnable SelfAttention (packed in_proj)") {
  check_golden_pair("attention");
  check_writes_as_pytorch("attention");
}

TEST_CASE("safetensors golden: nn.TransformerEncoderLayer(norm_first, gelu)'s file loads into a TransformerBlock") {
  check_golden_pair("block");
  check_writes_as_pytorch("block");
}

TEST_CASE("safetensors golden: a PyTorch character model (encoder stack, tied head) loads into the library's layers") {
  check_golden_pair("char_model");
  check_writes_as_pytorch("char_model");
  // The tied table is in the file once, under the embedding's name, and the head holds only its bias.
  const std::string bytes = file_bytes(golden_path("char_model.f64"));
  const SafetensorsView file = decode_safetensors(std::as_bytes(std::span<const char>(bytes)), "char_model");
  int tables = 0;
  for (const auto& t : file.tensors) tables += t.shape == std::vector<std::uint64_t>{11, 8};
  CHECK(tables == 1);
}

TEST_CASE("safetensors pytorch layout: the names a transformer block and a stack take, and their shapes") {
  Rng rng(3);
  TransformerStack<float> stack("", {.n_layers = 2, .block = {.d_model = 8, .n_heads = 2, .d_ff = 16}}, rng);
  std::vector<std::string> names;
  for (const auto& [p, n] : stack.torch_names()) names.push_back(n.name);
  CHECK(names.front() == "layers.0.self_attn.in_proj_weight");
  CHECK(std::count(names.begin(), names.end(), "layers.1.self_attn.in_proj_weight") == 3);  // Wq, Wk, Wv
  CHECK(std::count(names.begin(), names.end(), "layers.1.linear2.bias") == 1);  // the FFN folded into the layer
  CHECK(names.back() == "norm.bias");
  const std::vector<std::byte> bytes = encode_safetensors(stack, {.layout = WeightLayout::pytorch});
  const SafetensorsView file = decode_safetensors(bytes, "stack");
  CHECK(file.tensors.size() == 2 * 12 + 2);  // per layer 12 tensors, as nn.TransformerEncoderLayer's state_dict
  CHECK(file.tensors[0].name == "layers.0.self_attn.in_proj_weight");
  CHECK(file.tensors[0].shape == std::vector<std::uint64_t>{24, 8});
  CHECK(file.tensors[4].name == "layers.0.linear1.weight");
  CHECK(file.tensors[4].shape == std::vector<std::uint64_t>{16, 8});  // (out, in)
}

TEST_CASE("safetensors pytorch layout: a layer with no PyTorch twin is refused by name, and nothing is written") {
  Rng rng(4);
  SelfAttention<float> no_wo("attn", {.d_model = 8, .n_heads = 2, .output_projection = false}, rng);
  CHECK_THROWS_WITH_AS(encode_safetensors(no_wo, {.layout = WeightLayout::pytorch}),
                       "self_attention 'attn': has no twin in PyTorch: nn.MultiheadAttention always has an output "
                       "projection (out_proj) and this layer has none; save it in the tapegrad layout",
                       ValueError);
  SelfAttention<float> wide("attn", {.d_model = 8, .n_heads = 2, .d_head = 6, .output_projection = true}, rng);
  CHECK_THROWS_WITH_AS(encode_safetensors(wide, {.layout = WeightLayout::pytorch}),
                       "self_attention 'attn': has no twin in PyTorch: nn.MultiheadAttention projects to d_model "
                       "columns and this layer to n_heads x d_head = 12 (d_model 8); save it in the tapegrad layout",
                       ValueError);
  // The tapegrad layout writes either.
  CHECK(decode_safetensors(encode_safetensors(wide), "wide").tensors.size() == 4);  // wq, wk, wv, wo
}

namespace {

// [readme:safetensors-user]
// A user's model whose PyTorch twin names things its own way: nn.Sequential-like "fc1" and "fc2" for the
// layers tapegrad calls "hidden" and "out", and "scale.weight" for its own gain vector.
class UserMlp : public Module<float> {
 public:
  explicit UserMlp(Rng& rng)
      : hidden_("hidden", {.in = 3, .out = 4}, rng), out_("out", {.in = 4, .out = 2}, rng) {
    gain_ = &register_parameter("gain", Tensor(Shape::vec(2), 1.0f));
    register_child(hidden_);
    register_child(out_);
  }
  TorchName torch_name(std::string_view local_name) const override {
    if (local_name == "gain") return {"scale.weight"};
    return Module<float>::torch_name(local_name);
  }
  std::string torch_child_name(std::string_view child_name) const override {
    if (child_name == "hidden") return "fc1";
    if (child_name == "out") return "fc2";
    return std::string(child_name);
  }

 private:
  Parameter<float>* gain_;
  Linear<float> hidden_, out_;
};
// [readme:safetensors-user-end]

}  // namespace

TEST_CASE("safetensors pytorch layout: a user's module maps its own names, and its layers keep their layouts") {
  const fs::path dir = test::scratch_dir("safetensors", "user");
  Rng rng(5);
  UserMlp model(rng);
  const fs::path path = dir / "mlp.safetensors";
// [readme:safetensors-save-user]
save_safetensors(path, model, {.layout = WeightLayout::pytorch});  // scale.weight, fc1.weight (4x3), ...
// [readme:safetensors-save-user-end]
  const std::string bytes = file_bytes(path);
  const SafetensorsView file = decode_safetensors(std::as_bytes(std::span<const char>(bytes)), "mlp");
  std::vector<std::string> names;
  for (const auto& t : file.tensors) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"scale.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(file.tensors[1].shape == std::vector<std::uint64_t>{4, 3});  // nn.Linear(3, 4).weight
  // Into a fresh model with other weights: every value back, bit for bit.
  Rng other_rng(6);
  UserMlp copy(other_rng);
  CHECK(copy.parameter("hidden.weight").value != model.parameter("hidden.weight").value);
  const LoadReport report = load_safetensors(path, copy, {.layout = WeightLayout::pytorch});
  CHECK(report.loaded == std::vector<std::string>{"gain", "hidden.weight", "hidden.bias", "out.weight", "out.bias"});
  for (const auto* p : model.parameters()) CHECK(copy.parameter(p->name).value == p->value);
  // Read in the wrong layout, the refusal says which layout the file was written in.
  CHECK_THROWS_WITH_AS(load_safetensors(path, copy),
                       doctest::Contains(": the file's weights are in the 'pytorch' layout (its tapegrad.layout metadata) "
                                         "and this load asked for the 'tapegrad' layout; nothing was loaded"),
                       FormatError);
  fs::remove_all(dir);
}

TEST_CASE("safetensors pytorch layout: two parameters under one name that are not parts of one tensor are refused") {
  struct Clash : Module<float> {
    Clash() {
      register_parameter("a", Tensor(Shape::vec(2)));
      register_parameter("b", Tensor(Shape::vec(2)));
    }
    TorchName torch_name(std::string_view) const override { return {"weight"}; }
  };
  Clash clash;
  CHECK_THROWS_WITH_AS(encode_safetensors(clash, {.layout = WeightLayout::pytorch}),
                       "save_safetensors: 'a' and 'b' are both stored as 'weight', not as distinct, equal parts of it",
                       ValueError);
  struct Odd : Module<float> {
    Odd() { register_parameter("v", Tensor(Shape::vec(2))); }
    TorchName torch_name(std::string_view) const override { return {"v", true}; }
  };
  Odd odd;
  CHECK_THROWS_WITH_AS(encode_safetensors(odd, {.layout = WeightLayout::pytorch}),
                       "save_safetensors: 'v' is to be stored transposed as 'v', but it is 2, not a matrix", ValueError);
  struct Half : Module<float> {  // part 0 of 2, and no part 1
    Half() { register_parameter("v", Tensor(Shape::vec(2))); }
    TorchName torch_name(std::string_view) const override { return {"packed", false, 0, 2}; }
  };
  Half half;
  CHECK_THROWS_WITH_AS(load_safetensors(SafetensorsView{}, half, {.layout = WeightLayout::pytorch}),
                       "load_safetensors: 'packed' is packed from 2 parts but part 1 is no parameter's", ValueError);
}

TEST_CASE("safetensors docs: save in PyTorch's layout, load strictly, load the part that fits into another model") {
  const fs::path dir = test::scratch_dir("safetensors", "docs");
  const fs::path path = dir / "mlp.safetensors";
  test::Mlp model({.in = 2, .hidden = 4, .out = 2, .seed = 1});
  test::Mlp copy({.in = 2, .hidden = 4, .out = 2, .seed = 2});
  test::Mlp other({.in = 2, .hidden = 4, .out = 3, .seed = 3});  // another readout: only "hidden" fits
  const Tensor other_out = other.parameter("out.weight").value;
// [readme:safetensors-calls]
save_safetensors(path, model, {.layout = WeightLayout::pytorch});                     // atomic; F32 for a float model
LoadReport all = load_safetensors(path, copy, {.layout = WeightLayout::pytorch});     // strict: all or nothing
LoadReport part = load_safetensors(path, other, {.layout = WeightLayout::pytorch, .strict = false});
// part.str(): loaded 2 parameters; not loaded: 'out.weight' is 2x4 in the file but 3x4 in the model; ...
// [readme:safetensors-calls-end]
  CHECK(all.loaded.size() == 4);
  for (const auto* p : model.parameters()) CHECK(copy.parameter(p->name).value == p->value);
  CHECK(part.loaded == std::vector<std::string>{"hidden.weight", "hidden.bias"});
  CHECK(part.str().starts_with("loaded 2 parameters; not loaded: 'out.weight' is 2x4 in the file but 3x4 in the model; "));
  CHECK(other.parameter("hidden.weight").value == model.parameter("hidden.weight").value);
  CHECK(other.parameter("out.weight").value == other_out);
  fs::remove_all(dir);
}
