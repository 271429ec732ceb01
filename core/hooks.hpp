#pragma once
// Optional hooks: a member that a library template calls when a type declares it (a configuration's own
// check(), a model's check_config). The rule, for every hook of the library: a type that declares a member
// of the hook's name must declare it with the hook's exact signature, or compilation stops naming the hook
// and its signature; a type without a member of that name has no hook. So a near miss (a const left out,
// another parameter, a static member where a member function is called) is an error, never skipped.
//
// Each hook is a named concept, written as this one is (ConfiguredLm's, layers/decoder_lm.hpp):
//
//   template <class C>  // a condition between a configuration's own fields
//   concept ChecksItself = (requires { &C::check; }) &&  // declared: then it must be the hook
//                          hook_signature<"void check() const", decltype(&C::check), void (C::*)() const>();
//
// The requires-expression stands in parentheses: the concept stays the same conjunction (the signature is
// checked only where the member is declared), and clang-format keeps the concept on its lines.
//
// g++ stops with "a member named as a hook must have the hook's signature" in the instantiation of
// hook_signature<FieldName<...>{"void check() const"}, ...>. A member the name cannot take the address of
// (declared twice, as overloads, or as a template) is not detected: declare a hook once.

#include <type_traits>

#include "tapegrad/core/required.hpp"

namespace tapegrad {

// True when `Declared` (the type of &C::name) is the hook's `Exact` type, or converts to it (a member
// declared in a base class); otherwise a static_assert whose instantiation names `Hook`.
template <FieldName Hook, class Declared, class Exact>
consteval bool hook_signature() {
  static_assert(std::is_convertible_v<Declared, Exact>,
                "a member named as a hook must have the hook's signature (Hook, in the line above)");
  return true;
}

}  // namespace tapegrad
