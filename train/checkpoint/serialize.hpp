#pragma once
// The cereal serialization of checkpoints, shared by checkpoint.cpp (portable binary files) and
// json.cpp (JSON for people). Internal to train/.
//
// save() works with any cereal output archive. load() reads the portable binary form through
// InArchive, which knows the payload's length and bounds every size it decodes by it: a corrupt size
// is a FormatError before anything is allocated. (cereal's own UserDataAdapter would carry the bound
// too, but it is marked experimental.) Format 1 (tapegrad 0.1) has its own reader in
// format1.cpp, which maps it onto the same structures.

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include "tapegrad/train/checkpoint/checkpoint.hpp"

namespace tapegrad::checkpoint_detail {

class InArchive : public cereal::PortableBinaryInputArchive {
 public:
  InArchive(std::istream& in, std::size_t payload_bytes)
      : cereal::PortableBinaryInputArchive(in), in_(in), payload_bytes_(payload_bytes) {}
  // The payload's bytes not read yet: what every count decoded from here on must fit in.
  std::size_t bytes_left() const {
    const auto at = in_.tellg();
    return at < 0 ? 0 : payload_bytes_ - std::min(payload_bytes_, static_cast<std::size_t>(at));
  }

 private:
  std::istream& in_;
  std::size_t payload_bytes_;
};
using cereal::make_nvp;

template <class A>
constexpr bool is_json = std::is_same_v<A, cereal::JSONOutputArchive>;

// ---- bounded reads of sizes and basic values -----------------------------------------------------------

// The fewest bytes a record takes in the portable binary form (cereal's size tags are 8 bytes): a count
// read from a file is refused when that many of its records could not fit in the bytes left, before
// anything is reserved for them, so a 1 KB file never makes the reader allocate gigabytes.
inline constexpr std::size_t kSizeTagBytes = 8;
inline constexpr std::size_t kMinStringBytes = kSizeTagBytes;
inline constexpr std::size_t kMinShapeBytes = 4 + 3 * 8;
inline constexpr std::size_t kMinTensorBytes = 2 * kMinStringBytes + kMinShapeBytes + kSizeTagBytes;
inline constexpr std::size_t kMinSettingBytes = 2 * kMinStringBytes;
inline constexpr std::size_t kMinNamedValueBytes = kMinStringBytes + 8;
inline constexpr std::size_t kMinMetricWindowBytes = kMinStringBytes + 2 * 8;
inline constexpr std::size_t kMinCurvePointBytes = 3 * 8 + kSizeTagBytes;

inline std::size_t read_size(InArchive& ar, std::size_t min_element_bytes, std::string_view what) {
  cereal::size_type n = 0;
  ar(cereal::make_size_tag(n));
  const std::size_t left = ar.bytes_left();
  if (n > left / std::max<std::size_t>(min_element_bytes, 1))
    fail<FormatError>("{} claims {} elements of at least {} bytes, more than the {} bytes left can hold", what, n,
                      min_element_bytes, left);
  return static_cast<std::size_t>(n);
}

inline void load(InArchive& ar, std::string& s) {
  s.resize(read_size(ar, 1, "a string"));
  ar(cereal::binary_data(s.data(), s.size()));
}

template <class N>
void load_numbers(InArchive& ar, std::vector<N>& v, std::string_view what) {
  v.resize(read_size(ar, sizeof(N), what));
  ar(cereal::binary_data(v.data(), v.size() * sizeof(N)));
}

// A bool is saved as one byte; reading that byte straight into a bool would make any other value
// undefined behaviour, so it is read as a byte and checked.
inline bool load_bool(InArchive& ar, std::string_view what) {
  std::uint8_t v = 0;
  ar(v);
  if (v > 1) fail<FormatError>("{} has the byte {}, not a boolean (0 or 1)", what, v);
  return v == 1;
}

inline std::int64_t load_i64(InArchive& ar) {
  std::int64_t v = 0;
  ar(v);
  return v;
}

inline double load_double(InArchive& ar) {
  double v = 0;
  ar(v);
  return v;
}

// The fewest bytes each record type takes (see kMinTensorBytes).
template <class Record>
constexpr std::size_t min_record_bytes();
template <> constexpr std::size_t min_record_bytes<TensorRecord>() { return kMinTensorBytes; }
template <> constexpr std::size_t min_record_bytes<NamedValue>() { return kMinNamedValueBytes; }
template <> constexpr std::size_t min_record_bytes<MetricWindow>() { return kMinMetricWindowBytes; }
template <> constexpr std::size_t min_record_bytes<CurvePoint>() { return kMinCurvePointBytes; }

// Containers of records, the same way cereal's vector and map save them.
template <class Record>
void load_records(InArchive& ar, std::vector<Record>& out, std::string_view what) {
  out.resize(read_size(ar, min_record_bytes<Record>(), what));
  for (auto& r : out) load(ar, r);
}

template <class Value>
void load_map(InArchive& ar, std::map<std::string, Value>& out, std::string_view what) {
  out.clear();
  const std::size_t n = read_size(ar, kMinStringBytes + (std::is_same_v<Value, std::string> ? kMinStringBytes : sizeof(Value)), what);
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

// ---- writing, archive-neutral ----------------------------------------------------------------------------

// The records saved below, declared first so that save_node and save_list find every one.
template <class A> void save(A& ar, const Shape& s);
template <class A> void save(A& ar, const TensorRecord& t);
template <class A> void save(A& ar, const NamedValue& v);
template <class A> void save(A& ar, const MetricWindow& w);
template <class A> void save(A& ar, const CurvePoint& p);
template <class A> void save(A& ar, const TrainerState& s);
template <class A> void save(A& ar, const OptimizerRecord& o);
template <class A> void save(A& ar, const TrainingRecord& t);

// A record as a named child (a JSON object; nothing extra in binary).
template <class A, class V>
void save_node(A& ar, const char* name, const V& value) {
  ar.setNextName(name);
  ar.startNode();
  save(ar, value);
  ar.finishNode();
}

// A list of records as cereal saves a vector: a size tag, then each record (a named JSON array).
template <class A, class V>
void save_list(A& ar, const char* name, const std::vector<V>& items) {
  ar.setNextName(name);
  ar.startNode();
  ar(cereal::make_size_tag(static_cast<cereal::size_type>(items.size())));
  for (const auto& item : items) {
    ar.startNode();
    save(ar, item);
    ar.finishNode();
  }
  ar.finishNode();
}

// Settings: in binary a size tag and (name, value) pairs; in JSON an object {"name": "value", ...}.
template <class A>
void save_settings(A& ar, const char* name, const Settings& settings) {
  ar.setNextName(name);
  ar.startNode();
  if constexpr (is_json<A>) {
    for (const auto& s : settings) ar(make_nvp(s.name.c_str(), s.value));
  } else {
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(settings.size())));
    for (const auto& s : settings) ar(s.name, s.value);
  }
  ar.finishNode();
}

inline void load_settings(InArchive& ar, Settings& out, std::string_view what) {
  out.resize(read_size(ar, kMinSettingBytes, what));
  for (auto& s : out) {
    load(ar, s.name);
    load(ar, s.value);
  }
}

// A double that JSON can hold: NaN and Inf as strings (JSON has no literal for them).
template <class A>
void save_number(A& ar, const char* name, double v) {
  if constexpr (is_json<A>) {
    if (!std::isfinite(v)) {
      ar(make_nvp(name, std::string(std::isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf")));
      return;
    }
  }
  ar(make_nvp(name, v));
}

template <class A>
void save(A& ar, const Shape& s) {
  ar(make_nvp("rank", static_cast<std::int32_t>(s.rank)), make_nvp("batch", static_cast<std::int64_t>(s.batch)),
     make_nvp("rows", static_cast<std::int64_t>(s.rows)), make_nvp("cols", static_cast<std::int64_t>(s.cols)));
}

inline void load(InArchive& ar, Shape& s) {
  std::int32_t rank = 0;
  ar(rank);
  const std::int64_t batch = load_i64(ar), rows = load_i64(ar), cols = load_i64(ar);
  const Shape read{rank, batch, rows, cols};
  if (!read.valid()) fail<FormatError>("a tensor has an invalid shape (rank {}, {} x {} x {})", rank, batch, rows, cols);
  s = read;
}

template <class A>
void save(A& ar, const TensorRecord& t) {
  ar(make_nvp("name", t.name), make_nvp("dtype", t.dtype));
  save_node(ar, "shape", t.shape);
  const bool finite = std::all_of(t.values.begin(), t.values.end(), [](double v) { return std::isfinite(v); });
  if constexpr (is_json<A>) {
    if (!finite) {
      std::vector<std::string> text;
      for (double v : t.values) text.push_back(fmt::format("{}", v));
      ar(make_nvp("values", text));
      return;
    }
  }
  if (t.dtype == "f32")
    ar(make_nvp("values", std::vector<float>(t.values.begin(), t.values.end())));
  else
    ar(make_nvp("values", t.values));
}

inline void load(InArchive& ar, TensorRecord& t) {
  load(ar, t.name);
  load(ar, t.dtype);
  load(ar, t.shape);
  if (t.dtype == "f32") {
    std::vector<float> v;
    load_numbers(ar, v, fmt::format("tensor '{}'", escaped(t.name)));
    t.values.assign(v.begin(), v.end());
  } else if (t.dtype == "f64") {
    load_numbers(ar, t.values, fmt::format("tensor '{}'", escaped(t.name)));
  } else {
    fail<FormatError>("tensor '{}' has the element type '{}'; f32 and f64 are known", escaped(t.name), escaped(t.dtype));
  }
  if (static_cast<Index>(t.values.size()) != t.shape.numel())
    fail<FormatError>("tensor '{}' is {} ({} elements) but holds {} values", escaped(t.name), t.shape, t.shape.numel(),
                      t.values.size());
}

template <class A>
void save(A& ar, const NamedValue& v) {
  ar(make_nvp("name", v.name));
  save_number(ar, "value", v.value);
}

inline void load(InArchive& ar, NamedValue& v) {
  load(ar, v.name);
  v.value = load_double(ar);
}

template <class A>
void save(A& ar, const MetricWindow& w) {
  ar(make_nvp("name", w.name));
  save_number(ar, "sum", w.tally.sum);
  save_number(ar, "count", w.tally.count);
}

inline void load(InArchive& ar, MetricWindow& w) {
  load(ar, w.name);
  w.tally.sum = load_double(ar);
  w.tally.count = load_double(ar);
}

template <class A>
void save(A& ar, const CurvePoint& p) {
  ar(make_nvp("step", static_cast<std::int64_t>(p.step)));
  save_number(ar, "lr", p.lr);
  save_number(ar, "seconds", p.seconds);
  save_list(ar, "values", p.values);
}

inline void load(InArchive& ar, CurvePoint& p) {
  p.step = load_i64(ar);
  p.lr = load_double(ar);
  p.seconds = load_double(ar);
  load_records(ar, p.values, "a curve point's values");
}

inline std::vector<std::uint64_t> rng_words(const Rng::State& s) { return {s.words.begin(), s.words.end()}; }

inline Rng::State load_rng(InArchive& ar, std::string_view what) {
  std::vector<std::uint64_t> words;
  load_numbers(ar, words, what);
  if (words.size() != 4) fail<FormatError>("{} has {} words; xoshiro256** has 4", what, words.size());
  Rng::State s;
  std::copy(words.begin(), words.end(), s.words.begin());
  return s;
}

// The data order's "order" field: a stored order's permutation, or, for a computed order, one number, minus
// the examples it orders (a permutation holds no negative entry). Files written before the size was
// recorded hold an empty list there: a computed order of unknown size (Sampler::State::examples 0).
inline std::vector<std::int64_t> order_field(const Sampler::State& s) {
  if (!s.order.empty()) return {s.order.begin(), s.order.end()};
  if (s.examples > 0) return {-static_cast<std::int64_t>(s.examples)};
  return {};
}

template <class A>
void save(A& ar, const TrainerState& s) {
  save_settings(ar, "options", to_settings(s.options));
  const std::vector<std::int64_t> order = order_field(s.data_order);
  ar(make_nvp("step", static_cast<std::int64_t>(s.step)), make_nvp("data_fingerprint", s.data_fingerprint),
     make_nvp("has_eval", s.eval_fingerprint.has_value()), make_nvp("eval_fingerprint", s.eval_fingerprint.value_or(0)),
     make_nvp("epoch", s.data_order.epoch), make_nvp("cursor", static_cast<std::int64_t>(s.data_order.cursor)),
     make_nvp("order", order), make_nvp("data_rng", rng_words(s.data_order.rng)), make_nvp("rng", rng_words(s.rng)));
  save_number(ar, "window_loss", s.window_loss);
  ar(make_nvp("window_steps", static_cast<std::int64_t>(s.window_steps)));
  save_list(ar, "window_metrics", s.window_metrics);
  save_list(ar, "curve", s.curve);
}

// epoch, cursor, order, RNG: the sampler's state, laid out alike in formats 1 and 2.
inline void load_data_order(InArchive& ar, Sampler::State& s) {
  ar(s.epoch);
  s.cursor = load_i64(ar);
  std::vector<std::int64_t> order;
  load_numbers(ar, order, "the data order");
  if (order.size() == 1 && order[0] < 0) {  // a computed order of -order[0] examples (order_field)
    if (order[0] == std::numeric_limits<std::int64_t>::min())
      fail<FormatError>("the data order is a computed one of {} examples", order[0]);
    s.examples = -order[0];
  } else {
    s.order.assign(order.begin(), order.end());
    s.examples = static_cast<Index>(s.order.size());
  }
  s.rng = load_rng(ar, "the data order's RNG state");
}

inline void load(InArchive& ar, TrainerState& s) {
  Settings options;
  load_settings(ar, options, "the trainer's options");
  try {
    s.options = from_settings<TrainOptions>(options, "the trainer's options");
  } catch (const Error& e) {
    throw FormatError(e.what());
  }
  s.step = load_i64(ar);
  ar(s.data_fingerprint);
  const bool has_eval = load_bool(ar, "the has-evaluation flag");
  std::uint32_t eval = 0;
  ar(eval);
  if (has_eval) s.eval_fingerprint = eval;
  load_data_order(ar, s.data_order);
  s.rng = load_rng(ar, "the training RNG state");
  s.window_loss = load_double(ar);
  s.window_steps = load_i64(ar);
  load_records(ar, s.window_metrics, "the metric windows");
  load_records(ar, s.curve, "the curve");
}

template <class A>
void save(A& ar, const OptimizerRecord& o) {
  ar(make_nvp("kind", o.kind));
  save_settings(ar, "hyperparameters", o.hyperparameters);
  ar(make_nvp("schedule", o.schedule.kind));
  save_settings(ar, "schedule_settings", o.schedule.settings);
  ar(make_nvp("step", o.step));
  save_list(ar, "buffers", o.buffers);
}

inline void load(InArchive& ar, OptimizerRecord& o) {
  load(ar, o.kind);
  load_settings(ar, o.hyperparameters, "the optimizer's hyperparameters");
  load(ar, o.schedule.kind);
  load_settings(ar, o.schedule.settings, "the schedule's settings");
  o.step = load_i64(ar);
  load_records(ar, o.buffers, "the optimizer buffers");
}

template <class A>
void save(A& ar, const TrainingRecord& t) {
  save_node(ar, "optimizer", t.optimizer);
  save_node(ar, "trainer", t.trainer);
}

inline void load(InArchive& ar, TrainingRecord& t) {
  load(ar, t.optimizer);
  load(ar, t.trainer);
}

// The checkpoint with `format_version` in its version field: the encoder writes today's format whatever
// the file was read from, without copying the checkpoint to change one number.
template <class A>
void save_as(A& ar, const Checkpoint& c, std::uint32_t format_version) {
  ar(make_nvp("format_version", format_version), make_nvp("tapegrad_version", c.tapegrad_version));
  ar(make_nvp("model", c.model.kind));
  save_settings(ar, "model_config", c.model.config);
  save_list(ar, "parameters", c.parameters);
  ar(make_nvp("metadata", c.metadata));
  const bool has_training = c.training.has_value();
  ar(make_nvp("has_training", has_training));
  if (has_training) save_node(ar, "training", *c.training);
}

template <class A>
void save(A& ar, const Checkpoint& c) {
  save_as(ar, c, c.format_version);
}

// The payload of a format-2 file (after its format version, which the caller read).
inline void load_format2(InArchive& ar, Checkpoint& c) {
  load(ar, c.tapegrad_version);
  load(ar, c.model.kind);
  load_settings(ar, c.model.config, "the model's configuration");
  load_records(ar, c.parameters, "the parameter list");
  load_map(ar, c.metadata, "the metadata");
  if (load_bool(ar, "the has-training flag")) {
    c.training.emplace();
    load(ar, *c.training);
  }
}

// The payload of a format-1 file (tapegrad 0.1), mapped onto today's structures
// (format1.cpp).
void load_format1(InArchive& ar, Checkpoint& c);

// cereal's binary archives have no nodes; these make the save() functions above archive-neutral.
struct NodeFree {
  explicit NodeFree(cereal::PortableBinaryOutputArchive& a) : ar(a) {}
  template <class... T>
  void operator()(T&&... v) {
    ar(std::forward<T>(v)...);
  }
  void setNextName(const char*) {}
  void startNode() {}
  void finishNode() {}
  cereal::PortableBinaryOutputArchive& ar;
};

}  // namespace tapegrad::checkpoint_detail
