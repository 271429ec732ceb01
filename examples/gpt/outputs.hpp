#pragma once
// The one place the program writes files: its --out folder, owned for the run through the library's
// OutputFolder (train/program/output_folder.hpp: the lock, the manifest of this program's files,
// --overwrite removing only those, every file proven writable before any training), and every file it
// puts there.
//
//   report.md                              the table, the pictures, the samples
//   curves.svg, attention_<model>_layer<i>.svg
//   samples_<model>.txt                    what each model sampled (the same text --sample-from prints)
//   <model>.tgck                           each model at the end, with its state of training
//   <model>.safetensors                    its weights: the learnable model in PyTorch's names and layouts
//                                          (docs/safetensors.md); the parameter-free one, which no PyTorch
//                                          module computes, in tapegrad's
//   checkpoints/<model>/checkpoint-<step>.tgck   with --checkpoint-every
//
// <model> is parameter_free or learnable (and bigram, for its samples).

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tapegrad/layers/module.hpp"
#include "tapegrad/train/program/checkpoint_dir.hpp"
#include "tapegrad/train/program/output_folder.hpp"
#include "tapegrad/train/checkpoint/safetensors.hpp"

namespace gpt {

struct FolderPlan {
  bool overwrite = false;
  bool resume = false;                       // a resumed run may replace its own files
  std::vector<std::filesystem::path> inputs;  // the data: never removed
  std::vector<std::string> models;           // file names of the models it will train
  std::vector<std::string> pictures;         // attention_<model>_layer<i>.svg
  tapegrad::Index last_step = 0;             // the longest checkpoint name it will write
  bool checkpoints = false;                  // --checkpoint-every
};

class RunFolder {
 public:
  RunFolder(std::filesystem::path dir, const FolderPlan& plan);
  const std::filesystem::path& dir() const { return out_.folder(); }

  void write(std::string_view name, std::string_view content);  // a report, a picture, samples
  // <model>.tgck, the model at the end of its training, and <model>.safetensors, its weights for PyTorch.
  std::filesystem::path save_model(std::string_view model, const tapegrad::Checkpoint& checkpoint,
                                   const tapegrad::Module<float>& weights, tapegrad::WeightLayout layout);
  // checkpoint-<step>.tgck in checkpoints/<model>/, keeping this run's newest `keep`.
  std::filesystem::path save_checkpoint(std::string_view model, const tapegrad::Checkpoint& checkpoint, std::int64_t step,
                                        int keep);
  const std::vector<std::string>& written() const { return written_; }  // names, in order, for the summary

 private:
  tapegrad::OutputFolder out_;
  std::vector<std::string> written_;
  std::vector<std::pair<std::string, tapegrad::CheckpointDir>> checkpoints_;
};

}  // namespace gpt
