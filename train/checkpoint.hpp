#pragma once
// Checkpoints: one file that holds a model's configuration and weights and, for resuming training, the
// optimizer's state, the trainer's step, curve and data order (with its RNG state).
//
// File layout (all integers little-endian):
//   0   8 bytes  magic "TGCKPT\r\n" (the \r\n catches text-mode mangling, as PNG's signature does)
//   8   u32      format version (kCheckpointFormat)
//   12  u32      flags (0)
//   16  u64      payload length
//   24  u32      CRC-32 of the payload
//   28  payload  a cereal portable-binary archive of the Checkpoint below
// A reader checks magic, version, length and checksum before it decodes a byte of the payload, and
// bounds every size it decodes by the payload's length, so a corrupt file is a clear FormatError, never
// a crash or a huge allocation.
//
// Saving is atomic: a temporary file in the same folder, flushed and fsync'd, renamed over the target,
// then the folder fsync'd; a crash leaves the old file or the new one. Loading is strict by default
// and all-or-nothing: it names every missing, unexpected or mis-shaped entry, and on any error leaves
// the model, the optimizer and the trainer exactly as they were.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tapegrad/train/model.hpp"
#include "tapegrad/train/trainer.hpp"

namespace tapegrad {

inline constexpr std::uint32_t kCheckpointFormat = 1;
// The version of this build of tapegrad: CMake's project(VERSION), the one source of it.
std::string_view tapegrad_version();

// A tensor by name: element type ("f32" or "f64"), shape, values (doubles hold either type exactly).
struct TensorRecord {
  std::string name;
  std::string dtype;
  Shape shape;
  std::vector<double> values;
};

// The state of training besides the weights: what resuming needs.
struct TrainingRecord {
  TrainConfig config;
  std::string optimizer_kind;
  std::map<std::string, double> hyperparameters;
  std::int64_t optimizer_steps = 0;
  std::vector<TensorRecord> buffers;  // named "<parameter>/<buffer>", e.g. "attn.wq/exp_avg"
  TrainerState trainer;
};

struct Checkpoint {
  std::uint32_t format_version = kCheckpointFormat;
  std::string tapegrad_version = std::string(tapegrad::tapegrad_version());
  ModelConfig model;
  std::vector<TensorRecord> parameters;  // in the model's order
  // Where the data came from ("task", "data", "eval_data", "seed"...) and "data.fingerprint", a
  // CRC-32 of the training examples, which resuming checks.
  std::map<std::string, std::string> metadata;
  std::optional<TrainingRecord> training;  // empty in a weights-only file
};

// ---- bytes and files --------------------------------------------------------------------------------

std::vector<std::byte> encode_checkpoint(const Checkpoint& c);
// FormatError naming `source` (a file name) for anything that is not a valid checkpoint.
Checkpoint decode_checkpoint(std::span<const std::byte> bytes, std::string_view source);

void save_checkpoint(const std::filesystem::path& path, const Checkpoint& c);  // atomic
Checkpoint read_checkpoint(const std::filesystem::path& path);

// The whole checkpoint as JSON (cereal's JSON archive), for people to read.
std::string checkpoint_json(const Checkpoint& c);
// A summary: configuration, parameter names, shapes and norms, the optimizer state, the step.
std::string describe_checkpoint(const Checkpoint& c);

// ---- building and applying --------------------------------------------------------------------------

template <class T>
Checkpoint snapshot(const ToyModel<T>& model);  // weights only
Checkpoint snapshot(Trainer& trainer);          // weights and the state of training

struct LoadOptions {
  bool strict = true;  // false: load the parameters whose name and shape match, report the rest
};

struct LoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string> missing;     // in the model, not in the file
  std::vector<std::string> unexpected;  // in the file, not in the model
  std::vector<std::string> mismatched;  // in both, with another shape or element type ("... in the file but ...")
  bool training_state = false;          // optimizer, data order, step and curve restored
  std::string str() const;
};

// Weights into an existing model. Strict: every name must be there with its shape and element type,
// or a FormatError lists every problem and nothing is loaded.
template <class T>
LoadReport load_weights(const Checkpoint& c, Module<T>& model, LoadOptions options = {});
// Everything into a trainer (always strict): weights, optimizer state, step, curve, data order. The
// trainer's data must be the data the checkpoint was trained on (its fingerprint is checked).
LoadReport load_training(const Checkpoint& c, Trainer& trainer);
// A fresh model built from the checkpoint's configuration, with its weights: for inference.
std::unique_ptr<ToyModel<float>> model_from_checkpoint(const Checkpoint& c);

// A CRC-32 of a dataset's tokens and labels.
std::uint32_t fingerprint(const Dataset& data);
// A CRC-32 of a tensor's shape and raw bytes: two tensors with equal checksums are, with near
// certainty, bit-identical (to compare predictions without keeping them).
template <class T>
std::uint32_t checksum(const TensorT<T>& t);

// Checkpoints of one run in a folder: checkpoint-<step>.tgck, keeping the newest `keep`.
class CheckpointDir {
 public:
  CheckpointDir(std::filesystem::path dir, int keep);
  std::filesystem::path save(const Checkpoint& c, std::int64_t step);  // then deletes the oldest beyond keep
  std::vector<std::filesystem::path> list() const;  // oldest first
  std::optional<std::filesystem::path> latest() const;

 private:
  std::filesystem::path dir_;
  int keep_;
};

}  // namespace tapegrad
