#pragma once
// The cereal serialization of checkpoints, shared by checkpoint.cpp (portable binary files) and
// checkpoint_json.cpp (JSON for people). Internal to train/.
//
// save() works with any cereal output archive. load() reads the portable binary form through
// InArchive, which knows the payload's length and bounds every size it decodes by it: a corrupt size
// is a FormatError before anything is allocated. (cereal's own UserDataAdapter would carry the bound
// too, but it is marked experimental.)

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include "tapegrad/train/checkpoint.hpp"

namespace tapegrad::checkpoint_detail {

class InArchive : public cereal::PortableBinaryInputArchive {
 public:
  InArchive(std::istream& in, std::size_t payload_bytes)
      : cereal::PortableBinaryInputArchive(in), payload_bytes_(payload_bytes) {}
  std::size_t payload_bytes() const { return payload_bytes_; }

 private:
  std::size_t payload_bytes_;
};
using cereal::make_nvp;

template <class A>
constexpr bool is_json = std::is_same_v<A, cereal::JSONOutputArchive>;

inline std::size_t read_size(InArchive& ar, std::size_t element_bytes, std::string_view what) {
  cereal::size_type n = 0;
  ar(cereal::make_size_tag(n));
  const std::size_t limit = ar.payload_bytes();
  if (n > limit / std::max<std::size_t>(element_bytes, 1))
    fail<FormatError>("{} claims {} elements, more than the {}-byte payload can hold", what, n, limit);
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

template <class E>
E load_enum(InArchive& ar, int count, std::string_view what) {
  std::int32_t v = 0;
  ar(v);
  if (v < 0 || v >= count) fail<FormatError>("{} has the value {}, which is not one of the {} known", what, v, count);
  return static_cast<E>(v);
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

// The records saved below, declared first so that save_node and save_list find every one.
template <class A> void save(A& ar, const Shape& s);
template <class A> void save(A& ar, const TensorRecord& t);
template <class A> void save(A& ar, const ModelConfig& c);
template <class A> void save(A& ar, const TrainConfig& c);
template <class A> void save(A& ar, const CurvePoint& p);
template <class A> void save(A& ar, const TrainerState& s);
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
    load_numbers(ar, v, fmt::format("tensor '{}'", t.name));
    t.values.assign(v.begin(), v.end());
  } else if (t.dtype == "f64") {
    load_numbers(ar, t.values, fmt::format("tensor '{}'", t.name));
  } else {
    fail<FormatError>("tensor '{}' has the element type '{}'; f32 and f64 are known", t.name, t.dtype);
  }
  if (static_cast<Index>(t.values.size()) != t.shape.numel())
    fail<FormatError>("tensor '{}' is {} ({} elements) but holds {} values", t.name, t.shape, t.shape.numel(), t.values.size());
}

// Containers of records, the same way cereal's vector and map save them.
template <class Record>
void load_records(InArchive& ar, std::vector<Record>& out, std::string_view what) {
  out.resize(read_size(ar, 1, what));
  for (auto& r : out) load(ar, r);
}

template <class Value>
void load_map(InArchive& ar, std::map<std::string, Value>& out, std::string_view what) {
  out.clear();
  const std::size_t n = read_size(ar, 1, what);
  for (std::size_t i = 0; i < n; ++i) {
    std::string key;
    Value value{};
    load(ar, key);
    if constexpr (std::is_same_v<Value, std::string>)
      load(ar, value);
    else
      ar(value);
    if (!out.emplace(std::move(key), std::move(value)).second) fail<FormatError>("{} has a key twice", what);
  }
}

template <class A>
void save(A& ar, const ModelConfig& c) {
  ar(make_nvp("vocab", static_cast<std::int64_t>(c.vocab)), make_nvp("labels", static_cast<std::int64_t>(c.labels)),
     make_nvp("max_len", static_cast<std::int64_t>(c.max_len)), make_nvp("features", static_cast<std::int32_t>(c.features)),
     make_nvp("d_embed", static_cast<std::int64_t>(c.d_embed)), make_nvp("positions", static_cast<std::int32_t>(c.positions)),
     make_nvp("attention", static_cast<std::int32_t>(c.attention)), make_nvp("heads", static_cast<std::int64_t>(c.heads)),
     make_nvp("d_head", static_cast<std::int64_t>(c.d_head)), make_nvp("scale", static_cast<std::int32_t>(c.scale)),
     make_nvp("output_projection", c.output_projection), make_nvp("residual", c.residual), make_nvp("seed", c.seed));
}

inline void load(InArchive& ar, ModelConfig& c) {
  c.vocab = load_i64(ar);
  c.labels = load_i64(ar);
  c.max_len = load_i64(ar);
  c.features = load_enum<FeatureKind>(ar, 2, "the feature kind");
  c.d_embed = load_i64(ar);
  c.positions = load_enum<PositionEncoding>(ar, 4, "the position encoding");
  c.attention = load_enum<AttentionMode>(ar, 2, "the attention mode");
  c.heads = load_i64(ar);
  c.d_head = load_i64(ar);
  c.scale = load_enum<AttentionScale>(ar, 3, "the attention scale");
  c.output_projection = load_bool(ar, "the output-projection flag");
  c.residual = load_bool(ar, "the residual flag");
  ar(c.seed);
  const auto sane = [](Index v) { return v >= 0 && v < (1 << 24); };
  if (!sane(c.vocab) || !sane(c.labels) || !sane(c.max_len) || !sane(c.d_embed) || !sane(c.heads) || !sane(c.d_head))
    fail<FormatError>("the model configuration has sizes out of range (vocab {}, labels {}, max_len {}, d_embed {}, "
                      "heads {}, d_head {})",
                      c.vocab, c.labels, c.max_len, c.d_embed, c.heads, c.d_head);
}

template <class A>
void save(A& ar, const TrainConfig& c) {
  ar(make_nvp("steps", static_cast<std::int64_t>(c.steps)), make_nvp("batch", static_cast<std::int64_t>(c.batch)),
     make_nvp("optimizer", static_cast<std::int32_t>(c.optimizer)), make_nvp("lr", c.lr), make_nvp("momentum", c.momentum),
     make_nvp("clip", c.clip), make_nvp("cosine", c.cosine), make_nvp("eval_every", static_cast<std::int64_t>(c.eval_every)),
     make_nvp("seed", c.seed), make_nvp("anomaly", c.anomaly));
}

inline void load(InArchive& ar, TrainConfig& c) {
  c.steps = load_i64(ar);
  c.batch = load_i64(ar);
  c.optimizer = load_enum<OptimizerKind>(ar, 2, "the optimizer kind");
  ar(c.lr, c.momentum, c.clip);
  c.cosine = load_bool(ar, "the cosine-schedule flag");
  c.eval_every = load_i64(ar);
  ar(c.seed);
  c.anomaly = load_bool(ar, "the anomaly flag");
}

template <class A>
void save(A& ar, const CurvePoint& p) {
  ar(make_nvp("step", static_cast<std::int64_t>(p.step)));
  save_number(ar, "train_loss", p.train_loss);
  save_number(ar, "train_accuracy", p.train_accuracy);
  save_number(ar, "eval_loss", p.eval_loss);
  save_number(ar, "eval_accuracy", p.eval_accuracy);
  save_number(ar, "lr", p.lr);
  save_number(ar, "seconds", p.seconds);
}

inline void load(InArchive& ar, CurvePoint& p) {
  p.step = load_i64(ar);
  ar(p.train_loss, p.train_accuracy, p.eval_loss, p.eval_accuracy, p.lr, p.seconds);
}

template <class A>
void save(A& ar, const TrainerState& s) {
  std::vector<std::int64_t> order(s.data_order.order.begin(), s.data_order.order.end());
  ar(make_nvp("step", static_cast<std::int64_t>(s.step)), make_nvp("epoch", s.data_order.epoch),
     make_nvp("cursor", static_cast<std::int64_t>(s.data_order.cursor)), make_nvp("order", order),
     make_nvp("data_rng", std::vector<std::uint64_t>(s.data_order.rng.words.begin(), s.data_order.rng.words.end())));
  save_number(ar, "window_loss", s.window_loss);
  ar(make_nvp("window_correct", static_cast<std::int64_t>(s.window_correct)),
     make_nvp("window_labelled", static_cast<std::int64_t>(s.window_labelled)),
     make_nvp("window_steps", static_cast<std::int64_t>(s.window_steps)));
  save_list(ar, "curve", s.curve);
}

inline void load(InArchive& ar, TrainerState& s) {
  s.step = load_i64(ar);
  ar(s.data_order.epoch);
  s.data_order.cursor = load_i64(ar);
  std::vector<std::int64_t> order;
  load_numbers(ar, order, "the data order");
  s.data_order.order.assign(order.begin(), order.end());
  std::vector<std::uint64_t> rng;
  load_numbers(ar, rng, "the data RNG state");
  if (rng.size() != 4) fail<FormatError>("the data RNG state has {} words; xoshiro256** has 4", rng.size());
  std::copy(rng.begin(), rng.end(), s.data_order.rng.words.begin());
  ar(s.window_loss);
  s.window_correct = load_i64(ar);
  s.window_labelled = load_i64(ar);
  s.window_steps = load_i64(ar);
  load_records(ar, s.curve, "the curve");
}

template <class A>
void save(A& ar, const TrainingRecord& t) {
  save_node(ar, "config", t.config);
  ar(make_nvp("optimizer", t.optimizer_kind), make_nvp("hyperparameters", t.hyperparameters),
     make_nvp("optimizer_steps", t.optimizer_steps));
  save_list(ar, "buffers", t.buffers);
  save_node(ar, "trainer", t.trainer);
}

inline void load(InArchive& ar, TrainingRecord& t) {
  load(ar, t.config);
  load(ar, t.optimizer_kind);
  load_map(ar, t.hyperparameters, "the hyperparameters");
  ar(t.optimizer_steps);
  load_records(ar, t.buffers, "the optimizer buffers");
  load(ar, t.trainer);
}

template <class A>
void save(A& ar, const Checkpoint& c) {
  ar(make_nvp("format_version", c.format_version), make_nvp("tapegrad_version", c.tapegrad_version));
  save_node(ar, "model", c.model);
  save_list(ar, "parameters", c.parameters);
  ar(make_nvp("metadata", c.metadata));
  const bool has_training = c.training.has_value();
  ar(make_nvp("has_training", has_training));
  if (has_training) save_node(ar, "training", *c.training);
}

inline void load(InArchive& ar, Checkpoint& c) {
  ar(c.format_version);
  load(ar, c.tapegrad_version);
  load(ar, c.model);
  load_records(ar, c.parameters, "the parameter list");
  load_map(ar, c.metadata, "the metadata");
  if (load_bool(ar, "the has-training flag")) {
    c.training.emplace();
    load(ar, *c.training);
  }
}

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
