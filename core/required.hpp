#pragma once
// Required<V, "Options::field">: an options field with no default. Options made without it do not
// compile, and the compiler's message names the field:
//
//   LinearOptions{.in = 4}
//   g++:   could not convert '{}' to 'Required<long int, FieldName<19>{"LinearOptions::out"}>'
//   clang: no matching constructor for initialization of 'Required<long, "LinearOptions::out">'
//          ... in implicit initialization of field 'out' with omitted initializer
//
// where a plain `Index out = 0` would have compiled and failed at run time. It reads as its value (an
// implicit conversion), so code that uses the field is written as for a plain V; a value that is given
// but invalid (0 units) is still the layer's check, at construction.

#include <algorithm>
#include <cstddef>

#include <fmt/format.h>

namespace tapegrad {

// A string literal as a template argument: the field's name, which compilers print with the type.
template <std::size_t N>
struct FieldName {
  char text[N];
  constexpr FieldName(const char (&name)[N]) { std::copy_n(name, N, text); }  // NOLINT: implicit on purpose
};

template <class V, FieldName Name>
struct Required {
  V value;
  constexpr Required(V v) : value(v) {}  // NOLINT: implicit on purpose: `.in = 4`
  // From another struct's required field of the same type (`.d_model = block.d_model`).
  template <FieldName Other>
  constexpr Required(const Required<V, Other>& other) : value(other.value) {}  // NOLINT: implicit on purpose
  constexpr operator V() const { return value; }                               // NOLINT: implicit on purpose
};

}  // namespace tapegrad

template <class V, tapegrad::FieldName Name>
struct fmt::formatter<tapegrad::Required<V, Name>> : fmt::formatter<V> {
  template <class FormatContext>
  auto format(const tapegrad::Required<V, Name>& r, FormatContext& ctx) const -> decltype(ctx.out()) {
    return fmt::formatter<V>::format(r.value, ctx);
  }
};
