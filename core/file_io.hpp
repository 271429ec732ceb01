#pragma once
// Files: whole-file writes that a reader never sees half done, bounded reads (whole or in pieces), and the check
// that a write will get past names and places. Errors name the path and the system's reason. (A run's
// output folder, its lock and manifest: program support, train/program/output_folder.hpp.)

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "tapegrad/core/escape.hpp"  // format_bytes

namespace tapegrad {

enum class Durability {
  replace,  // atomic for readers: they see the old file or the new one
  durable,  // also across a crash or power loss: fsync'd before the rename, the folder after it
};

// Writes `content` to `path`, creating missing parent folders: a temporary file in the same folder
// (".<name>.tmp-<pid>", temporary_path), renamed over `path`. Throws IoError starting "<op>: " and naming
// the path and the reason (a full disk: "No space left on device"; a file-size limit: "File too large"); the
// temporary file is removed on failure. A `path` that exists and is not a regular file (a device, a pipe,
// a folder, a symbolic link) is a FileError naming it, and is left as it is.
void write_file(const std::filesystem::path& path, std::string_view content,
                Durability durability = Durability::replace, std::string_view op = "write_file");
// The same into the file `name` (no '/') of the folder open as the descriptor `folder`, following no
// link: the target, its temporary file and the rename all resolve from that descriptor, so a folder
// swapped for a link after it was opened is not written through. `shown` is the path messages give.
// (For a run's output folder: program/output_folder.hpp.)
void write_file_at(int folder, std::string_view name, std::string_view content, Durability durability,
                   std::string_view op, const std::filesystem::path& shown);
// The temporary file write_file writes `path` through: ".<name>.tmp-<pid>" beside it.
std::filesystem::path temporary_path(const std::filesystem::path& path);
// Whether `name` (a file name, no folder) is such a temporary file's: ".<name>.tmp-<digits>". A user's
// own dot-file is not.
bool is_temporary_name(std::string_view name);
// Proves, before a run does its work, that write_file(path) can get past names and places: the target
// missing or a regular file, its folder made (with its parents) and writable, its temporary file's name and
// path within the file system's limits (a probe file is created there and removed). FileError naming the
// path and why, so that an hour of training does not end in "File name too long".
void check_writable(const std::filesystem::path& path, std::string_view op);

// The whole of the regular file `path`, if it holds at most `max_bytes`. Throws FileError for a file that
// cannot be opened or is not a regular file (a folder, a device such as /dev/zero, a pipe), LimitError for
// a larger one (naming its size and the limit), both before reading it, and IoError if reading fails.
std::string read_file(const std::filesystem::path& path, std::size_t max_bytes, std::string_view op = "read_file");

// The regular file `path` handed to `piece` in pieces of at most `piece_bytes`, in order, to its end,
// whatever size the system reports for it (a file in /proc reports 0), so that a reader of a file larger
// than it wants to hold (a text it turns into something else) keeps one piece at a time. Refuses as
// read_file does, before the first piece; more than `max_bytes` is a LimitError naming the file and the
// limit, when the first byte past it is read. Returns the bytes read.
std::size_t read_file_pieces(const std::filesystem::path& path, std::size_t max_bytes, std::string_view op,
                             const std::function<void(std::string_view)>& piece,
                             std::size_t piece_bytes = std::size_t{1} << 20);

}  // namespace tapegrad
