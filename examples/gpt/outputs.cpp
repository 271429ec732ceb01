#include "gpt/outputs.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace gpt {

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {
// Whether a file in --out is of a kind this program writes.
bool ours(const fs::path& p) {
  const std::string name = p.filename().string();
  return name == "report.md" || name == "curves.svg" || name.starts_with("attention_") || name.starts_with("samples_") ||
         p.extension() == ".tgck";
}
}  // namespace

RunFolder::RunFolder(fs::path dir, bool overwrite) : dir_(std::move(dir)), lock_(dir_, "--out") {
  remove_stale_temporaries(dir_);  // left by a killed run: no one else writes here while we hold the lock
  std::vector<fs::path> previous;
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(dir_, ec))
    if (entry.is_regular_file() && ours(entry.path())) previous.push_back(entry.path());
  if (previous.empty()) return;
  if (!overwrite)
    fail<FileError>("--out: '{}' holds another run's files ({}{}); choose a new folder, or --overwrite to replace them",
                    escaped(dir_), escaped(previous.front().filename()), previous.size() > 1 ? ", ..." : "");
  for (const auto& p : previous) fs::remove(p, ec);
}

void RunFolder::write(std::string_view name, std::string_view content) {
  write_file(dir_ / name, content);
  written_.emplace_back(name);
}

fs::path RunFolder::save_model(std::string_view model, const Checkpoint& checkpoint) {
  const fs::path file = dir_ / fmt::format("{}.tgck", model);
  tapegrad::save_checkpoint(file, checkpoint);
  written_.push_back(file.filename().string());
  // EXPORT (safetensors): the library's safetensors writer is being built (issue: safetensors). When it
  // lands, write <model>.safetensors here from `checkpoint`'s parameters, and name it in the report.
  return file;
}

fs::path RunFolder::save_checkpoint(std::string_view model, const Checkpoint& checkpoint, std::int64_t step, int keep) {
  auto it = std::find_if(checkpoints_.begin(), checkpoints_.end(), [&](const auto& c) { return c.first == model; });
  if (it == checkpoints_.end()) {
    checkpoints_.emplace_back(std::string(model), CheckpointDir(dir_ / "checkpoints" / model, keep));
    it = checkpoints_.end() - 1;
  }
  return it->second.save(checkpoint, step);
}

}  // namespace gpt
