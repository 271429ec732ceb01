#pragma once
// Token files as a hostile user writes them (train/data_tokens.hpp's format by hand): a header that says
// whatever the test wants, its checksum made to fit, and any bytes after it. Shared by the library's tests
// and the command-line battery.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/core/crc32.hpp"
#include "tapegrad/train/data_tokens.hpp"

namespace tapegrad::test {

template <class U>
void put_le(std::string& s, std::size_t at, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// The header's own CRC-32 (bytes 36-39), recomputed over its other bytes.
inline void reseal_token_header(std::string& file) {
  put_le(file, 36, Crc32().add(file.data(), 36).add(file.data() + 40, 24).value());
}

// A token file of these header fields and payload bytes; the ids' CRC is the payload's unless given.
inline std::string forged_token_file(std::uint32_t width, std::uint64_t vocab, std::uint64_t count, std::string_view payload,
                                     std::optional<std::uint32_t> ids_crc = {}) {
  std::string h(64, '\0');
  h.replace(0, 8, "tgtokens");
  put_le<std::uint32_t>(h, 8, 1);
  put_le(h, 12, width);
  put_le(h, 16, vocab);
  put_le(h, 24, count);
  put_le(h, 32, ids_crc.value_or(Crc32().add(payload.data(), payload.size()).value()));
  reseal_token_header(h);
  return h + std::string(payload);
}

// The whole of a token file as text, an id a character (a file of bytes, as gpt prepares).
inline std::string token_text(const TokenFile& f) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(f.size()));
  f.read(0, ids);
  return std::string(ids.begin(), ids.end());
}

}  // namespace tapegrad::test
