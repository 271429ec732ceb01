// libFuzzer target for the checkpoint loader (built with -DTAPEGRAD_FUZZ=ON and clang; .ci/run runs it
// for a bounded time from seeds the trainer writes). Whatever the bytes, loading must end in a valid
// checkpoint or a tapegrad::Error: any other exception, a crash or a sanitizer report is a bug; so is a
// refused load that changed the model.
//
// Input byte 0 selects how the rest is used: bit 0 set = re-seal the header (length and CRC-32 fitted
// to the payload), so mutations reach the payload decoder instead of stopping at the checksum;
// bit 1 set = load non-strictly. Each decoded file is loaded into a model, rebuilt as one, and restored
// into the parts of a loop by hand (a model, an optimizer, a sampler, a stream, a step). A file of format 1
// or 2 (the seeds of tests/data/v1 and v2), which the library refuses, is read by the converter
// (examples/convert) as build/examples/convert_checkpoint reads it, and the result goes the same way.
//
// The mutator is structure-aware (checkpoint_mutations.hpp): three times in four it decodes the input,
// applies one to three of a forger's changes (a record duplicated, a count or shape changed, names
// swapped or hostile, settings by the ten thousand, extreme counters, NaN values) and encodes it again
// with a valid header; otherwise, and when the input does not decode, libFuzzer's byte mutations.
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "checkpoint_mutations.hpp"
#include "convert/old_checkpoint.hpp"
#include "lesson/toy_model.hpp"
#include "reseal.hpp"
#include "user_models.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"

using namespace tapegrad;
using lesson::ModelConfig;
using lesson::ToyModel;

namespace {

std::uint32_t zlib_crc32(std::span<const std::byte> bytes) {
  return static_cast<std::uint32_t>(
      ::crc32_z(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

// A refused load must leave the model as it was.
template <class M>
void load_or_refuse(const Checkpoint& c, M& model, LoadOptions options) {
  const std::uint32_t before = weights_crc32(snapshot(model));
  try {
    load_weights(c, model, options);
  } catch (const Error&) {
    if (weights_crc32(snapshot(model)) != before) __builtin_trap();
  }
}

// A loop by hand, as the files it meets might have been saved by: a refused restore must leave every part
// as it was, bit for bit.
void restore_or_refuse(const Checkpoint& c, bool strict) {
  ToyModel<float> model(ModelConfig{.vocab = 25, .labels = 8, .max_len = 8});
  Adam<float> adam(model.parameters());
  Sampler batches(50, 8, 1);
  Rng noise(2);
  Index step = 0;
  const StateParts parts = {{"model", model}, {"optimizer", adam}, {"data_order", batches}, {"rng", noise}, {"step", step}};
  const std::vector<std::byte> before = encode_checkpoint(snapshot(parts));
  try {
    restore(c, parts, {.strict = strict});
  } catch (const Error&) {
    if (encode_checkpoint(snapshot(parts)) != before) __builtin_trap();
  }
}

}  // namespace

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  Rng rng(seed);
  if (size > 1 && rng.next_u64() % 4 != 0) {
    try {
      Checkpoint c = decode_checkpoint(std::as_bytes(std::span(data + 1, size - 1)), "mutator");
      test::mutate_many(c, rng, 1 + static_cast<int>(rng.next_u64() % 3));
      const std::vector<std::byte> bytes = encode_checkpoint(c);
      if (bytes.size() + 1 <= max_size) {
        data[0] = static_cast<std::uint8_t>(data[0] & ~1u);  // its header is already valid
        std::memcpy(data + 1, bytes.data(), bytes.size());
        return bytes.size() + 1;
      }
    } catch (const Error&) {
      // not a checkpoint (yet): byte mutations below
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  std::vector<std::byte> file(reinterpret_cast<const std::byte*>(data + 1), reinterpret_cast<const std::byte*>(data + size));
  if (mode & 1) test::reseal(file, zlib_crc32);
  try {
    // A 0.1 trainer's data is the one its file names (the program would compare the data it makes again).
    const auto as_recorded = [](const Checkpoint& old) {
      const auto it = old.metadata.find("data.fingerprint");
      return convert::TrainingData{
          .examples_crc32 = it == old.metadata.end() ? 0u : static_cast<std::uint32_t>(std::stoul(it->second, nullptr, 16))};
    };
    const bool old = file.size() > 8 && (file[8] == std::byte{1} || file[8] == std::byte{2});
    const Checkpoint c = old ? convert::convert_checkpoint(file, "fuzz", as_recorded).checkpoint : decode_checkpoint(file, "fuzz");
    (void)describe_checkpoint(c);
    (void)checkpoint_json(c);
    ToyModel<float> model(ModelConfig{.vocab = 25, .labels = 8, .max_len = 8});
    load_or_refuse(c, model, {.strict = (mode & 2) == 0, .allow_non_finite = (mode & 4) != 0});
    restore_or_refuse(c, (mode & 2) == 0);
    try {
      (void)model_from_checkpoint<ToyModel<float>>(c);
    } catch (const Error&) {
    }
    (void)model_from_checkpoint<test::Mlp>(c);  // a user's model: no implied count, only the build budget
  } catch (const Error&) {
    // a refusal, as it should be
  }
  return 0;
}
