#pragma once
// The files of tapegrad 0.1 and 0.2 in tests/data/v1 and v2, which the library refuses, converted as
// build/examples/convert_checkpoint converts them (examples/convert) and read back from the format-3 bytes
// save_checkpoint writes.

#include <cstddef>
#include <span>
#include <string>

#include "convert/old_checkpoint.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"

namespace tapegrad::test {

inline std::string old_file_bytes(const std::string& path) { return read_file(path, std::size_t{1} << 24, "test"); }

inline Checkpoint converted(const std::string& path, const convert::DataOf& data_of = {}) {
  const std::string bytes = old_file_bytes(path);
  const convert::OldCheckpoint old = convert::convert_checkpoint(std::as_bytes(std::span<const char>(bytes)), path, data_of);
  return decode_checkpoint(encode_checkpoint(old.checkpoint), path + " (converted)");
}

}  // namespace tapegrad::test
