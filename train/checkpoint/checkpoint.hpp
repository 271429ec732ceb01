#pragma once
// Checkpoints, for any run: one file that holds the model's record (its kind and configuration, the model's
// own settings) and named state entries that each part of the run contributes (state.hpp: the model's
// weights, an optimizer's state, random streams, a data sampler, a Trainer's state, a user's own objects),
// with the program's metadata.
//
// File layout (all integers little-endian):
//   0   8 bytes  magic "TGCKPT\r\n" (the \r\n catches text-mode mangling, as PNG's signature does)
//   8   u32      format version (kCheckpointFormat; formats 1 and 2 are tapegrad 0.1's and 0.2's, refused)
//   12  u32      flags (0)
//   16  u64      payload length
//   24  u32      CRC-32 of the payload
//   28  payload  a cereal portable-binary archive of the Checkpoint below (serialize.hpp)
// A reader checks magic, version, length and checksum before it decodes a byte of the payload, and
// bounds every size it decodes by the payload's length, so a corrupt file is a clear FormatError, never
// a crash or a huge allocation. A file of format 1 or 2 is refused in one line naming the program that
// converts it (build/examples/convert_checkpoint OLD NEW: examples/convert, the one converter).
//
// Saving is atomic: a temporary file in the same folder, flushed and fsync'd, renamed over the target,
// then the folder fsync'd; a crash leaves the old file or the new one. Loading is strict and all-or-nothing:
// it names every missing, unexpected or mismatched entry, and on any error leaves every part as it was.
//
//   const StateParts parts = {{"model", model}, {"optimizer", adam}, {"noise", noise}, {"step", step}};
//   save_checkpoint("loop.tgck", snapshot(parts));
//   restore(read_checkpoint("loop.tgck"), parts);                // strict, all or nothing
//   save_checkpoint("run.tgck", snapshot(trainer));             // the model, the optimizer and the trainer's own
//   restore(read_checkpoint("run.tgck"), trainer);               // strict, all or nothing
//   auto model = model_from_checkpoint<Mlp>(read_checkpoint("model.tgck"));  // rebuilt from its record
//   load_weights(checkpoint, other_model, {.strict = false});     // the matching subset, with a report

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tapegrad/core/hooks.hpp"
#include "tapegrad/core/tensor_budget.hpp"
#include "tapegrad/layers/module.hpp"
#include "tapegrad/train/checkpoint/state.hpp"
#include "tapegrad/train/optimizer.hpp"
#include "tapegrad/train/trainer.hpp"

namespace tapegrad {

inline constexpr std::uint32_t kCheckpointFormat = 3;
// The version of this build of tapegrad: CMake's project(VERSION), the one source of it.
std::string_view tapegrad_version();

// The part names programs share, here and nowhere else. A run's model is saved as kModelPart: its record is
// the file's, and load_weights, model_from_checkpoint and `inspect` read its weights. A Trainer's run
// (snapshot(trainer)) adds its optimizer as kOptimizerPart and its own state as kTrainerPart, which `inspect`
// describes and read_optimizer_state / read_trainer_state read by default. Other parts are the program's.
inline constexpr std::string_view kModelPart = "model";
inline constexpr std::string_view kOptimizerPart = "optimizer";
inline constexpr std::string_view kTrainerPart = "trainer";

struct Checkpoint {
  std::string tapegrad_version = std::string(tapegrad::tapegrad_version());
  ModelRecord model;                            // the kind and configuration of the part "model" (empty: not described)
  std::vector<StateEntry> entries;              // every part's, in the order the parts saved them
  std::map<std::string, std::string> metadata;  // the program's own: where the data came from, ...

  // The parts the entries belong to ("model" for "model.attn.wq"), in order of first appearance.
  std::vector<std::string> parts() const;
  bool has(std::string_view part) const;
  // The entry of this full name, or nullptr.
  const StateEntry* find(std::string_view name) const;
  StateEntry* find(std::string_view name);
};

// The invariants every checkpoint holds, whoever made it: the decoder of a file, or a program that filled a
// Checkpoint's public fields. Unique entry names, none empty and none of an empty part ("", ".x"), unique
// settings of the model. FormatError starting "checkpoint: " and naming the first that breaks one. The
// decoder and every load (restore, load_weights, model_config_from, model_from_checkpoint) check them first.
// Each part's entries are checked by what loads them (state.hpp); non-finite values are not refused here
// (inspect shows such a file); loading refuses them (LoadOptions::allow_non_finite).
void check_checkpoint(const Checkpoint& c);

// ---- bytes and files --------------------------------------------------------------------------------

std::vector<std::byte> encode_checkpoint(const Checkpoint& c);
// FormatError naming `source` (a file name) for anything that is not a valid checkpoint of format 3 (one of
// format 1 or 2 names the command that converts it).
Checkpoint decode_checkpoint(std::span<const std::byte> bytes, std::string_view source);

// The largest checkpoint read_checkpoint takes by default (a larger one is a LimitError, before it is read).
inline constexpr std::size_t kMaxCheckpointBytes = std::size_t{4} << 30;  // 4 GiB

void save_checkpoint(const std::filesystem::path& path, const Checkpoint& c);  // atomic; IoError naming the reason
// FileError for a file that cannot be opened or is not a regular file (a folder, a device, a pipe), LimitError
// for one over max_bytes, FormatError for anything that is not a valid checkpoint.
Checkpoint read_checkpoint(const std::filesystem::path& path, std::size_t max_bytes = kMaxCheckpointBytes);

// The whole checkpoint as JSON (cereal's JSON archive), for people to read.
std::string checkpoint_json(const Checkpoint& c);
// A summary of what the file holds: the model's record, its weights' count and checksum, the metadata, the
// optimizer in a line, then every part's entries, the model's too (name, kind and size, a few values or a
// tensor's norm).
std::string describe_checkpoint(const Checkpoint& c);

// ---- saving and restoring parts ---------------------------------------------------------------------

using StateParts = std::vector<StatePart>;

// What the parts hold now (state.hpp), each under its name; the part "model", when it is a Module, gives the
// file its model record. NameError for a part name that is empty, has a '.' or is given twice.
Checkpoint snapshot(const StateParts& parts);
// A model's weights and record: snapshot({{"model", model}}).
template <class T>
Checkpoint snapshot(const Module<T>& model) {
  return snapshot({{std::string(kModelPart), model}});
}
// A Trainer's run: snapshot({{"model", model}, {"optimizer", optimizer}, {"trainer", trainer}}), the last
// the trainer's own state (step, data order, random stream, windows, curve, options, data fingerprints).
Checkpoint snapshot(const TrainerBase& trainer);

struct LoadOptions {
  bool strict = true;  // load_weights: false loads the parameters whose name and shape match and reports the
                       // rest; restore: false leaves the file's parts that no part given takes
  // A weight (or optimizer buffer, or a user's tensor) that holds NaN or Inf is refused, naming it, unless this
  // is set: a model that diverged is rarely what a program means to load.
  bool allow_non_finite = false;
  // A weight stored with another element type than the model's (a float model's file into its double
  // twin, to gradcheck what training made) is a mismatch unless this is set; then it is converted, f32 to
  // f64 exactly and f64 to f32 rounded to nearest, and LoadReport::converted names it.
  bool convert_dtype = false;
};

struct LoadReport {
  std::vector<std::string> loaded;      // load_weights: the parameters loaded
  std::vector<std::string> missing;     // in the model, not in the file
  std::vector<std::string> unexpected;  // in the file, not in the model (restore: parts no part given takes)
  std::vector<std::string> mismatched;  // in both, with another shape or element type ("... in the file but ...")
  std::vector<std::string> converted;   // loaded from another element type ("'w' from f32 to f64"; safetensors:
                                        // "'w' from F16 to F32")
  std::vector<std::string> restored;    // restore: the parts loaded, in order
  std::string str() const;
  bool clean() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  // What keeps a strict load from loading: "the file lacks the model's 'a'; the model has no 'b'; ...", of the
  // model or of another `holder` of the entries (restore of a user's object: "the part").
  std::string problems(std::string_view holder = "the model") const;
};

// Every part back from the checkpoint, strictly and all or nothing: each part given must be in the file, each
// part of the file must be given (unless options.strict is false), the part "model" must have the file's
// model record, and every tensor must be finite (as the part's element type) unless the options allow it.
// Then every part loads through its load_state; if a check or any load refused, every part loads back what
// it held (state.hpp), and one FormatError "load: ...; nothing was loaded" names every problem.
LoadReport restore(const Checkpoint& c, const StateParts& parts, LoadOptions options = {});
// A Trainer's run: its model, optimizer and own state, as snapshot(trainer) saved them ("resume: ..." when
// it refuses). A data-parallel group compares the restored state before it goes on.
LoadReport restore(const Checkpoint& c, TrainerBase& trainer, LoadOptions options = {});
// restore's refusal of a file that lacks a part, for a program that reads the parts before it builds what
// restores them (train --resume): "the file has no 'trainer' (it holds 'model', 'step')"; "" for none.
std::string missing_parts(const Checkpoint& c, const std::vector<std::string>& names);

// Weights into an existing model. Strict: every name must be there with its shape and element type
// (or, with convert_dtype, another element type), or a FormatError lists every problem and nothing is loaded.
// The file's other parts are left alone.
//   load_weights(read_checkpoint("model.tgck"), double_twin, {.convert_dtype = true});  // f32 -> f64
template <class T>
LoadReport load_weights(const Checkpoint& c, Module<T>& model, LoadOptions options = {});

// A part read back as the state of a library object, without an object to load it into: what a program
// reads to rebuild its objects (the optimizer of the kind and hyperparameters the file names, the trainer's
// options and step). FormatError naming what is missing or malformed.
template <class T>
OptimizerState<T> read_optimizer_state(const Checkpoint& c, std::string_view part = kOptimizerPart);
TrainerState read_trainer_state(const Checkpoint& c, std::string_view part = kTrainerPart);

// The configuration of a model of type M from the checkpoint's record (M as for model_from_checkpoint):
// FormatError if the record is of another kind, a setting is missing, unknown or invalid, the
// configuration does not fit together (M::check_config, when M has it), or it implies other parameters
// than the file holds. To know the last for any M, it builds the model once, within the budget below,
// and drops it (a model with the hook CountsParametersOf, below, is not built).
template <class M>
typename M::Config model_config_from(const Checkpoint& c);

// A model rebuilt from the checkpoint's record and loaded with its weights (load_weights with `options`),
// for inference or to go on; model_from_checkpoint<Mlp<double>>(c, {.convert_dtype = true}) rebuilds a
// float model's file as its double twin.
// M needs `static constexpr std::string_view kind`, a `Config` with fields() (core/settings.hpp), and a
// constructor from it. It is built within a TensorBudget of what the file's parameters take (three times,
// for values, gradients and a model's own buffers, plus kBuildSlackBytes), so a configuration forged to
// ask for more than the file holds is a LimitError before the memory is taken, whatever M is; then its
// parameter count must equal the file's. Its optional hooks (core/hooks.hpp: declared, then exactly so):
// CountsParametersOf lets the count be compared before anything is built, ChecksConfig names what does not
// fit together, CompletesSettings fills in, for older files, the settings a configuration grew.
template <class M>
std::unique_ptr<M> model_from_checkpoint(const Checkpoint& c, LoadOptions options = {});

inline constexpr std::size_t kBuildSlackBytes = std::size_t{64} << 20;

// A CRC-32 of a tensor's shape and raw bytes: two tensors with equal checksums are, with near
// certainty, bit-identical (to compare predictions without keeping them).
template <class T>
std::uint32_t checksum(const TensorT<T>& t);
// The CRC-32 of every weight of the part "model" as float64 bytes, in the file's order: what `inspect`
// prints (the same number for the same weights in every format).
std::uint32_t weights_crc32(const Checkpoint& c);

// model_from_checkpoint's optional hooks, each a concept (core/hooks.hpp): a model that declares a member
// of the hook's name declares it with the hook's signature, or compilation stops naming the hook.
template <class M>
concept ChecksConfig = (requires { &M::check_config; }) &&
                       hook_signature<"static void check_config(const Config&)", decltype(&M::check_config),
                                      void (*)(const typename M::Config&)>();
template <class M>
concept CountsParametersOf = (requires { &M::count_parameters_of; }) &&
                             hook_signature<"static Index count_parameters_of(const Config&)",
                                            decltype(&M::count_parameters_of), Index (*)(const typename M::Config&)>();
template <class M>
concept CompletesSettings = (requires { &M::Config::complete_settings; }) &&
                            hook_signature<"static void complete_settings(Settings&)",
                                           decltype(&M::Config::complete_settings), void (*)(Settings&)>();

// ---- model_from_checkpoint --------------------------------------------------------------------------

namespace detail {
// What restore and model_from_checkpoint refuse in the file's model record, "" when it is the model's: "the
// file holds a model of kind 'x' but this one is of kind 'y'"; "setting 'residual' is true in the file but
// false in the model; ..." for two records of one kind.
std::string record_differences(const ModelRecord& file, const ModelRecord& model);
// FormatError unless a model of `count` parameter values is what the file holds.
void check_count(const Checkpoint& c, Index count);
// build() within a TensorBudget of what the file's parameters take (see model_from_checkpoint); a size no
// vector can hold is a LimitError too.
void build_within_budget(const Checkpoint& c, const std::function<void()>& build);

// The configuration alone: settings parsed strictly, check_config, the implied count.
template <class M>
typename M::Config config_of(const Checkpoint& c) {
  check_checkpoint(c);
  if (c.model.kind != M::kind)  // the kind alone: the settings are parsed below
    fail<FormatError>("load: {}: {}", kModelPart, record_differences(c.model, {std::string(M::kind), {}}));
  Settings settings = c.model.config;
  // A configuration that grew fields may fill in, for files written before, the values they implied.
  if constexpr (CompletesSettings<M>) M::Config::complete_settings(settings);
  return file_settings([&] {
    auto config =
        from_settings<typename M::Config>(settings, fmt::format("load: the model's configuration ({})", M::kind));
    if constexpr (ChecksConfig<M>) M::check_config(config);
    if constexpr (CountsParametersOf<M>) check_count(c, M::count_parameters_of(config));
    return config;
  });
}

// The model built within the checkpoint's budget, its parameter count checked against the file's.
template <class M>
std::unique_ptr<M> build_within(const Checkpoint& c, const typename M::Config& config) {
  std::unique_ptr<M> model;
  build_within_budget(c, [&] { model = std::make_unique<M>(config); });
  check_count(c, model->count_parameters());
  return model;
}
}  // namespace detail

template <class M>
typename M::Config model_config_from(const Checkpoint& c) {
  typename M::Config config = detail::config_of<M>(c);
  if constexpr (!CountsParametersOf<M>) (void)detail::build_within<M>(c, config);
  return config;
}

template <class M>
std::unique_ptr<M> model_from_checkpoint(const Checkpoint& c, LoadOptions options) {
  auto model = detail::build_within<M>(c, detail::config_of<M>(c));
  load_weights(c, *model, options);
  return model;
}

}  // namespace tapegrad
