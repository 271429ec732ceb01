#pragma once
// Files of formats 1 (tapegrad 0.1) and 2 (tapegrad 0.2), read into the structures those releases had and
// then converted, by one function (legacy.cpp: convert), into today's Checkpoint of named parts. Internal to
// the converter (examples/convert/old_checkpoint.hpp). The layouts are frozen: every record here is the
// formats', not the current code's, and so is the reader: the library reads format 3 alone.
//
// Format 2's payload: the tapegrad version, the model's kind and settings, the parameters (name, element
// type, shape, values as f32 or f64), the metadata, and, when the file holds the state of training, the
// optimizer (kind, hyperparameters, schedule and its settings, step, buffers named "<parameter>/<buffer>")
// and the trainer (options, step, data fingerprints, data order, random stream, windows, curve). A loop of
// one's own (2_resumable_loop.cpp of that release) stored its step, stream and data order in the trainer's
// record and marked the file "tapegrad.loop" in the metadata. Format 1 (format1.cpp) maps onto the same.

#include <algorithm>
#include <istream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/string.hpp>

#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/checkpoint/serialize.hpp"

namespace tapegrad::convert::legacy {

// ---- bounded reads -----------------------------------------------------------------------------------
// The library's own (train/checkpoint/serialize.hpp): formats 1 and 2 lay out their size tags, strings,
// shapes and settings as format 3 does, so one reader bounds every count by the bytes left before
// anything is allocated for it, and a corrupt size is a FormatError in every format.
using checkpoint_detail::InArchive;
using checkpoint_detail::kMinSettingBytes;
using checkpoint_detail::kMinStringBytes;
using checkpoint_detail::kSizeTagBytes;
using checkpoint_detail::load;
using checkpoint_detail::load_pairs;
using checkpoint_detail::read_size;

// Flags and numbers outside entries, which format 3 no longer has. A bool is saved as one byte; reading that
// byte straight into a bool would make any other value undefined behaviour, so it is read as a byte and
// checked.
inline bool load_bool(InArchive& ar, std::string_view what) {
  std::uint8_t v = 0;
  ar(v);
  if (v > 1) fail<FormatError>("{} has the byte {}, not a boolean (0 or 1)", what, v);
  return v == 1;
}

inline double load_double(InArchive& ar) {
  double v = 0;
  ar(v);
  return v;
}

inline std::int64_t load_i64(InArchive& ar) {
  std::int64_t v = 0;
  ar(v);
  return v;
}

// A list of numbers, its count bounded by the bytes left (through the library's reader of an entry's list).
template <class N>
std::vector<N> load_numbers(InArchive& ar, std::string_view what) {
  std::vector<N> v;
  load(ar, v, what);
  return v;
}

// ---- the records of formats 1 and 2 ---------------------------------------------------------------------

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
  std::vector<TensorRecord> buffers;  // named "<parameter>/<buffer>"
};

struct TrainingRecord {
  OptimizerRecord optimizer;
  TrainerState trainer;
};

struct File {
  std::uint32_t format_version = 2;
  std::string tapegrad_version;
  ModelRecord model;
  std::vector<TensorRecord> parameters;
  std::map<std::string, std::string> metadata;
  std::optional<TrainingRecord> training;
};

// The metadata key with which format 2 marked a loop's file (its trainer record the loop's, not a Trainer's).
inline constexpr std::string_view kLoopMetadata = "tapegrad.loop";

// The fewest bytes each record takes (a size tag is 8 bytes).
inline constexpr std::size_t kMinShapeBytes = 4 + 3 * 8;  // rank, then batch, rows and cols
inline constexpr std::size_t kMinTensorBytes = 2 * kMinStringBytes + kMinShapeBytes + kSizeTagBytes;
inline constexpr std::size_t kMinNamedValueBytes = kMinStringBytes + 8;
inline constexpr std::size_t kMinMetricWindowBytes = kMinStringBytes + 2 * 8;
inline constexpr std::size_t kMinCurvePointBytes = 3 * 8 + kSizeTagBytes;

template <class Record>
constexpr std::size_t min_record_bytes();
template <>
constexpr std::size_t min_record_bytes<TensorRecord>() {
  return kMinTensorBytes;
}
template <>
constexpr std::size_t min_record_bytes<NamedValue>() {
  return kMinNamedValueBytes;
}
template <>
constexpr std::size_t min_record_bytes<MetricWindow>() {
  return kMinMetricWindowBytes;
}
template <>
constexpr std::size_t min_record_bytes<CurvePoint>() {
  return kMinCurvePointBytes;
}

void load(InArchive& ar, TensorRecord& t);
void load(InArchive& ar, NamedValue& v);
void load(InArchive& ar, MetricWindow& w);
void load(InArchive& ar, CurvePoint& p);

// Containers of records, the same way cereal's vector saves them.
template <class Record>
void load_records(InArchive& ar, std::vector<Record>& out, std::string_view what) {
  out.resize(read_size(ar, min_record_bytes<Record>(), what));
  for (auto& r : out) load(ar, r);
}

// epoch, cursor, order, RNG: the sampler's state, laid out alike in formats 1 and 2.
void load_data_order(InArchive& ar, Sampler::State& s);

// The payloads after their format version.
void load_format1(InArchive& ar, File& f);
void load_format2(InArchive& ar, File& f);

// The payload (after its format version) as today's Checkpoint.
Checkpoint convert(File f);

}  // namespace tapegrad::convert::legacy
