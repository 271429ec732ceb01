#pragma once
// Whole-file writes that a reader never sees half done.

#include <filesystem>
#include <string_view>

namespace tapegrad {

enum class Durability {
  replace,  // atomic for readers: they see the old file or the new one
  durable,  // also across a crash or power loss: fsync'd before the rename, the folder after it
};

// Writes `content` to `path`, creating missing parent folders: a temporary file in the same folder
// (".<name>.tmp-<pid>"), renamed over `path`. Throws Error starting "<op>: " and naming the path and
// the reason; the temporary file is removed on failure.
void write_file(const std::filesystem::path& path, std::string_view content,
                Durability durability = Durability::replace, std::string_view op = "write_file");

}  // namespace tapegrad
