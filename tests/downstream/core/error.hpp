#pragma once
// The consumer's own core/error.hpp, on the consumer's include path before tapegrad's: tapegrad's headers
// include theirs by a qualified path (tapegrad/core/error.hpp), so this one must never stand in for it.
namespace consumer {
struct Error {
  const char* what = "the consumer's own error type";
};
}  // namespace consumer
