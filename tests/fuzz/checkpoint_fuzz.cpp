// libFuzzer target for the checkpoint loader (built with -DTAPEGRAD_FUZZ=ON and clang; .ci/run runs it
// for a bounded time from seeds the trainer writes). Whatever the bytes, loading must end in a valid
// checkpoint or a tapegrad::Error: any other exception, a crash or a sanitizer report is a bug.
//
// Input byte 0 selects how the rest is used: bit 0 set = re-seal the header (length and CRC-32 fitted
// to the payload), so mutations reach the payload decoder instead of stopping at the checksum;
// bit 1 set = load non-strictly.
#include <zlib.h>

#include <cstdint>
#include <span>
#include <vector>

#include "lesson/toy_model.hpp"
#include "reseal.hpp"
#include "tapegrad/train/checkpoint.hpp"

using namespace tapegrad;
using lesson::ModelConfig;
using lesson::ToyModel;

namespace {

std::uint32_t zlib_crc32(std::span<const std::byte> bytes) {
  return static_cast<std::uint32_t>(
      ::crc32_z(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  std::vector<std::byte> file(reinterpret_cast<const std::byte*>(data + 1), reinterpret_cast<const std::byte*>(data + size));
  if (mode & 1) test::reseal(file, zlib_crc32);
  try {
    const Checkpoint c = decode_checkpoint(file, "fuzz");
    (void)describe_checkpoint(c);
    (void)checkpoint_json(c);
    ToyModel<float> model(ModelConfig{.vocab = 25, .labels = 8, .max_len = 8});
    try {
      load_weights(c, model, {.strict = (mode & 2) == 0});
    } catch (const Error&) {
    }
    (void)model_from_checkpoint<ToyModel<float>>(c);
  } catch (const Error&) {
    // a refusal, as it should be
  }
  return 0;
}
