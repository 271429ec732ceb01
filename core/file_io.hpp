#pragma once
// Files: whole-file writes that a reader never sees half done, bounded whole-file reads, and the lock that
// gives a run its output folder. Errors name the path and the system's reason.

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "tapegrad/core/text.hpp"  // format_bytes

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
// The temporary file write_file writes `path` through: ".<name>.tmp-<pid>" beside it.
std::filesystem::path temporary_path(const std::filesystem::path& path);
// Proves, before a run does its work, that write_file(path) can get past names and places: the target
// missing or a regular file, its folder made (with its parents) and writable, its temporary file's name and
// path within the file system's limits (a probe file is created there and removed). FileError naming the
// path and why, so that an hour of training does not end in "File name too long".
void check_writable(const std::filesystem::path& path, std::string_view op);

// The whole of the regular file `path`, if it holds at most `max_bytes`. Throws FileError for a file that
// cannot be opened or is not a regular file (a folder, a device such as /dev/zero, a pipe), LimitError for
// a larger one (naming its size and the limit), both before reading it, and IoError if reading fails.
std::string read_file(const std::filesystem::path& path, std::size_t max_bytes, std::string_view op = "read_file");

// A folder this process owns while the lock lives: made (with its parents) if missing, and locked with
// flock() on <folder>/.tapegrad.lock, which holds the owner's pid. The system drops the lock when the
// process ends, however it ends, so a killed run never leaves the folder locked. Throws FileError when the
// folder cannot be made or written (a file in its place, a read-only mount, no permission) and BusyError
// naming the other process when one holds it.
class FolderLock {
 public:
  FolderLock(std::filesystem::path folder, std::string_view op);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  const std::filesystem::path& folder() const { return folder_; }

 private:
  std::filesystem::path folder_;
  int fd_ = -1;
};

// Removes the temporary files write_file leaves when a process dies mid-write (".<name>.tmp-<pid>") from
// `folder`. Only for a folder this process owns (a FolderLock): no other writer can be using them.
// Returns how many it removed.
int remove_stale_temporaries(const std::filesystem::path& folder);

}  // namespace tapegrad
