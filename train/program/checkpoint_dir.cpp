#include "tapegrad/train/program/checkpoint_dir.hpp"

#include "tapegrad/core/error.hpp"

namespace tapegrad {

void save_checkpoint(OutputFolder& out, std::string_view relative, const Checkpoint& c) {
  const std::vector<std::byte> bytes = encode_checkpoint(c);
  out.write(relative, {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, Durability::durable);
}

CheckpointDir::CheckpointDir(OutputFolder& out, std::string relative, int keep)
    : out_(&out), relative_(std::move(relative)), keep_(keep) {
  out.path(relative_);  // a name the folder refuses is refused here, not at the first save
  if (keep < 1) fail<ValueError>("checkpoints: keep must be at least 1, got {}", keep);
}

std::string CheckpointDir::name(std::int64_t step) const {
  return fmt::format("{}/checkpoint-{:08}.tgck", relative_, step);
}

std::filesystem::path CheckpointDir::save(const Checkpoint& c, std::int64_t step) {
  const std::string name = this->name(step);
  save_checkpoint(*out_, name, c);
  const std::filesystem::path path = out_->path(name);
  std::erase(saved_, path);  // saved again (the same step): it is the newest now
  saved_.push_back(path);
  while (saved_.size() > static_cast<std::size_t>(keep_)) {
    out_->remove(relative_ + "/" + saved_.front().filename().string());
    saved_.erase(saved_.begin());
  }
  return path;
}

}  // namespace tapegrad
