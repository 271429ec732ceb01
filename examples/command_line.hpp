#pragma once
// The examples' command lines: one way to report a mistake in the flags, the same in every program.

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tapegrad/program/progress.hpp"
#include "tapegrad/program/run_program.hpp"

namespace tapegrad::examples {

// A check for a flag that must be positive and finite; its message reads as the others do ("--keep: must be
// positive, got '0'"), where CLI::PositiveNumber's prints the whole range of a double.
inline const CLI::Validator positive(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !(v > 0)) return fmt::format("must be positive, got '{}'", text);
      if (!std::isfinite(v)) return fmt::format("must be finite, got '{}'", text);
      return {};
    },
    "POSITIVE");

// A check for a number in [lo, hi] whose message reads as `positive`'s ("--dropout: must be in [0, 0.9], got
// '1'"), where CLI::Range prints six decimals.
inline CLI::Validator within(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || !(v >= lo && v <= hi))
          return fmt::format("must be in [{:g}, {:g}], got '{}'", lo, hi, text);
        return {};
      },
      fmt::format("[{:g}, {:g}]", lo, hi));
}

// Parses argv into `app`. A mistake prints one line, "<program>: <what> (see --help)", and returns
// ExitCode::bad_input; --help prints the help and returns 0. Returns nothing when the program should run.
// Defined in command_line.cpp, compiled once: CLI11 (2.1, header-only) generates its whole parser, help
// formatter and config reader in every file that calls App::parse, about 6 s of g++ -O3 a program.
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
