// libFuzzer target for the safetensors reader (built with -DTAPEGRAD_FUZZ=ON and clang; .ci/run runs it
// for a bounded time, in bounded memory, from the PyTorch-written files of tests/data/safetensors). Whatever
// the bytes, decoding must end in a view that obeys the format's rules or in a tapegrad::Error; loading into
// a model, too. Any other exception, a crash, a sanitizer report or a broken invariant below is a bug.
//
// Input byte 0 selects how the rest is loaded into the character model of safetensors_twins.hpp: bit 0 set =
// PyTorch's layout (the golden files' names, packed in_proj tensors), bit 1 set = not strictly.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "safetensors_twins.hpp"
#include "tapegrad/train/checkpoint/safetensors.hpp"

using namespace tapegrad;

namespace {

bool same(const SafetensorsView& a, const SafetensorsView& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (std::size_t k = 0; k < a.tensors.size(); ++k) {
    const SafetensorsTensor &x = a.tensors[k], &y = b.tensors[k];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape ||
        !std::equal(x.data.begin(), x.data.end(), y.data.begin(), y.data.end()))
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  SafetensorsView view;
  try {
    view = decode_safetensors(file, "fuzz");
  } catch (const Error&) {
    return 0;  // a refusal, as it should be
  }
  // What decodes tiles the file: each tensor's bytes start where the one before ends, the last's end the file.
  for (std::size_t k = 1; k < view.tensors.size(); ++k)
    if (view.tensors[k].data.data() != view.tensors[k - 1].data.data() + view.tensors[k - 1].data.size()) __builtin_trap();
  if (!view.tensors.empty() && view.tensors.back().data.data() + view.tensors.back().data.size() != file.data() + file.size())
    __builtin_trap();
  // It encodes (no exception: a decoded view is valid) to a file that decodes to the same tensors and metadata.
  const std::vector<std::byte> again = encode_safetensors(view);
  if (!same(view, decode_safetensors(again, "re-encoded"))) __builtin_trap();

  Rng rng(1);
  test::CharTwin<float> model(rng);
  try {
    load_safetensors(view, model,
                     {.layout = (mode & 1) ? WeightLayout::pytorch : WeightLayout::tapegrad, .strict = (mode & 2) == 0});
  } catch (const Error&) {
  }
  return 0;
}
