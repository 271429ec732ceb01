#include "tapegrad/train/program/checkpoint_dir.hpp"

#include <algorithm>

#include "tapegrad/core/settings.hpp"

namespace tapegrad {

void save_checkpoint(OutputFolder& out, std::string_view relative, const Checkpoint& c) {
  const std::vector<std::byte> bytes = encode_checkpoint(c);
  out.write(relative, {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, Durability::durable);
}

CheckpointDir::CheckpointDir(std::filesystem::path dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  if (keep < 1) fail<ValueError>("checkpoints: keep must be at least 1, got {}", keep);
}

std::vector<std::filesystem::path> CheckpointDir::list() const {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string file = entry.path().filename().string();
    constexpr std::string_view head = "checkpoint-", tail = ".tgck";
    if (!file.starts_with(head) || !file.ends_with(tail) || file.size() <= head.size() + tail.size()) continue;
    const std::string_view digits = std::string_view(file).substr(head.size(), file.size() - head.size() - tail.size());
    std::int64_t step = 0;
    if (digits.find_first_not_of("0123456789") != std::string_view::npos || !from_text(digits, step)) continue;
    if (entry.is_regular_file(ec)) found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::optional<std::filesystem::path> CheckpointDir::latest() const {
  auto all = list();
  if (all.empty()) return std::nullopt;
  return all.back();
}

CheckpointDir::CheckpointDir(OutputFolder& out, std::string relative, int keep)
    : CheckpointDir(out.path(relative), keep) {
  out_ = &out;
  relative_ = std::move(relative);
}

std::string CheckpointDir::name(std::int64_t step) const {
  const std::string file = fmt::format("checkpoint-{:08}.tgck", step);
  return out_ ? relative_ + "/" + file : (dir_ / file).string();
}

std::filesystem::path CheckpointDir::save(const Checkpoint& c, std::int64_t step) {
  const std::string name = this->name(step);
  std::filesystem::path path;
  if (out_) {
    save_checkpoint(*out_, name, c);
    path = out_->path(name);
  } else {
    path = name;
    save_checkpoint(path, c);
  }
  std::erase(saved_, path);  // saved again (the same step): it is the newest now
  saved_.push_back(path);
  while (saved_.size() > static_cast<std::size_t>(keep_)) {
    if (out_) {
      out_->remove(relative_ + "/" + saved_.front().filename().string());
    } else {
      std::error_code ec;
      std::filesystem::remove(saved_.front(), ec);  // already gone is fine
    }
    saved_.erase(saved_.begin());
  }
  return path;
}

}  // namespace tapegrad
