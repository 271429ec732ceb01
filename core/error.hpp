#pragma once
// Errors are exceptions whose message is a sentence that starts with the operation and names every
// shape or name involved: "matmul: inner dimensions differ: a is 4x8, b is 6x8".

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "tapegrad/core/escape.hpp"  // escaped(), quoted_list(): text from outside, as messages quote it

namespace tapegrad {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Shapes that do not fit the operation.
struct ShapeError : Error {
  using Error::Error;
};

// A value the operation cannot accept: an index out of range, a bad option.
struct ValueError : Error {
  using Error::Error;
};

// A NaN or Inf where there must be a number: a training loss or gradient norm, an op's output in anomaly
// mode. Training stops with it.
struct NonFiniteError : ValueError {
  using ValueError::ValueError;
};

// A size beyond a limit that keeps a run from exhausting the machine: the memory a configuration implies,
// a file's size. The message names the estimate, the limit and how to raise it.
struct LimitError : ValueError {
  using ValueError::ValueError;
};

// A misuse of the API: a Var from another tape or from before reset(), backward twice, ...
struct UsageError : Error {
  using Error::Error;
};

// An unknown or duplicated name (parameter, task, option).
struct NameError : Error {
  using Error::Error;
};

// A file that cannot be read as what it claims to be: wrong magic, truncated, corrupt, malformed.
struct FormatError : Error {
  using Error::Error;
};

// A path given to the program that cannot be used as asked: a file that is missing, unreadable or not a
// regular file (a folder, a device, a pipe); an output folder that is a file, read-only or not ours to
// write. The message names the path and the reason.
struct FileError : Error {
  using Error::Error;
};

// The system failed a file operation that should have worked: writing (a full disk), syncing, renaming,
// reading part way. The message names the path and the system's reason.
struct IoError : Error {
  using Error::Error;
};

// The system refused a resource the run asked for: a thread, memory beyond what it may take. Programs end
// with exit 4 (system_failed), as for std::bad_alloc.
struct ResourceError : Error {
  using Error::Error;
};

// Another program the library runs (Graphviz's dot, core/process.hpp) could not be started, failed (an exit
// status other than 0, a signal) or ran past its time. An IoError: the system failed the run, not its input.
struct ProcessError : IoError {
  using IoError::IoError;
};

// Something another process holds: an output folder a running training owns.
struct BusyError : Error {
  using Error::Error;
};

// Throws E with a message formatted by fmt: fail<ShapeError>("add: {} vs {}", a, b).
template <class E, class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw E(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tapegrad
