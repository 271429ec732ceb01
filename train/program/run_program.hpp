#pragma once
// How a program ends: its body run so that whatever it throws becomes one line on stderr and an exit code
// from one documented set. Program support (tapegrad::program), for the examples and for your programs.

#include <functional>
#include <string>
#include <string_view>

namespace tapegrad {

// The exit codes of tapegrad's programs.
enum class ExitCode : int {
  ok = 0,
  check_failed = 1,      // the program ran, and what it checks did not hold
  bad_input = 2,         // a bad flag or value, a missing, unreadable, invalid or forged file, a size over a
                         // limit, an output folder that cannot be used or that another run holds
  training_stopped = 3,  // a non-finite loss or gradient (NonFiniteError)
  system_failed = 4,     // the system failed: a full disk, a file-size limit or another I/O error (IoError),
                         // memory exhausted, a thread refused (ResourceError)
};

// Runs a program's body and turns whatever it throws into one line on stderr, "<program>: <message>" (a
// message that already starts with "<program>: " is not prefixed again), and its exit code:
// NonFiniteError -> training_stopped, IoError, ResourceError and std::bad_alloc -> system_failed, any other
// tapegrad::Error -> bad_input, anything else -> system_failed ("internal error: ..."). Nothing escapes.
// It ignores SIGXFSZ, so that a file-size limit is a write error (exit 4), not a kill. `where`, when it
// says something ("rank 1" in a data-parallel run), is asked at the failure and follows the program's
// name: "<program>: rank 1: <message>".
// A DivergenceError (the ranks of a data-parallel run no longer agree) -> check_failed.
int run_program(std::string_view program, const std::function<int()>& body,
                const std::function<std::string()>& where = {});

}  // namespace tapegrad
