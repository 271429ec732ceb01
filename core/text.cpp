#include "tapegrad/core/text.hpp"

#include <fmt/format.h>

namespace tapegrad {
namespace {

// The length of the valid UTF-8 sequence that starts text[i], or 0 if none does (a stray continuation
// byte, an overlong form, a surrogate, past U+10FFFF, or cut short).
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  std::size_t n = 0;
  unsigned lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) n = 2;
  else if (b0 == 0xe0) n = 3, lo = 0xa0;
  else if (b0 == 0xed) n = 3, hi = 0x9f;
  else if (b0 >= 0xe1 && b0 <= 0xef) n = 3;
  else if (b0 == 0xf0) n = 4, lo = 0x90;
  else if (b0 == 0xf4) n = 4, hi = 0x8f;
  else if (b0 >= 0xf1 && b0 <= 0xf3) n = 4;
  else return 0;
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  return n;
}

}  // namespace

std::size_t invalid_utf8_at(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = static_cast<unsigned char>(text[i]) < 0x80 ? 1 : utf8_length(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string escaped(std::string_view text, std::size_t max_bytes) {
  std::string out;
  std::size_t i = 0;
  const std::size_t end = std::min(text.size(), max_bytes);
  while (i < end) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u == '\\') {
      out += "\\\\";
      ++i;
    } else if (u >= 0x20 && u < 0x7f) {
      out += text[i++];
    } else if (const std::size_t n = u >= 0x80 ? utf8_length(text, i) : 0; n > 0 && i + n <= end) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out += fmt::format("\\x{:02x}", u);
      ++i;
    }
  }
  if (i < text.size()) out += fmt::format("... ({} more bytes)", text.size() - i);
  return out;
}

std::string quoted_list(const std::vector<std::string>& names, std::size_t max_items) {
  std::string out;
  for (std::size_t k = 0; k < names.size() && k < max_items; ++k) out += fmt::format("{}'{}'", k ? ", " : "", escaped(names[k]));
  if (names.size() > max_items) out += fmt::format(", ... and {} more", names.size() - max_items);
  return out;
}

std::string format_bytes(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  if (bytes >= 1e3) return fmt::format("{:.0f} KB", bytes / 1e3);
  return fmt::format("{:.0f} bytes", bytes);
}

}  // namespace tapegrad
