#pragma once
// CRC-32 (IEEE 802.3, zlib's), fed piece by piece: checkpoints' checksums, data fingerprints, and
// checksums of tensors to compare results without keeping them.

#include <array>
#include <cstddef>
#include <cstdint>

namespace tapegrad {

class Crc32 {
 public:
  Crc32& add(const void* data, std::size_t n);
  // An integer's bytes, least significant first, whatever the machine's byte order.
  template <class U>
  Crc32& add_le(U v) {
    std::array<unsigned char, sizeof(U)> bytes;
    for (std::size_t i = 0; i < sizeof(U); ++i) bytes[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xff);
    return add(bytes.data(), bytes.size());
  }
  std::uint32_t value() const { return crc_; }

 private:
  std::uint32_t crc_ = 0;  // zlib's crc32() of no bytes
};

}  // namespace tapegrad
