#include "tapegrad/core/crc32.hpp"

#include <zlib.h>

namespace tapegrad {

Crc32& Crc32::add(const void* data, std::size_t n) {
  // zlib's crc32_z(crc, NULL, 0) returns the initial value, 0, whatever `crc` was: an empty tensor's null
  // data() would wipe out everything added before it.
  if (n == 0) return *this;
  crc_ = static_cast<std::uint32_t>(::crc32_z(crc_, static_cast<const Bytef*>(data), n));
  return *this;
}

}  // namespace tapegrad
