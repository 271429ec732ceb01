#pragma once
// A run's checkpoints in its output folder: checkpoint-<step>.tgck, the newest N kept. Program support
// (tapegrad::program): the library saves and loads checkpoints (train/checkpoint/checkpoint.hpp); where a
// program keeps them, and which it deletes, is the program's.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/program/output_folder.hpp"

namespace tapegrad {

// Into a run's folder (durable, atomic, listed as the run's: program/output_folder.hpp); what parts hold
// now is save_checkpoint(out, relative, snapshot(parts)).
void save_checkpoint(OutputFolder& out, std::string_view relative, const Checkpoint& c);

// Checkpoints of one run in a folder: checkpoint-<step>.tgck. Keeping the newest `keep` counts only the
// files this object saved, so another run's checkpoints, or a user's file of that name, are never deleted.
// Given the run's OutputFolder, it saves into its subfolder `relative` through it (each file listed as the
// run's, a user's file of that name refused); given a path, it only lists what is there (and saves
// without a manifest, for a program that keeps none).
class CheckpointDir {
 public:
  CheckpointDir(std::filesystem::path dir, int keep);
  CheckpointDir(OutputFolder& out, std::string relative, int keep);
  // The name of the checkpoint of `step`, relative to the run's folder when there is one.
  std::string name(std::int64_t step) const;
  // Saves (atomically), then deletes this run's oldest beyond `keep`. Returns the path.
  std::filesystem::path save(const Checkpoint& c, std::int64_t step);
  // Every checkpoint-<step>.tgck in the folder, whoever wrote it, oldest step first; names whose step is
  // not a number that fits are left out.
  std::vector<std::filesystem::path> list() const;
  std::optional<std::filesystem::path> latest() const;
  const std::vector<std::filesystem::path>& saved() const { return saved_; }  // by this run, oldest first

 private:
  std::filesystem::path dir_;
  int keep_;
  std::vector<std::filesystem::path> saved_;
  OutputFolder* out_ = nullptr;
  std::string relative_;
};

}  // namespace tapegrad
