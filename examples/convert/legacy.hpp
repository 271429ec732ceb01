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

namespace tapegrad::convert::legacy {

// ---- bounded reads -----------------------------------------------------------------------------------
// The portable binary archive of the payload, which knows the payload's length: every count decoded is
// bounded by the bytes left before anything is allocated for it, so a corrupt size is a FormatError.
class InArchive : public cereal::PortableBinaryInputArchive {
 public:
  InArchive(std::istream& in, std::size_t payload_bytes)
      : cereal::PortableBinaryInputArchive(in), in_(in), payload_bytes_(payload_bytes) {}
  std::size_t bytes_left() const {
    const auto at = in_.tellg();
    return at < 0 ? 0 : payload_bytes_ - std::min(payload_bytes_, static_cast<std::size_t>(at));
  }

 private:
  std::istream& in_;
  std::size_t payload_bytes_;
};

// The fewest bytes a record takes (cereal's size tags are 8 bytes).
inline constexpr std::size_t kSizeTagBytes = 8;
inline constexpr std::size_t kMinStringBytes = kSizeTagBytes;
inline constexpr std::size_t kMinShapeBytes = 4 + 3 * 8;
inline constexpr std::size_t kMinSettingBytes = 2 * kMinStringBytes;

std::size_t read_size(InArchive& ar, std::size_t min_element_bytes, std::string_view what);
void load(InArchive& ar, std::string& s);
bool load_bool(InArchive& ar, std::string_view what);  // a byte, 0 or 1: any other is refused
std::int64_t load_i64(InArchive& ar);
double load_double(InArchive& ar);
void load(InArchive& ar, Shape& s);
void load_settings(InArchive& ar, Settings& out, std::string_view what);

template <class N>
void load_numbers(InArchive& ar, std::vector<N>& v, std::string_view what) {
  v.resize(read_size(ar, sizeof(N), what));
  ar(cereal::binary_data(v.data(), v.size() * sizeof(N)));
}

template <class Value>
void load_map(InArchive& ar, std::map<std::string, Value>& out, std::string_view what) {
  out.clear();
  const std::size_t n =
      read_size(ar, kMinStringBytes + (std::is_same_v<Value, std::string> ? kMinStringBytes : sizeof(Value)), what);
  for (std::size_t i = 0; i < n; ++i) {
    std::string key;
    Value value{};
    load(ar, key);
    if constexpr (std::is_same_v<Value, std::string>)
      load(ar, value);
    else
      ar(value);
    if (out.contains(key)) fail<FormatError>("{} has the key '{}' twice", what, escaped(key));
    out.emplace(std::move(key), std::move(value));
  }
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
