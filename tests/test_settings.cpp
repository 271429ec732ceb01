// core/settings and core/names: one table per options struct and per enum, and everything derived from
// them (text forms that read back exactly, strict parsing that names every problem, bounds).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "tapegrad/core/enum_names.hpp"
#include "tapegrad/core/required.hpp"
#include "tapegrad/core/settings.hpp"

using namespace tapegrad;

namespace {

enum class Colour { red, dark_blue };

struct Sample {
  double rate = 0.5;
  std::int64_t count = 3;
  std::uint64_t seed = 7;
  bool flag = false;
  Colour colour = Colour::red;
  std::string label = "x y";
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("rate", s.rate, "a rate", at_least_below(0, 1));
    field("count", s.count, "a count", at_least(1));
    field("seed", s.seed, "a seed");
    field("flag", s.flag, "a flag");
    field("colour", s.colour, "a colour");
    field("label", s.label, "a label");
  }
};

}  // namespace

template <>
struct tapegrad::EnumNames<Colour> {
  static constexpr std::string_view what = "colour";
  static constexpr std::array<EnumName<Colour>, 2> names = {{{Colour::red, "red"}, {Colour::dark_blue, "dark_blue", "navy"}}};
};

TEST_CASE("names: one table per enum gives to_string, parse_enum (aliases too) and the choices") {
  CHECK(to_string(Colour::dark_blue) == "dark_blue");
  CHECK(parse_enum<Colour>("red") == Colour::red);
  CHECK(parse_enum<Colour>("navy") == Colour::dark_blue);  // an older spelling is read, never written
  CHECK(enum_names<Colour>() == std::vector<std::string>{"red", "dark_blue"});
  CHECK(enum_choices<Colour>() == "red or dark_blue");
  CHECK_THROWS_WITH_AS(parse_enum<Colour>("green"), "colour: unknown name 'green'; choose red or dark_blue", NameError);
  CHECK(to_string(static_cast<Colour>(9)) == "?");
}

TEST_CASE("settings: a struct's fields to text and back, exactly") {
  Sample s;
  s.rate = 0.1 + 0.2;  // 0.30000000000000004: the text must carry every bit
  s.count = std::numeric_limits<std::int64_t>::max();
  s.seed = std::numeric_limits<std::uint64_t>::max();
  s.flag = true;
  s.colour = Colour::dark_blue;
  const Settings text = to_settings(s);
  CHECK(text == Settings{{"rate", "0.30000000000000004"}, {"count", "9223372036854775807"}, {"seed", "18446744073709551615"},
                         {"flag", "true"}, {"colour", "dark_blue"}, {"label", "x y"}});
  const Sample back = from_settings<Sample>(text, "sample");
  CHECK(back.rate == s.rate);
  CHECK(back.count == s.count);
  CHECK(back.seed == s.seed);
  CHECK(back.flag);
  CHECK(back.colour == Colour::dark_blue);
  CHECK(back.label == "x y");
  CHECK(describe_settings({{"lr", "0.1"}, {"nesterov", "false"}}) == "lr 0.1, nesterov false");
  double d = 0;
  for (const char* bad : {"", "1.5x", " 1", "0x10", "1e", "--1"}) {
    CAPTURE(bad);
    CHECK_FALSE(from_text(bad, d));
  }
}

TEST_CASE("settings: parsing is strict and names every missing, unknown or repeated field, then the first bad value") {
  Settings text = to_settings(Sample{});
  Settings missing_and_unknown = {text[0], text[1], {"speed", "3"}, text[3], text[4], text[5], text[5]};
  CHECK_THROWS_WITH_AS(from_settings<Sample>(missing_and_unknown, "sample"),
                       "sample: missing 'seed'; unknown 'speed' (known: rate, count, seed, flag, colour, label); given "
                       "twice: 'label'",
                       NameError);
  auto with = [&](const char* name, const char* value) { return with_overrides(text, {{name, value}}, "sample"); };
  CHECK_THROWS_WITH_AS(from_settings<Sample>(with("rate", "fast"), "sample"), "sample: rate is 'fast', which is not a number",
                       ValueError);
  CHECK_THROWS_WITH_AS(from_settings<Sample>(with("count", "99999999999999999999"), "sample"),
                       "sample: count is '99999999999999999999', which is not a whole number", ValueError);
  CHECK_THROWS_WITH_AS(from_settings<Sample>(with("seed", "-1"), "sample"),
                       "sample: seed is '-1', which is not a whole number >= 0", ValueError);
  CHECK_THROWS_WITH_AS(from_settings<Sample>(with("flag", "1"), "sample"), "sample: flag is '1', which is not true or false",
                       ValueError);
  CHECK_THROWS_WITH_AS(from_settings<Sample>(with("colour", "green"), "sample"),
                       "sample: colour is 'green', which is not one of red or dark_blue", ValueError);
  CHECK_THROWS_WITH_AS(from_settings<Sample>(with("rate", "1"), "sample"), "sample: rate must be in [0, 1), got 1",
                       ValueError);
  CHECK_THROWS_WITH_AS(from_settings<Sample>(with("rate", "nan"), "sample"), "sample: rate must be in [0, 1), got nan",
                       ValueError);
  CHECK_THROWS_WITH_AS(from_settings<Sample>(with("count", "0"), "sample"), "sample: count must be finite and >= 1, got 0",
                       ValueError);
  CHECK(from_settings<Sample>(with("colour", "navy"), "sample").colour == Colour::dark_blue);
  CHECK_THROWS_WITH_AS(with("speed", "3"), "sample: has no setting 'speed' (it has rate, count, seed, flag, colour, label)",
                       NameError);
}

TEST_CASE("settings: bounds describe themselves and refuse what is not finite") {
  CHECK(at_least(0).describe() == "finite and >= 0");
  CHECK(above(0).describe() == "finite and > 0");
  CHECK(at_least_below(0, 1).describe() == "in [0, 1)");
  CHECK(Bounds{}.describe() == "finite");
  CHECK_FALSE(at_least(0).contains(std::numeric_limits<double>::infinity()));
  CHECK_FALSE(Bounds{}.contains(std::nan("")));
  CHECK(above(0).contains(1e-300));
  CHECK_FALSE(above(0).contains(0));
}

namespace {
// A size whose default follows from another field, as DecoderLmConfig's d_ff (unset: 4 d_model).
struct Sized {
  std::int64_t width = 8;
  std::optional<std::int64_t> hidden;
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("width", s.width, "a width", at_least(1));
    field("hidden", s.hidden, "a hidden width (0: 4 width)", in_range(1, 100));
  }
};
// The same with bounds that hold 0, which would be the text of both an empty field and of 0.
struct ZeroInBounds {
  std::optional<int> n;
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("n", s.n, "a size", at_least(0));
  }
};
}  // namespace

TEST_CASE("settings: an optional size is written 0 when empty, as files wrote it before, and read back") {
  CHECK(to_settings(Sized{}) == Settings{{"width", "8"}, {"hidden", "0"}});
  CHECK_FALSE(from_settings<Sized>({{"width", "8"}, {"hidden", "0"}}, "sized").hidden.has_value());
  const Sized given{.hidden = 32};
  CHECK(to_settings(given) == Settings{{"width", "8"}, {"hidden", "32"}});
  CHECK(from_settings<Sized>(to_settings(given), "sized").hidden == 32);
  CHECK_THROWS_WITH_AS(from_settings<Sized>({{"width", "8"}, {"hidden", "101"}}, "sized"),
                       "sized: hidden must be in [1, 100], got 101", ValueError);
  CHECK_THROWS_WITH_AS(from_settings<Sized>({{"width", "8"}, {"hidden", "big"}}, "sized"),
                       "sized: hidden is 'big', which is not a whole number", ValueError);
  CHECK_THROWS_WITH_AS(check_fields(Sized{.hidden = -3}, "sized"), "sized: hidden must be in [1, 100], got -3", ValueError);
  CHECK_THROWS_WITH_AS(check_fields(ZeroInBounds{}, "zero"), "zero: n is optional, so its bounds must leave out 0",
                       UsageError);
}

namespace {
// A field added after files were written (as AdamOptions' decay_on): absent, it means its default.
struct Later {
  double rate = 0.5;
  Colour colour = Colour::red;
  std::int64_t depth = 2;
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("rate", s.rate, "a rate", at_least(0));
    field("colour", s.colour, "a colour", absent_means_default);
    field("depth", s.depth, "a depth", Bounds{.lo = 1, .may_be_absent = true});
  }
};
}  // namespace

TEST_CASE("settings: a field whose absence means its default is written as any field, and read either way") {
  // to_settings writes every field (an optimizer's state leaves out those at their defaults: test_optimizer.cpp).
  CHECK(to_settings(Later{}) == Settings{{"rate", "0.5"}, {"colour", "red"}, {"depth", "2"}});
  const Later given{.colour = Colour::dark_blue, .depth = 3};
  CHECK(to_settings(given) == Settings{{"rate", "0.5"}, {"colour", "dark_blue"}, {"depth", "3"}});
  const Later back = from_settings<Later>(to_settings(given), "later");
  CHECK(back.colour == Colour::dark_blue);
  CHECK(back.depth == 3);
  // Absent: the default; present: read as any field, the default given explicitly too.
  const Later absent = from_settings<Later>({{"rate", "0.25"}}, "later");
  CHECK(absent.rate == 0.25);
  CHECK(absent.colour == Colour::red);
  CHECK(absent.depth == 2);
  CHECK(from_settings<Later>(to_settings(Later{}), "later").colour == Colour::red);
  // Strict as any field: a bad value, one out of bounds, one given twice, and the names it is known by.
  CHECK_THROWS_WITH_AS(from_settings<Later>({{"rate", "1"}, {"colour", "gr\neen"}}, "later"),
                       "later: colour is 'gr\\x0aeen', which is not one of red or dark_blue", ValueError);
  CHECK_THROWS_WITH_AS(from_settings<Later>({{"rate", "1"}, {"depth", "0"}}, "later"),
                       "later: depth must be finite and >= 1, got 0", ValueError);
  CHECK_THROWS_WITH_AS(from_settings<Later>({{"rate", "1"}, {"colour", "red"}, {"colour", "red"}, {"size", "1"}}, "later"),
                       "later: unknown 'size' (known: rate, colour, depth); given twice: 'colour'", NameError);
  CHECK_THROWS_WITH_AS(from_settings<Later>({{"colour", "red"}}, "later"), "later: missing 'rate'", NameError);
}

namespace {
// A fields() struct with a field that has no default (core/required.hpp), as a layer's options have.
struct Needs {
  Required<std::int64_t, "Needs::width"> width;
  double scale = 1;
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("width", s.width, "a width");
    field("scale", s.scale, "a scale", above(0));
  }
};
}  // namespace

TEST_CASE("settings: to_settings writes a struct with a required field (one that has no default)") {
  CHECK(to_settings(Needs{.width = 12}) == Settings{{"width", "12"}, {"scale", "1"}});
}
