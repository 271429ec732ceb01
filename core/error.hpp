#pragma once
// Errors are exceptions whose message is a sentence that starts with the operation and names every
// shape or name involved: "matmul: inner dimensions differ: a is 4x8, b is 6x8".

#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace tapegrad {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Shapes that do not fit the operation.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A value the operation cannot accept: an index out of range, a non-finite loss, a bad option.
class ValueError : public Error {
 public:
  using Error::Error;
};

// A misuse of the API: a Var from another tape or from before reset(), backward twice, ...
class UsageError : public Error {
 public:
  using Error::Error;
};

// An unknown or duplicated name (parameter, task, option).
class NameError : public Error {
 public:
  using Error::Error;
};

// A file that cannot be read as what it claims to be: wrong magic, truncated, corrupt, malformed.
class FormatError : public Error {
 public:
  using Error::Error;
};

// Throws E with a message formatted by fmt: fail<ShapeError>("add: {} vs {}", a, b).
template <class E, class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw E(fmt::format(format, std::forward<Args>(args)...));
}

// "'a', 'b'": names as error messages list them.
inline std::string quoted_list(const std::vector<std::string>& names) {
  return names.empty() ? std::string() : fmt::format("'{}'", fmt::join(names, "', '"));
}

// Throws ValueError ("<op>: <name> must be finite and >= 0, got <x>") unless x is.
inline void require_non_negative(std::string_view op, std::string_view name, double x) {
  if (!(std::isfinite(x) && x >= 0)) fail<ValueError>("{}: {} must be finite and >= 0, got {}", op, name, x);
}

}  // namespace tapegrad
