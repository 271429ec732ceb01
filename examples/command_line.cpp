// The examples' one call into CLI11's parser (command_line.hpp says why it is compiled here alone).
#include "command_line.hpp"

namespace tapegrad::examples {

std::optional<int> parse_command_line(CLI::App& app, const std::string& program, int argc, char** argv) {
  app.failure_message([program](const CLI::App*, const CLI::Error& e) {
    return fmt::format("{}: {} (see --help)\n", program, e.what());
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : static_cast<int>(ExitCode::bad_input);
  }
  return std::nullopt;
}

}  // namespace tapegrad::examples
