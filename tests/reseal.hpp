#pragma once
// For fault tests (tests/test_checkpoint.cpp and the fuzzer): rewrites a checkpoint header's payload
// length and CRC-32 to fit a damaged payload, as a forger would, so that the damage reaches the payload
// decoder instead of stopping at the checksum. `crc32` computes a CRC-32 of a byte span.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tapegrad::test {

template <class Crc32>
void reseal(std::vector<std::byte>& file, Crc32 crc32) {
  // The header of train/checkpoint/checkpoint.hpp: u64 payload length at byte 16, u32 CRC-32 at 24, payload at 28.
  constexpr std::size_t kLengthAt = 16, kCrcAt = 24, kPayloadAt = 28;
  if (file.size() < kPayloadAt) return;
  const std::uint64_t length = file.size() - kPayloadAt;
  const std::uint32_t crc = crc32(std::span<const std::byte>(file).subspan(kPayloadAt));
  for (std::size_t i = 0; i < 8; ++i) file[kLengthAt + i] = std::byte{static_cast<unsigned char>(length >> (8 * i))};
  for (std::size_t i = 0; i < 4; ++i) file[kCrcAt + i] = std::byte{static_cast<unsigned char>(crc >> (8 * i))};
}

}  // namespace tapegrad::test
