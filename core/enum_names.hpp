#pragma once
// Names of enum values: one table per enum, which to_string, parse_enum, command lines, checkpoints and
// `inspect` all read, so an enum has one vocabulary everywhere. An older spelling can stay accepted as
// an alias (parsed, never written).
//
//   template <>
//   struct EnumNames<AttentionMode> {
//     static constexpr std::string_view what = "attention mode";
//     static constexpr std::array<EnumName<AttentionMode>, 2> names = {{
//         {AttentionMode::parameter_free, "parameter_free", "free"},
//         {AttentionMode::learnable, "learnable", "learned"}}};
//   };

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/core/error.hpp"

namespace tapegrad {

template <class E>
struct EnumName {
  E value;
  std::string_view name;        // the spelling the API, command lines and files use
  std::string_view alias = {};  // an older spelling, still accepted by parse_enum
};

// Specialised for each named enum E, with `what` (for messages) and `names` (every value once).
template <class E>
struct EnumNames;

template <class E>
concept NamedEnum = requires {
  EnumNames<E>::what;
  EnumNames<E>::names;
};

template <NamedEnum E>
constexpr std::string_view to_string(E value) {
  for (const auto& n : EnumNames<E>::names)
    if (n.value == value) return n.name;
  return "?";  // not a value of the enum (a cast from an unchecked integer)
}

// The value named `name` (or its alias); false if there is none.
template <NamedEnum E>
constexpr bool parse_enum(std::string_view name, E& out) {
  for (const auto& n : EnumNames<E>::names)
    if (n.name == name || (!n.alias.empty() && n.alias == name)) {
      out = n.value;
      return true;
    }
  return false;
}

// The canonical names, in the table's order.
template <NamedEnum E>
std::vector<std::string> enum_names() {
  std::vector<std::string> out;
  for (const auto& n : EnumNames<E>::names) out.emplace_back(n.name);
  return out;
}

// "parameter_free or learnable", "a, b or c": the choices, as a message lists them.
template <NamedEnum E>
std::string enum_choices() {
  const auto names = enum_names<E>();
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

// The value named `name`; NameError listing the choices if there is none.
template <NamedEnum E>
E parse_enum(std::string_view name) {
  E value{};
  if (!parse_enum(name, value))
    fail<NameError>("{}: unknown name '{}'; choose {}", EnumNames<E>::what, escaped(name), enum_choices<E>());
  return value;
}

}  // namespace tapegrad
