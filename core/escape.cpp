#include "tapegrad/core/escape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>

namespace tapegrad {
namespace {

// The length of the valid UTF-8 sequence that starts text[i], with its code point in `c`, or 0 if none
// does (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, or cut short).
std::size_t utf8_length(std::string_view text, std::size_t i, char32_t& c) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  const std::size_t n = b0 >= 0xf0 ? 4 : b0 >= 0xe0 ? 3 : 2;
  // The second byte's range (Unicode's table 3-7) is narrower after E0 and F0 (no overlong form), ED (no
  // surrogate) and F4 (nothing past U+10FFFF).
  const unsigned lo = b0 == 0xe0 ? 0xa0 : b0 == 0xf0 ? 0x90 : 0x80;
  const unsigned hi = b0 == 0xed ? 0x9f : b0 == 0xf4 ? 0x8f : 0xbf;
  if (b0 < 0xc2 || b0 > 0xf4 || i + n > text.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  c = b0 & (0x7f >> n);  // the lead byte's bits: 5, 4 or 3
  for (std::size_t k = 1; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
    c = c << 6 | (byte(i + k) & 0x3f);
  }
  return n;
}

// Valid UTF-8 that a message must not print as it is: the C1 controls (U+0080-U+009F, which some
// terminals obey as escape sequences), the line and paragraph separators, and every format character
// of Unicode 14 (category Cf), among them the bidirectional overrides and isolates (U+202A-U+202E,
// U+2066-U+2069) that make a name read as another, and the zero-width and invisible ones.
bool hidden_code_point(char32_t c) {
  static constexpr std::pair<char32_t, char32_t> kRanges[] = {
      {0x80, 0x9f},       {0xad, 0xad},       {0x600, 0x605},     {0x61c, 0x61c},     {0x6dd, 0x6dd},
      {0x70f, 0x70f},     {0x890, 0x891},     {0x8e2, 0x8e2},     {0x180e, 0x180e},   {0x200b, 0x200f},
      {0x2028, 0x202e},   {0x2060, 0x2064},   {0x2066, 0x206f},   {0xfeff, 0xfeff},   {0xfff9, 0xfffb},
      {0x110bd, 0x110bd}, {0x110cd, 0x110cd}, {0x13430, 0x13438}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a},
      {0xe0001, 0xe0001}, {0xe0020, 0xe007f}};
  return std::ranges::any_of(kRanges, [c](const auto& range) { return c >= range.first && c <= range.second; });
}

}  // namespace

std::size_t invalid_utf8_at(std::string_view text) {
  char32_t c = 0;
  for (std::size_t i = 0, n = 0; i < text.size(); i += n) {
    n = static_cast<unsigned char>(text[i]) < 0x80 ? 1 : utf8_length(text, i, c);
    if (n == 0) return i;
  }
  return std::string_view::npos;
}

std::string escaped(std::string_view text, std::size_t max_bytes) {
  std::string out;
  std::size_t i = 0;
  char32_t c = 0;
  const std::size_t end = std::min(text.size(), max_bytes);
  while (i < end) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u >= 0x20 && u < 0x7f) {
      if (u == '\\') out += '\\';  // doubled
      out += text[i++];
    } else if (const std::size_t n = u >= 0x80 ? utf8_length(text, i, c) : 0; n > 0) {
      if (i + n > end) break;  // a character the bound would cut is left out whole: its lead byte is not broken text
      if (!hidden_code_point(c))
        out.append(text.substr(i, n));
      else
        out += c > 0xffff ? fmt::format("\\U{:08x}", std::uint32_t{c}) : fmt::format("\\u{:04x}", std::uint32_t{c});
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
  for (std::size_t k = 0; k < names.size() && k < max_items; ++k)
    out += fmt::format("{}'{}'", k ? ", " : "", escaped(names[k]));
  if (names.size() > max_items) out += fmt::format(", ... and {} more", names.size() - max_items);
  return out;
}

std::string xml_escaped(std::string_view text) {
  static constexpr std::pair<char, std::string_view> kEscapes[] = {{'&', "&amp;"},  {'<', "&lt;"},   {'>', "&gt;"},
                                                                   {'"', "&quot;"}, {'\'', "&#39;"}, {'\n', "\\n"},
                                                                   {'\t', "\\t"},   {'\r', "\\r"}};
  std::string out;
  for (const char c : text) {
    const auto* e = std::find_if(std::begin(kEscapes), std::end(kEscapes), [c](const auto& p) { return p.first == c; });
    if (e != std::end(kEscapes))
      out += e->second;
    else if (static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else
      out += c;
  }
  return out;
}

std::string format_bytes(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  if (bytes >= 1e3) return fmt::format("{:.0f} KB", bytes / 1e3);
  return fmt::format("{:.0f} bytes", bytes);
}

}  // namespace tapegrad
