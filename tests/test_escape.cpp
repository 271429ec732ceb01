// core/escape: how text from outside (a file, a path, a flag) is quoted in a one-line message.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "tapegrad/core/escape.hpp"

using namespace tapegrad;

TEST_CASE("escaped: control characters, backslashes and bytes that are not UTF-8 are made visible") {
  CHECK(escaped("attn.wq") == "attn.wq");
  CHECK(escaped("attn\x1b[2J") == "attn\\x1b[2J");
  CHECK(escaped("a\nb\rc") == "a\\x0ab\\x0dc");
  CHECK(escaped(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(escaped("back\\slash") == "back\\\\slash");
  CHECK(escaped("\xff\xfe") == "\\xff\\xfe");
  CHECK(escaped(std::string(200, 'a'), 10) == "aaaaaaaaaa... (190 more bytes)");
}

TEST_CASE("escaped: a character the bound would cut is left out whole, not shown as the bytes before the cut") {
  CHECK(escaped("a\u00e9", 2) == "a... (2 more bytes)");         // 2 bytes, cut after the first
  CHECK(escaped("ab\u20ac", 4) == "ab... (3 more bytes)");       // 3 bytes, cut after the second
  CHECK(escaped("a\u00e9b", 3) == "a\u00e9... (1 more bytes)");  // whole within the bound: kept
  CHECK(escaped("\u00e9", 1) == "... (2 more bytes)");           // nothing before it
  CHECK(escaped("a\u202e", 2) == "a... (3 more bytes)");         // a hidden one: neither \u202e nor its bytes
  CHECK(escaped("a\xc3", 2) == "a\\xc3");                        // cut short by the text itself: a broken byte
}

TEST_CASE("escaped: a path is kept whole up to PATH_MAX, so a deep checkout's message still names the file") {
  // 300 bytes of folders: text would be cut at kMaxQuoted and lose the file's name; a path is not.
  const std::filesystem::path deep = std::filesystem::path("/home") / std::string(300, 'd') / "checkpoint-00000200.tgck";
  CHECK(escaped(deep) == deep.native());
  CHECK(escaped(deep.native()).ends_with("... (211 more bytes)"));
  // Past PATH_MAX (which no system call opens) it is cut as text is, and escaped as text is.
  const std::filesystem::path hostile = "/x\n" + std::string(10000, 'a');
  CHECK(escaped(hostile) == "/x\\x0a" + std::string(4096 - 3, 'a') + "... (5907 more bytes)");
}

TEST_CASE("escaped: bidirectional controls, invisible format characters and C1 controls are shown as code points") {
  // A right-to-left override makes "model\u202egpj.tgck" read as "modelkcgt.jpg" on a terminal.
  CHECK(escaped("model\u202egpj.tgck") == "model\\u202egpj.tgck");
  CHECK(escaped("a\u2066b\u2069c") == "a\\u2066b\\u2069c");        // isolates
  CHECK(escaped("a\u200bb\u200dc\u2060d") == "a\\u200bb\\u200dc\\u2060d");  // zero-width space, joiner, word joiner
  CHECK(escaped("\ufeffname") == "\\ufeffname");                    // a byte-order mark inside a name
  CHECK(escaped("line\u2028two") == "line\\u2028two");              // a line separator
  CHECK(escaped("\u00adsoft") == "\\u00adsoft");                    // a soft hyphen
  CHECK(escaped("csi\xc2\x9b" "2J") == "csi\\u009b2J");             // C1 CSI, which some terminals obey
  CHECK(escaped("tag\U000E0041") == "tag\\U000e0041");              // a tag character
  // Other text of any script stays as it is.
  CHECK(escaped("Zürich, Ελλάδα, 日本, עברית, 🙂") == "Zürich, Ελλάδα, 日本, עברית, 🙂");
}

TEST_CASE("xml_escaped: markup characters as entities, control characters as C escapes, the rest as it is") {
  CHECK(xml_escaped(R"(<b>&"it's")") == "&lt;b&gt;&amp;&quot;it&#39;s&quot;");
  CHECK(xml_escaped("a\nb\tc\rd\x01") == "a\\nb\\tc\\rd\\x01");
  CHECK(xml_escaped("Zürich \\N") == "Zürich \\N");
  CHECK(xml_escaped(std::string(500, 'a')) == std::string(500, 'a'));
}
