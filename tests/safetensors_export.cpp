// Writes tapegrad's twins of PyTorch modules (safetensors_twins.hpp) with random weights, in PyTorch's
// layout, and their outputs on random inputs, for examples/safetensors_to_torch.py to load into PyTorch and
// reproduce (ctest safetensors_to_torch, through tests/cli/safetensors_torch.sh):
//
//   safetensors_export DIR    writes DIR/<case>.<f64|f32>.safetensors and DIR/<case>.<f64|f32>.txt
//
// The .txt holds the input ("input x" or "ids ids") and tapegrad's output ("output y") in the format of the
// golden files (tests/golden_file.hpp), 17 significant digits.
#include <cstdio>
#include <filesystem>
#include <string>

#include "safetensors_twins.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/checkpoint/safetensors.hpp"

using namespace tapegrad;

namespace {

// Every parameter drawn at random (LayerNorm weights around 1), so that no value sits at its
// initialisation's zeros or ones and a mislaid tensor shows in the outputs.
template <class T>
void randomize(Module<T>& model, Rng& rng) {
  for (auto* p : model.parameters()) {
    const bool norm_weight = p->name.find("norm") != std::string::npos && p->name.ends_with("weight");
    const double scale = p->value.rank() == 2 ? 0.5 : 0.3;
    for (Index i = 0; i < p->value.numel(); ++i) p->value[i] = static_cast<T>((norm_weight ? 1.0 : 0.0) + scale * rng.normal());
  }
}

template <class V>
std::string tensor_lines(std::string_view kind, std::string_view name, const TensorT<V>& t) {
  const Shape s = t.shape();
  std::string out = s.rank == 1   ? fmt::format("{} {} 1 {}\n", kind, name, s.cols)
                    : s.rank == 2 ? fmt::format("{} {} 2 {} {}\n", kind, name, s.rows, s.cols)
                                  : fmt::format("{} {} 3 {} {} {}\n", kind, name, s.batch, s.rows, s.cols);
  for (Index i = 0; i < t.numel(); ++i) out += fmt::format("{}{:.17g}", i ? " " : "", static_cast<double>(t[i]));
  return out + "\n";
}

template <class T>
void export_case(const std::filesystem::path& dir, std::string_view name, std::string_view dtype, Rng& rng) {
  test::Twin<T> twin = test::make_twin<T>(name, rng);
  randomize(*twin.model, rng);
  const std::string stem = fmt::format("{}.{}", name, dtype);
  save_safetensors(dir / (stem + ".safetensors"), *twin.model, {.layout = WeightLayout::pytorch});
  std::string text = fmt::format("# written by tapegrad {} (tests/safetensors_export.cpp)\ncase {}\n", tapegrad_version(), stem);
  TensorT<T> y;
  if (twin.takes_ids) {
    Ids ids(Shape::mat(2, test::kTwinMaxLen - 1));
    for (Index i = 0; i < ids.numel(); ++i) ids[i] = static_cast<std::int32_t>(rng.uniform() * test::kTwinVocab);
    text += tensor_lines("ids", "ids", ids);
    y = twin.forward({}, ids);
  } else {
    TensorT<T> x(Shape::batched(2, 4, name == "linear" ? 5 : test::kTwinWidth));
    for (Index i = 0; i < x.numel(); ++i) x[i] = static_cast<T>(rng.normal());
    text += tensor_lines("input", "x", x);
    y = twin.forward(x, {});
  }
  text += tensor_lines("output", "y", y);
  write_file(dir / (stem + ".txt"), text);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: safetensors_export DIR\n");
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    Rng rng(2026);
    for (std::string_view name : test::kTwinCases) {
      export_case<double>(dir, name, "f64", rng);
      export_case<float>(dir, name, "f32", rng);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "safetensors_export: %s\n", e.what());
    return 1;
  }
  return 0;
}
