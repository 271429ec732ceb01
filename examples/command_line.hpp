#pragma once
// The examples' command lines: one way to report a mistake in the flags, the same in every program.

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"

namespace tapegrad::examples {

// The one wording of a refused flag value in every program, "must be <what>, got '<text>'", the text
// escaped and cut short (command_line.cpp): CLI11 prefixes the flag ("--lr: must be finite and > 0, got
// 'inf'"), and `what` is worded as Bounds::describe words a bound.
std::string must_be(std::string_view what, std::string_view text);
// What an integer flag of type V must be: "a whole number from 0 to 18446744073709551615".
template <class V>
std::string whole_numbers() {
  return fmt::format("a whole number from {} to {}", std::numeric_limits<V>::min(), std::numeric_limits<V>::max());
}

// A check for a flag that must be positive and finite, where CLI::PositiveNumber's message prints the whole
// range of a double.
inline const CLI::Validator positive(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !(v > 0) || !std::isfinite(v)) return must_be("finite and > 0", text);
      return {};
    },
    "POSITIVE");

// A check for a number in [lo, hi] ("--dropout: must be in [0, 0.9], got '1'"), where CLI::Range prints six
// decimals.
inline CLI::Validator within(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || !(v >= lo && v <= hi))
          return must_be(fmt::format("in [{:g}, {:g}]", lo, hi), text);
        return {};
      },
      fmt::format("[{:g}, {:g}]", lo, hi));
}

// Parses argv into `app`. A mistake prints one line, "<program>: <what> (see --help)", and returns
// ExitCode::bad_input; --help prints the help and returns 0. Returns nothing when the program should run.
// Defined in command_line.cpp, compiled once: CLI11 (2.1, header-only) generates its whole parser, help
// formatter and config reader in every file that calls App::parse, about 6 s of g++ -O3 a program (when
// the programs were built at -O3).
std::optional<int> parse_command_line(CLI::App& app, const std::string& program, int argc, char** argv);

// Runs `body`; a run stopped by a NaN or Inf loss or gradient norm (the library says which, at which step)
// is re-thrown with `hint`: what this program's own flags can do about it. The anomaly report, which
// already names the op, passes as it is.
template <class F>
auto with_nan_hint(std::string_view hint, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const NonFiniteError& e) {
    if (std::string_view(e.what()).starts_with("anomaly:")) throw;
    throw NonFiniteError(fmt::format("{}; {}", e.what(), hint));
  }
}

}  // namespace tapegrad::examples
