#include "tapegrad/core/crc32.hpp"

#include <zlib.h>

namespace tapegrad {

Crc32& Crc32::add(const void* data, std::size_t n) {
  crc_ = static_cast<std::uint32_t>(::crc32_z(crc_, static_cast<const Bytef*>(data), n));
  return *this;
}

}  // namespace tapegrad
