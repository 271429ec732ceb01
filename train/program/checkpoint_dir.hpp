#pragma once
// A run's checkpoints in its output folder: checkpoint-<step>.tgck, the newest N kept. Program support
// (tapegrad::program): the library saves and loads checkpoints (train/checkpoint/checkpoint.hpp); where a
// program keeps them, and which it deletes, is the program's.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/program/output_folder.hpp"

namespace tapegrad {

// Into a run's folder (durable, atomic, listed as the run's: program/output_folder.hpp); what parts hold
// now is save_checkpoint(out, relative, snapshot(parts)).
void save_checkpoint(OutputFolder& out, std::string_view relative, const Checkpoint& c);

// Checkpoints of one run in the subfolder `relative` of its OutputFolder: checkpoint-<step>.tgck, each saved
// through the folder (listed as the run's, a user's file of that name refused). Keeping the newest `keep`
// counts only the files this object saved, so another run's checkpoints, or a user's file of that name, are
// never deleted.
class CheckpointDir {
 public:
  CheckpointDir(OutputFolder& out, std::string relative, int keep);
  // The name of the checkpoint of `step`, relative to the run's folder.
  std::string name(std::int64_t step) const;
  // Saves (atomically), then deletes this run's oldest beyond `keep`. Returns the path.
  std::filesystem::path save(const Checkpoint& c, std::int64_t step);
  const std::vector<std::filesystem::path>& saved() const { return saved_; }  // by this run, oldest first

 private:
  OutputFolder* out_;
  std::string relative_;
  int keep_;
  std::vector<std::filesystem::path> saved_;
};

}  // namespace tapegrad
