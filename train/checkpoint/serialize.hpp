#pragma once
// The cereal serialization of checkpoints, shared by checkpoint.cpp (portable binary files) and json.cpp (JSON
// for people). Internal to train/.
//
// Format 3's payload, after the format version: the tapegrad version, the model's kind and settings, the
// metadata, then the entries (state.hpp), each its name, a kind byte (EntryKind) and its value: a tensor's
// shape and values in its own element type, or a list of integers, numbers or texts.
//
// save() works with any cereal output archive. load() reads the portable binary form through
// InArchive, which reads the payload where it lies (no copy of it) and bounds every size it decodes by the
// bytes left: a corrupt size is a FormatError before anything is allocated. (cereal's own UserDataAdapter
// would carry the bound too, but it is marked experimental.)

#include <algorithm>
#include <cmath>
#include <span>
#include <streambuf>
#include <string>
#include <vector>

#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include "tapegrad/train/checkpoint/checkpoint.hpp"

namespace tapegrad::checkpoint_detail {

// The payload's bytes as a stream, read where they lie: a base of InArchive, so that it is made first.
struct PayloadBuffer : std::streambuf {
  explicit PayloadBuffer(std::span<const std::byte> bytes) {
    char* begin = const_cast<char*>(reinterpret_cast<const char*>(bytes.data()));  // only read
    setg(begin, begin, begin + bytes.size());
  }
  std::istream stream{this};
};

class InArchive : PayloadBuffer, public cereal::PortableBinaryInputArchive {
 public:
  explicit InArchive(std::span<const std::byte> payload)
      : PayloadBuffer(payload), cereal::PortableBinaryInputArchive(stream) {}
  // The payload's bytes not read yet: what every count decoded from here on must fit in.
  std::size_t bytes_left() { return static_cast<std::size_t>(in_avail()); }
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
inline constexpr std::size_t kMinSettingBytes = 2 * kMinStringBytes;
inline constexpr std::size_t kMinEntryBytes = kMinStringBytes + 1 + kSizeTagBytes;  // name, kind, a list's size

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

// A size tag, then (name, value) pairs: into Settings, or into the metadata's map, which refuses a key twice.
template <class Pairs>
void load_pairs(InArchive& ar, Pairs& out, std::string_view what) {
  out.clear();
  const std::size_t n = read_size(ar, kMinSettingBytes, what);
  for (std::size_t i = 0; i < n; ++i) {
    Setting s;
    load(ar, s.name);
    load(ar, s.value);
    if constexpr (std::is_same_v<Pairs, Settings>)
      out.push_back(std::move(s));
    else if (!out.try_emplace(s.name, std::move(s.value)).second)
      fail<FormatError>("{} has the key '{}' twice", what, escaped(s.name));
  }
}

inline void load(InArchive& ar, Shape& s) {
  std::int32_t rank = 0;
  std::int64_t batch = 0, rows = 0, cols = 0;
  ar(rank, batch, rows, cols);
  s = Shape{rank, batch, rows, cols};
  if (!s.valid()) fail<FormatError>("a tensor has an invalid shape (rank {}, {} x {} x {})", rank, batch, rows, cols);
}

// ---- reading entries -------------------------------------------------------------------------------------

// An entry's value, one function per kind, each size bounded by the bytes left; `what` names the entry.
template <class N>
void load(InArchive& ar, std::vector<N>& v, std::string_view what) {
  v.resize(read_size(ar, std::is_arithmetic_v<N> ? sizeof(N) : kMinStringBytes, what));
  if constexpr (std::is_arithmetic_v<N>)
    ar(cereal::binary_data(v.data(), v.size() * sizeof(N)));
  else
    for (std::string& text : v) load(ar, text);
}

template <class T>
void load(InArchive& ar, TensorT<T>& t, std::string_view what) {
  Shape shape;
  load(ar, shape);
  const std::size_t n = read_size(ar, sizeof(T), what);
  if (static_cast<Index>(n) != shape.numel())
    fail<FormatError>("{} is {} ({} values) but holds {} values", what, shape, shape.numel(), n);
  t = TensorT<T>(shape);  // no larger than the bytes left: read_size bounded it
  ar(cereal::binary_data(t.data(), n * sizeof(T)));
}

inline void load(InArchive& ar, StateEntry& e) {
  load(ar, e.name);
  std::uint8_t kind = 0;
  ar(kind);
  // The file stores an entry's kind as the index of its StateValue alternative (one byte): an empty value of
  // each kind, in that order, is what the value is read into.
  static const StateValue kinds[] = {TensorT<float>(), TensorT<double>(), std::vector<std::int64_t>(),
                                     std::vector<double>(), std::vector<std::string>()};
  if (kind >= std::size(kinds))
    fail<FormatError>("entry '{}' has the kind {}; 0 to 4 (f32, f64, ints, numbers, texts) are known", escaped(e.name),
                      kind);
  e.value = kinds[kind];
  std::visit([&](auto& v) { load(ar, v, fmt::format("entry '{}'", escaped(e.name))); }, e.value);
}

// The payload of a format-3 file (after its format version, which the caller read).
inline void load_format3(InArchive& ar, Checkpoint& c) {
  load(ar, c.tapegrad_version);
  load(ar, c.model.kind);
  load_pairs(ar, c.model.config, "the model's configuration");
  load_pairs(ar, c.metadata, "the metadata");
  c.entries.resize(read_size(ar, kMinEntryBytes, "the entry list"));
  for (auto& e : c.entries) load(ar, e);
}

// ---- writing, archive-neutral ----------------------------------------------------------------------------

// Settings: in binary a size tag and (name, value) pairs; in JSON an object {"name": "value", ...}.
template <class A>
void save_settings(A& ar, const char* name, const Settings& settings) {
  if constexpr (is_json<A>) {
    ar.setNextName(name);
    ar.startNode();
    for (const auto& s : settings) ar(make_nvp(s.name.c_str(), s.value));
    ar.finishNode();
  } else {
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(settings.size())));
    for (const auto& s : settings) ar(s.name, s.value);
  }
}

// An entry's values: in binary as cereal saves a vector of them (a size tag, then the bytes, or each text); in
// JSON as an array, with NaN and Inf as strings (JSON has no literal for them).
template <class A, class N>
void save_values(A& ar, std::span<const N> values) {
  if constexpr (is_json<A>) {
    if constexpr (std::is_floating_point_v<N>) {
      if (!std::all_of(values.begin(), values.end(), [](N v) { return std::isfinite(v); })) {
        std::vector<std::string> text;
        for (const N v : values)
          text.push_back(std::isnan(v) ? "NaN" : std::isinf(v) ? (v > 0 ? "Inf" : "-Inf") : fmt::format("{}", v));
        ar(make_nvp("values", text));
        return;
      }
    }
    ar(make_nvp("values", std::vector<N>(values.begin(), values.end())));
  } else {
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(values.size())));
    if constexpr (std::is_arithmetic_v<N>)
      ar(cereal::binary_data(values.data(), values.size() * sizeof(N)));
    else
      for (const N& text : values) ar(text);
  }
}

}  // namespace tapegrad::checkpoint_detail

// cereal's save functions of a Shape, an entry and a checkpoint, beside their types where cereal finds them: in
// JSON each is an object of its own (cereal opens its node), in binary just its fields.
namespace tapegrad {

template <class A>
void save(A& ar, const Shape& s) {
  using cereal::make_nvp;
  ar(make_nvp("rank", static_cast<std::int32_t>(s.rank)), make_nvp("batch", static_cast<std::int64_t>(s.batch)),
     make_nvp("rows", static_cast<std::int64_t>(s.rows)), make_nvp("cols", static_cast<std::int64_t>(s.cols)));
}

template <class A>
void save(A& ar, const StateEntry& e) {
  using namespace checkpoint_detail;
  ar(make_nvp("name", e.name));
  if constexpr (is_json<A>)
    ar(make_nvp("kind", std::string(kind_name(e.value))));
  else
    ar(static_cast<std::uint8_t>(e.value.index()));
  std::visit(
      [&](const auto& v) {
        if constexpr (requires { v.shape(); }) ar(make_nvp("shape", v.shape()));
        save_values(ar, std::span(v.data(), static_cast<std::size_t>(value_count(e.value))));
      },
      e.value);
}

template <class A>
void save(A& ar, const Checkpoint& c) {
  using namespace checkpoint_detail;
  ar(make_nvp("format_version", kCheckpointFormat), make_nvp("tapegrad_version", c.tapegrad_version));
  ar(make_nvp("model", c.model.kind));
  save_settings(ar, "model_config", c.model.config);
  ar(make_nvp("metadata", c.metadata), make_nvp("entries", c.entries));
}

}  // namespace tapegrad
