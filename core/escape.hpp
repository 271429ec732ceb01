#pragma once
// Text that came from outside (a file, a path, a flag) as a message quotes it: one helper, so that every
// error and `inspect` show such text alike. A name read from a file may hold an escape sequence (which
// would drive the terminal), a newline (which would split a one-line message), a NUL (which would cut
// it short), a right-to-left override or an invisible character (which would make it read as another
// name) or a megabyte: escaped() shows control characters, DEL, backslashes and bytes that are not UTF-8
// as C escapes, Unicode's format characters and C1 controls as \uXXXX, and cuts long text with a count
// of what it left out.
//
//   escaped("attn\x1b[2J")              attn\x1b[2J                    (the bytes, made visible)
//   escaped("model\u202egpj.tgck")      model\u202egpj.tgck            (not "modelkcgt.jpg")
//   escaped(std::string(5000, 'a'))     aaaa...a... (4880 more bytes)  (at most kMaxQuoted bytes kept;
//                                                                      of a std::filesystem::path, 4096)
//   quoted_list({"a", "b", ...})        'a', 'b', ... and 97 more      (at most kMaxListed names)

#include <concepts>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tapegrad {

inline constexpr std::size_t kMaxQuoted = 120;  // bytes of one quoted text that a message keeps
inline constexpr std::size_t kMaxListed = 10;   // names of a list that a message keeps

// `text` safe to print in a one-line message: \\ for a backslash, \xNN for a control character, DEL or
// a byte that is not part of valid UTF-8, \uXXXX (\UXXXXXXXX) for a C1 control, a line or paragraph
// separator or a format character (bidirectional controls, zero-width characters); printable ASCII and
// other valid UTF-8 as they are. Past `max_bytes` of input (or before a character that would cross it) it
// stops and says how many bytes it left out.
std::string escaped(std::string_view text, std::size_t max_bytes = kMaxQuoted);
// A path, given or read from a file, is kept whole up to 4096 bytes (PATH_MAX, the longest a system call
// takes): cut at kMaxQuoted, a message about a file in a deep folder would lose the name that says which.
template <std::same_as<std::filesystem::path> Path>  // a template, so a std::string never converts to a path
std::string escaped(const Path& path, std::size_t max_bytes = 4096) {
  return escaped(std::string_view(path.native()), max_bytes);
}

// The offset of the first byte of `text` that is not part of valid UTF-8 (a stray continuation byte, an
// overlong form, a surrogate, past U+10FFFF, a sequence cut short), or npos when all of it is valid.
std::size_t invalid_utf8_at(std::string_view text);

// "'a', 'b', 'c'": names as messages list them, each escaped; past `max_items` names, "... and N more".
std::string quoted_list(const std::vector<std::string>& names, std::size_t max_items = kMaxListed);

// `text` as XML character data or an attribute value: & < > " ' as entities (' as &#39;, which HTML
// labels read too), and control characters, which XML 1.0 forbids even as references, as C escapes
// (\n, \t, \r, \xNN). Everything else as it is: no length bound, valid UTF-8 kept.
std::string xml_escaped(std::string_view text);

// "1.5 GB", "37 KB": a byte count as messages give it.
std::string format_bytes(double bytes);

}  // namespace tapegrad
