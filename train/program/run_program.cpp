#include "tapegrad/train/program/run_program.hpp"

#include <signal.h>

#include <fmt/format.h>

#include "tapegrad/core/error.hpp"
#include "tapegrad/train/collective.hpp"  // DivergenceError

namespace tapegrad {

int run_program(std::string_view program, const std::function<int()>& body, const std::function<std::string()>& where) {
  auto report = [&](std::string_view message, ExitCode code) {
    const std::string prefix = fmt::format("{}: ", program);
    if (message.starts_with(prefix)) message.remove_prefix(prefix.size());
    const std::string place = where ? where() : std::string();
    fmt::print(stderr, "{}{}{}\n", prefix, place.empty() ? "" : place + ": ", message);
    return static_cast<int>(code);
  };
  // write_file turns a file-size limit (ulimit -f) into an IoError itself (core/file_io.cpp); the
  // program's other output (the CSV log through stdio, stdout redirected to a file) would still end
  // it with SIGXFSZ: ignored, those writes fail with EFBIG and the program reports it (exit 4).
  ::signal(SIGXFSZ, SIG_IGN);
  try {
    return body();
  } catch (const NonFiniteError& e) {
    return report(e.what(), ExitCode::training_stopped);
  } catch (const IoError& e) {
    return report(e.what(), ExitCode::system_failed);
  } catch (const ResourceError& e) {
    return report(e.what(), ExitCode::system_failed);
  } catch (const DivergenceError& e) {
    return report(e.what(), ExitCode::check_failed);
  } catch (const Error& e) {
    return report(e.what(), ExitCode::bad_input);
  } catch (const std::bad_alloc&) {
    return report("out of memory: the system could not give the run the memory it asked for", ExitCode::system_failed);
  } catch (const std::exception& e) {
    return report(fmt::format("internal error: {}", e.what()), ExitCode::system_failed);
  } catch (...) {
    return report("internal error: an unknown exception", ExitCode::system_failed);
  }
}

}  // namespace tapegrad
