#pragma once
// Settings: a configuration as ordered `name = value` text pairs, the form that options and model
// configurations take in checkpoints, in `inspect` and in messages. A struct lists its fields once, in
// a static fields() function, and everything else derives from that list:
//
//   struct SgdOptions {
//     double lr = 0.01;
//     bool nesterov = false;
//     template <class S, class F>
//     static void fields(S& s, F&& field) {  // S is SgdOptions or const SgdOptions
//       field("lr", s.lr, "learning rate", at_least(0));
//       field("nesterov", s.nesterov, "Nesterov momentum");
//     }
//   };
//
//   to_settings(options)             {{"lr", "0.01"}, {"nesterov", "false"}}
//   from_settings<SgdOptions>(s, w)  strict: every field once, nothing unknown, every value parsed
//   check_fields(options, "SGD")     every field within its bounds (ValueError naming the first that is not)
//
// A field may be one whose absence means its default: declared with absent_means_default as its
// bounds (AdamOptions' decay_on: `field("decay_on", s.decay_on, "...", absent_means_default)`),
// from_settings takes it absent as that default (the struct's own initializer), and present as any field,
// so settings written before the field existed still read. to_settings writes every field; an optimizer's
// state leaves out such a field where it holds its default (OptimizerWith, train/optimizer.hpp), so that
// it saves what it saved before the field existed.
//
// Values are written so that they read back exactly: doubles in the shortest form that round-trips,
// integers in decimal, bools as true/false, enums by their names (core/enum_names.hpp), strings as they are.
// Field types: double, any integer, bool, std::string, named enums, and std::optional of an integer: a
// size whose default follows from other fields (d_ff: 4 d_model when empty). An empty one is written 0,
// as files wrote such a size before it was optional, so its bounds (a value it holds must be within them)
// must leave 0 out: check_fields refuses bounds that do not.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <concepts>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tapegrad/core/enum_names.hpp"
#include "tapegrad/core/error.hpp"

namespace tapegrad {

struct Setting {
  std::string name;
  std::string value;
  bool operator==(const Setting&) const = default;
};
using Settings = std::vector<Setting>;

// The value of `name`, or nullptr.
const std::string* find_setting(const Settings& settings, std::string_view name);
// "lr 0.01, momentum 0.9": one line for logs and `inspect`.
std::string describe_settings(const Settings& settings);
// `settings` with the values of `overrides` put in; NameError ("<what>: has no setting 'x' (it has
// ...)") for an override that names no setting.
Settings with_overrides(Settings settings, const Settings& overrides, std::string_view what);

// What a field accepts: for a numeric field, its range (every numeric field must also be finite); for any
// field, whether settings may leave it out, meaning its default.
struct Bounds {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool may_be_absent = false;

  bool contains(double v) const {
    return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  std::string describe() const;  // "finite and >= 0", "in [0, 1)", "finite and > 0", "finite"
};
constexpr Bounds at_least(double lo) { return {.lo = lo}; }
constexpr Bounds above(double lo) { return {.lo = lo, .lo_open = true}; }
constexpr Bounds in_range(double lo, double hi) { return {.lo = lo, .hi = hi}; }                         // [lo, hi]
constexpr Bounds at_least_below(double lo, double hi) { return {.lo = lo, .hi = hi, .hi_open = true}; }  // [lo, hi)
// A field that settings may leave out, then its default (a numeric one with bounds: Bounds{.lo = 0, ...,
// .may_be_absent = true}).
inline constexpr Bounds absent_means_default{.may_be_absent = true};

// std::optional of an integer, the one optional type a field may have.
template <class V>
concept OptionalInteger =
    std::same_as<V, std::optional<typename V::value_type>> && std::integral<typename V::value_type>;

// ---- one value as text ----------------------------------------------------------------------------

// Doubles (and floats, as the double they are) in fmt's shortest form that reads back as the same
// double, integers in decimal, bools as true/false, enums by their names, strings as they are; an empty
// optional as 0.
template <class V>
std::string to_text(const V& v) {
  if constexpr (std::is_same_v<V, bool>)
    return v ? "true" : "false";
  else if constexpr (std::is_floating_point_v<V>)
    return fmt::format("{}", static_cast<double>(v));
  else if constexpr (NamedEnum<V>)
    return std::string(to_string(v));
  else if constexpr (OptionalInteger<V>)
    return v ? to_text(*v) : "0";
  else
    return fmt::format("{}", v);  // an integer, or text
}

// Parse the whole of `text`; false (out unchanged) if it is not one value of the type.
template <class V>
bool from_text(std::string_view text, V& out) {
  if constexpr (std::is_same_v<V, bool>) {
    if (text != "true" && text != "false") return false;
    out = text == "true";
  } else if constexpr (std::is_same_v<V, std::string>) {
    out = std::string(text);
  } else if constexpr (NamedEnum<V>) {
    return parse_enum(text, out);
  } else if constexpr (OptionalInteger<V>) {
    typename V::value_type v{};
    if (!from_text(text, v)) return false;
    out = v == 0 ? V() : V(v);
  } else {  // a number
    V v{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return false;
    out = v;
  }
  return true;
}

// "a number", "an integer", "true or false", "one of a, b or c": what a value of the type must be.
template <class V>
std::string kind_of_value() {
  if constexpr (std::is_same_v<V, bool>)
    return "true or false";
  else if constexpr (std::is_floating_point_v<V>)
    return "a number";
  else if constexpr (std::is_unsigned_v<V>)
    return "a whole number >= 0";
  else if constexpr (std::is_integral_v<V>)
    return "a whole number";
  else if constexpr (NamedEnum<V>)
    return "one of " + enum_choices<V>();
  else if constexpr (OptionalInteger<V>)
    return kind_of_value<typename V::value_type>();
  else
    return "text";
}

// ---- whole structs ----------------------------------------------------------------------------------

// S's fields with their current values, in declaration order, every one.
template <class S>
Settings to_settings(const S& s) {
  Settings out;
  S::fields(s, [&](const char* name, const auto& value, const char*, Bounds = {}) {
    out.push_back({name, to_text(value)});
  });
  return out;
}

// Throws ValueError "<what>: <field> must be <bounds>, got <value>" for the first numeric field out of
// its bounds (an empty optional has no value to check).
template <class S>
void check_fields(const S& s, std::string_view what) {
  S::fields(s, [&](const char* name, const auto& value, const char*, Bounds bounds = {}) {
    using V = std::remove_cvref_t<decltype(value)>;
    if constexpr (OptionalInteger<V>) {
      if (bounds.contains(0)) fail<UsageError>("{}: {} is optional, so its bounds must leave out 0", what, name);
      if (value && !bounds.contains(static_cast<double>(*value)))
        fail<ValueError>("{}: {} must be {}, got {}", what, name, bounds.describe(), *value);
    } else if constexpr (std::is_arithmetic_v<V> && !std::is_same_v<V, bool>) {
      if (!bounds.contains(static_cast<double>(value)))
        fail<ValueError>("{}: {} must be {}, got {}", what, name, bounds.describe(), to_text(value));
    }
  });
}

// An S from settings, strictly: every field of S exactly once (one that may be absent at most once), no
// other name, every value of its type and within its bounds. Throws NameError listing every missing,
// unknown or repeated name, or ValueError naming the first value that does not parse or fit; `what` starts
// each message.
template <class S>
S from_settings(const Settings& settings, std::string_view what) {
  S out{};
  std::vector<std::string> known, missing, repeated, unknown;
  S::fields(out, [&](const char* name, auto&, const char*, Bounds bounds = {}) {
    known.emplace_back(name);
    const auto seen = std::count_if(settings.begin(), settings.end(), [&](const Setting& s) { return s.name == name; });
    if (seen == 0 && !bounds.may_be_absent) missing.push_back(name);
    if (seen > 1) repeated.push_back(name);
  });
  for (const auto& s : settings)
    if (std::find(known.begin(), known.end(), s.name) == known.end()) unknown.push_back(s.name);
  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back("missing " + quoted_list(missing));
  if (!unknown.empty())
    problems.push_back(fmt::format("unknown {} (known: {})", quoted_list(unknown), fmt::join(known, ", ")));
  if (!repeated.empty()) problems.push_back("given twice: " + quoted_list(repeated));
  if (!problems.empty()) fail<NameError>("{}: {}", what, fmt::join(problems, "; "));
  S::fields(out, [&](const char* name, auto& value, const char*, Bounds = {}) {
    using V = std::remove_cvref_t<decltype(value)>;
    const std::string* text = find_setting(settings, name);
    if (text && !from_text(*text, value))  // absent: its default
      fail<ValueError>("{}: {} is '{}', which is not {}", what, name, escaped(*text), kind_of_value<V>());
  });
  check_fields(out, what);
  return out;
}

}  // namespace tapegrad
