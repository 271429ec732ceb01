// core/escape: how text from outside (a file, a path, a flag) is quoted in a one-line message.
#include <doctest/doctest.h>

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
