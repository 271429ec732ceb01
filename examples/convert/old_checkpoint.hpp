#pragma once
// Checkpoints of tapegrad 0.1 (format 1) and 0.2 (format 2), which the library no longer reads, as today's
// Checkpoint of named parts: the one converter of older files. build/examples/convert_checkpoint
// (examples/convert/main.cpp) reads one and writes it as format 3 through save_checkpoint; the tests use it
// as the program does. Their parts: "model", "optimizer" and "trainer" (a loop's file of format 2: "model",
// "optimizer", "step", "rng" and "data_order"); a file of weights alone has "model" only.
//
//   const OldCheckpoint old = convert_checkpoint(bytes, "old.tgck", data_of);
//   save_checkpoint("new.tgck", old.checkpoint);

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>

#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/data.hpp"

namespace tapegrad::convert {

// Format 1 named its training data by the CRC-32 of its examples alone (examples_crc32, in hexadecimal in
// the metadata "data.fingerprint") and its evaluation data not at all; a Trainer names both by their
// DataSource::fingerprint(). For a training checkpoint of format 1, the program that knows the data gives
// all three: the first is compared with the file's, the others go into the trainer's part.
struct TrainingData {
  std::uint32_t examples_crc32 = 0;
  std::uint32_t fingerprint = 0;
  std::optional<std::uint32_t> eval_fingerprint;
};
using DataOf = std::function<TrainingData(const Checkpoint& converted)>;
// What 0.1 recorded of its data: each example's length, token ids and label ids.
std::uint32_t examples_crc32(const Dataset& data);

struct OldCheckpoint {
  std::uint32_t format = 0;  // of the file: 1 or 2
  Checkpoint checkpoint;     // today's
};

// The file's bytes, checked as the library checks a checkpoint's (magic, version, length, CRC-32, every size
// bounded by the payload), converted. FormatError "convert '<source>': ..." for a file of format 3 (nothing
// to convert), of another format, or corrupt; for a training checkpoint of format 1 without `data_of`; and,
// "convert '<source>': the training data differs ...", for data other than the file's.
OldCheckpoint convert_checkpoint(std::span<const std::byte> bytes, std::string_view source, const DataOf& data_of = {});

}  // namespace tapegrad::convert
