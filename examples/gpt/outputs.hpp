#pragma once
// The one place the program writes files: its --out folder, owned for the run (FolderLock), and every file
// it puts there.
//
//   report.md                              the table, the pictures, the samples
//   curves.svg, attention_<model>_layer<i>.svg
//   samples_<model>.txt                    what each model sampled (the same text --sample-from prints)
//   <model>.tgck                           each model at the end, with its state of training
//   checkpoints/<model>/checkpoint-<step>.tgck   with --checkpoint-every
//
// <model> is bigram, parameter_free or learnable.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/checkpoint.hpp"

namespace gpt {

class RunFolder {
 public:
  // Takes the folder (made if missing; BusyError while another run holds it) and claims it: a folder
  // holding another run's files is refused (FileError) unless `overwrite`, which removes them first.
  RunFolder(std::filesystem::path dir, bool overwrite);
  const std::filesystem::path& dir() const { return dir_; }

  void write(std::string_view name, std::string_view content);  // a report, a picture, samples
  // <model>.tgck, the model at the end of its training. (Export to safetensors, when the library has it,
  // is written beside it here.)
  std::filesystem::path save_model(std::string_view model, const tapegrad::Checkpoint& checkpoint);
  // checkpoint-<step>.tgck in checkpoints/<model>/, keeping this run's newest `keep`.
  std::filesystem::path save_checkpoint(std::string_view model, const tapegrad::Checkpoint& checkpoint, std::int64_t step,
                                        int keep);
  const std::vector<std::string>& written() const { return written_; }  // names, in order, for the summary

 private:
  std::filesystem::path dir_;
  tapegrad::FolderLock lock_;
  std::vector<std::string> written_;
  std::vector<std::pair<std::string, tapegrad::CheckpointDir>> checkpoints_;
};

}  // namespace gpt
