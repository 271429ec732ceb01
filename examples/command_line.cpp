// The examples' one call into CLI11's parser (command_line.hpp says why it is compiled here alone).
#include "command_line.hpp"

#include <charconv>
#include <cstdint>

#include "tapegrad/core/escape.hpp"

namespace tapegrad::examples {

std::string must_be(std::string_view what, std::string_view text) {
  return fmt::format("must be {}, got '{}'", what, escaped(text, 40));
}

namespace {

// CLI11 2.1 reads an integer with strtoull or strtoll: "-1" wraps to 2^64 - 1 in an unsigned flag, and a
// number past 64 bits saturates, both silently. So every integer option of every program (and of its
// subcommands) is checked first: base-10 digits, a minus only where the type is signed, within 64 bits.
// A narrower type's range is CLI11's own check after this one.
void check_integers(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    const std::string base = type.substr(0, type.find(':'));
    if ((base != "INT" && base != "UINT") || option->get_items_expected_min() == 0) continue;
    const bool is_unsigned = base == "UINT";
    option->check(CLI::Validator(
        [is_unsigned](std::string& text) -> std::string {
          const char* end = text.data() + text.size();
          std::from_chars_result r{};
          if (is_unsigned) {
            std::uint64_t v = 0;
            r = std::from_chars(text.data(), end, v);
          } else {
            std::int64_t v = 0;
            r = std::from_chars(text.data(), end, v);
          }
          if (r.ec == std::errc() && r.ptr == end) return {};
          return must_be(is_unsigned ? whole_numbers<std::uint64_t>() : whole_numbers<std::int64_t>(), text);
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) check_integers(*sub);
}

}  // namespace

std::optional<int> parse_command_line(CLI::App& app, const std::string& program, int argc, char** argv) {
  app.failure_message([program](const CLI::App*, const CLI::Error& e) {
    return fmt::format("{}: {} (see --help)\n", program, e.what());
  });
  check_integers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : static_cast<int>(ExitCode::bad_input);
  }
  return std::nullopt;
}

}  // namespace tapegrad::examples
