#pragma once
// Checkpoints, for any model: one file that holds a model's record (its kind and configuration, the
// model's own settings) and its weights by name and, for resuming training, the optimizer's state (its
// hyperparameters, schedule, step and buffers by parameter name) and the trainer's (options, step,
// data order, random stream, windows, curve).
//
// File layout (all integers little-endian):
//   0   8 bytes  magic "TGCKPT\r\n" (the \r\n catches text-mode mangling, as PNG's signature does)
//   8   u32      format version (kCheckpointFormat; format 1, written by tapegrad 0.1, still reads)
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
//
//   save_checkpoint("run.tgck", snapshot(trainer));               // weights + optimizer + trainer
//   load_training(read_checkpoint("run.tgck"), trainer);          // strict, all or nothing
//   save_checkpoint("loop.tgck", snapshot(model, optimizer, {.step = step, .rng = rng.state()}));  // a hand loop's
//   LoopState at = load_loop(read_checkpoint("loop.tgck"), model, optimizer);                   // ... back
//   auto model = model_from_checkpoint<Mlp>(read_checkpoint("model.tgck"));  // rebuilt from its record
//   load_weights(checkpoint, other_model, {.strict = false});     // the matching subset, with a report

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "tapegrad/core/tensor_budget.hpp"
#include "tapegrad/layers/module.hpp"
#include "tapegrad/train/optimizer.hpp"
#include "tapegrad/train/trainer.hpp"

namespace tapegrad {

inline constexpr std::uint32_t kCheckpointFormat = 2;
// The version of this build of tapegrad: CMake's project(VERSION), the one source of it.
std::string_view tapegrad_version();

// A tensor by name: element type ("f32" or "f64"), shape, values (doubles hold either type exactly).
struct TensorRecord {
  std::string name;
  std::string dtype;
  Shape shape;
  std::vector<double> values;
};

struct OptimizerRecord {
  std::string kind;
  Settings hyperparameters;
  ScheduleRecord schedule;
  std::int64_t step = 0;
  std::vector<TensorRecord> buffers;  // named "<parameter>/<buffer>", e.g. "attn.wq/exp_avg"
};

// The state of training besides the weights: what resuming needs.
struct TrainingRecord {
  OptimizerRecord optimizer;
  TrainerState trainer;
};

struct Checkpoint {
  std::uint32_t format_version = kCheckpointFormat;  // of the file it was read from
  std::string tapegrad_version = std::string(tapegrad::tapegrad_version());
  ModelRecord model;                      // the model's kind and configuration (empty: not described)
  std::vector<TensorRecord> parameters;   // in the model's order
  std::map<std::string, std::string> metadata;  // the program's own: where the data came from, ...
  std::optional<TrainingRecord> training;       // empty in a weights-only file
};

// The invariants every checkpoint holds, whoever made it: the decoder of a file, or a program that filled
// a Checkpoint's public fields. Unique names (parameters, optimizer buffers, the settings of the model, the
// optimizer and the schedule), known element types, valid shapes, each record's value count equal to its
// shape's size, buffers named "<parameter>/<buffer>", counters in range (0 <= step <= the run's steps <=
// TrainOptions::kMaxSteps, windows and curve within the steps taken, the data order's position within it).
// FormatError starting "checkpoint: " and naming the first record that breaks one. The decoder and every
// load (load_weights, load_training, model_config_from, model_from_checkpoint) check them first, so no
// caller can reach a copy past a buffer's end or a name that means two things. Non-finite values are not
// refused here (inspect shows such a file); loading refuses them (LoadOptions::allow_non_finite).
void check_checkpoint(const Checkpoint& c);

// ---- bytes and files --------------------------------------------------------------------------------

std::vector<std::byte> encode_checkpoint(const Checkpoint& c);
// FormatError naming `source` (a file name) for anything that is not a valid checkpoint. Files of
// format 1 are read into the same structure.
Checkpoint decode_checkpoint(std::span<const std::byte> bytes, std::string_view source);

// The largest checkpoint read_checkpoint takes by default (a larger one is a LimitError, before it is read).
inline constexpr std::size_t kMaxCheckpointBytes = std::size_t{4} << 30;  // 4 GiB

void save_checkpoint(const std::filesystem::path& path, const Checkpoint& c);  // atomic; IoError naming the reason
// FileError for a file that cannot be opened or is not a regular file (a folder, a device, a pipe), LimitError
// for one over max_bytes, FormatError for anything that is not a valid checkpoint.
Checkpoint read_checkpoint(const std::filesystem::path& path, std::size_t max_bytes = kMaxCheckpointBytes);

// The whole checkpoint as JSON (cereal's JSON archive), for people to read.
std::string checkpoint_json(const Checkpoint& c);
// A summary of what the file holds: the model's record, parameter names, shapes and norms, the
// optimizer, the trainer's state.
std::string describe_checkpoint(const Checkpoint& c);

// ---- building and applying --------------------------------------------------------------------------

// What a training loop of one's own (a tape, forward, backward, optimizer.step():
// examples/first_steps/1_minimal_loop.cpp) needs besides its weights and optimizer to go on exactly where it
// stopped: the step it is at and, when it has them, its random stream (Rng::state()) and the order it draws
// its data in (Sampler::state()).
struct LoopState {
  Index step = 0;
  Rng::State rng = {};
  Sampler::State data_order = {};
};
// The metadata key a loop's checkpoint carries (its trainer record is the loop's, not a Trainer's).
inline constexpr std::string_view kLoopMetadata = "tapegrad.loop";

template <class T>
Checkpoint snapshot(const Module<T>& model);       // weights and the model's record
Checkpoint snapshot(const TrainerBase& trainer);   // and the state of training
// A hand-written loop's checkpoint, without a Trainer: weights, the optimizer's state (kind,
// hyperparameters, schedule, step, buffers) and the loop's. ValueError for a step outside [0, 1e12].
template <class T>
Checkpoint snapshot(const Module<T>& model, const Optimizer<T>& optimizer, const LoopState& loop);

struct LoadOptions {
  bool strict = true;  // false: load the parameters whose name and shape match, report the rest
  // A weight (or optimizer buffer) that holds NaN or Inf is refused, naming it, unless this is set: a model
  // that diverged is rarely what a program means to load.
  bool allow_non_finite = false;
  // A weight stored with another element type than the model's (a float model's file into its double
  // twin, to gradcheck what training made) is a mismatch unless this is set; then it is converted, f32 to
  // f64 exactly and f64 to f32 rounded to nearest, and LoadReport::converted names it.
  bool convert_dtype = false;
};

struct LoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string> missing;     // in the model, not in the file
  std::vector<std::string> unexpected;  // in the file, not in the model
  std::vector<std::string> mismatched;  // in both, with another shape or element type ("... in the file but ...")
  std::vector<std::string> converted;   // loaded from another element type ("'w' from f32 to f64"; safetensors:
                                        // "'w' from F16 to F32")
  bool training_state = false;          // optimizer, data order, step and curve restored
  std::string str() const;
  bool clean() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  // What keeps a strict load from loading: "the file lacks the model's 'a'; the model has no 'b'; ...".
  std::string problems() const;
};

// Weights into an existing model. Strict: every name must be there with its shape and element type
// (or, with convert_dtype, another element type), or a FormatError lists every problem and nothing is loaded.
//   load_weights(read_checkpoint("model.tgck"), double_twin, {.convert_dtype = true});  // f32 -> f64
template <class T>
LoadReport load_weights(const Checkpoint& c, Module<T>& model, LoadOptions options = {});
// Everything into a trainer (always strict): the model's record must be the trainer's model's, then
// weights, optimizer state (its kind and schedule must be the trainer's optimizer's), step, data order
// (the trainer's data must be the data the checkpoint was trained on: its fingerprint is checked),
// random stream, windows and curve. Nothing changes unless everything fits.
LoadReport load_training(const Checkpoint& c, TrainerBase& trainer, LoadOptions options = {});
// A hand loop's checkpoint (or a Trainer's: its step, stream and data order) back into a model and an
// optimizer, always strict and all or nothing as load_training: the model's record and every weight, the
// optimizer's kind, schedule and buffers, finite values; FormatError or the optimizer's error naming what
// does not fit, and neither changes. Returns the loop's state, for the loop to set its step, stream
// (Rng::set_state) and data order (Sampler::set_state).
template <class T>
LoopState load_loop(const Checkpoint& c, Module<T>& model, Optimizer<T>& optimizer, LoadOptions options = {});

// The configuration of a model of type M from the checkpoint's record (M as for model_from_checkpoint):
// FormatError if the record is of another kind, a setting is missing, unknown or invalid, the
// configuration does not fit together (M::check_config, when M has it), or it implies other parameters
// than the file holds. To know the last for any M, it builds the model once, within the budget below,
// and drops it (a model that declares `static Index count_parameters(const Config&)` is not built).
template <class M>
typename M::Config model_config_from(const Checkpoint& c);

// A model rebuilt from the checkpoint's record and loaded with its weights (load_weights with `options`),
// for inference or to go on; model_from_checkpoint<Mlp<double>>(c, {.convert_dtype = true}) rebuilds a
// float model's file as its double twin.
// M needs `static constexpr std::string_view kind`, a `Config` with fields() (core/settings.hpp), and a
// constructor from it. It is built within a TensorBudget of what the file's parameters take (three times,
// for values, gradients and a model's own buffers, plus kBuildSlackBytes), so a configuration forged to
// ask for more than the file holds is a LimitError before the memory is taken, whatever M is; then its
// parameter count must equal the file's. `static Index count_parameters(const Config&)` (optional: a model
// with one says `using Module<T>::count_parameters;` too) lets the count be compared before anything is
// built; `static void check_config(const Config&)`
// (optional) names what does not fit together.
template <class M>
std::unique_ptr<M> model_from_checkpoint(const Checkpoint& c, LoadOptions options = {});

inline constexpr std::size_t kBuildSlackBytes = std::size_t{64} << 20;

// A CRC-32 of a tensor's shape and raw bytes: two tensors with equal checksums are, with near
// certainty, bit-identical (to compare predictions without keeping them).
template <class T>
std::uint32_t checksum(const TensorT<T>& t);
// The CRC-32 of every parameter value as float64 bytes, in the file's order: what `inspect` prints.
std::uint32_t weights_crc32(const Checkpoint& c);

// ---- model_from_checkpoint --------------------------------------------------------------------------

namespace detail {
// FormatError unless the file's record is of `kind`; the configuration's settings otherwise.
const Settings& model_config_of(const Checkpoint& c, std::string_view kind);
Index parameter_values_held(const Checkpoint& c);
[[noreturn]] void refuse_implied_count(const ModelRecord& record, Index implied, Index held);
// The budget of building the model a checkpoint describes (see model_from_checkpoint).
std::size_t build_budget_bytes(const Checkpoint& c);
std::string build_description(const Checkpoint& c);  // "load: building <kind> (<settings>) from the file"
[[noreturn]] void refuse_build(const Checkpoint& c);   // LimitError: a tensor larger than memory can address

// The configuration alone: settings parsed strictly, check_config, the implied count.
template <class M>
typename M::Config config_of(const Checkpoint& c) {
  check_checkpoint(c);
  Settings settings = model_config_of(c, M::kind);
  // A configuration that grew fields may fill in, for files written before, the values they implied.
  if constexpr (requires(Settings& s) { M::Config::complete_settings(s); }) M::Config::complete_settings(settings);
  typename M::Config config;
  try {
    config = from_settings<typename M::Config>(settings, fmt::format("load: the model's configuration ({})", M::kind));
    if constexpr (requires { M::check_config(config); }) M::check_config(config);
  } catch (const Error& e) {
    throw FormatError(e.what());
  }
  if constexpr (requires { { M::count_parameters(config) } -> std::convertible_to<Index>; }) {
    const Index implied = M::count_parameters(config), held = parameter_values_held(c);  // check_config passed
    if (implied != held) refuse_implied_count(c.model, implied, held);
  }
  return config;
}

// The model built within the checkpoint's budget, its parameter count checked against the file's.
template <class M>
std::unique_ptr<M> build_within(const Checkpoint& c, const typename M::Config& config) {
  std::unique_ptr<M> model;
  try {
    const TensorBudget budget(build_budget_bytes(c), build_description(c));
    model = std::make_unique<M>(config);
  } catch (const std::length_error&) {  // a size no vector can hold: refused before any budget is asked
    refuse_build(c);
  }
  const Index built = model->count_parameters(), held = parameter_values_held(c);
  if (built != held) refuse_implied_count(c.model, built, held);
  return model;
}
}  // namespace detail

template <class M>
typename M::Config model_config_from(const Checkpoint& c) {
  typename M::Config config = detail::config_of<M>(c);
  if constexpr (!requires { M::count_parameters(std::declval<const typename M::Config&>()); })
    (void)detail::build_within<M>(c, config);
  return config;
}

template <class M>
std::unique_ptr<M> model_from_checkpoint(const Checkpoint& c, LoadOptions options) {
  auto model = detail::build_within<M>(c, detail::config_of<M>(c));
  load_weights(c, *model, options);
  return model;
}

}  // namespace tapegrad
