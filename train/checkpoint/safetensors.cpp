// safetensors: the decoder that checks every rule before it allocates what a file asks for, the encoder,
// and loading any module, strictly or partially, in tapegrad's layout or PyTorch's. See safetensors.hpp.
#include "tapegrad/train/checkpoint/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "tapegrad/core/file_io.hpp"

namespace tapegrad {
namespace {

using Json = nlohmann::json;
// Written in the order given: __metadata__ first, then the tensors in the order of their bytes.
using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kMetadataKey = "__metadata__";

template <class U>
U get_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) v |= std::uint64_t{std::to_integer<std::uint8_t>(p[i])} << (8 * i);
  return static_cast<U>(v);
}

template <class U>
void put_le(std::byte* p, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

// "2x3" as tapegrad's shapes print, "a scalar" for [].
std::string dims_str(const std::vector<std::uint64_t>& dims) {
  return dims.empty() ? std::string("a scalar") : fmt::format("{}", fmt::join(dims, "x"));
}

// The element count of `dims` and its size in bytes, if neither overflows 64 bits.
bool sizes_of(const std::vector<std::uint64_t>& dims, std::size_t element, std::uint64_t& numel, std::uint64_t& bytes) {
  numel = 1;
  for (std::uint64_t d : dims)
    if (__builtin_mul_overflow(numel, d, &numel)) return false;
  return !__builtin_mul_overflow(numel, static_cast<std::uint64_t>(element), &bytes);
}

// ---- decoding ---------------------------------------------------------------------------------------------

// Throws "safetensors '<source>': <rule>".
class Refusal {
 public:
  explicit Refusal(std::string_view source) : source_(escaped(source)) {}
  template <class... Args>
  [[noreturn]] void operator()(fmt::format_string<Args...> format, Args&&... args) const {
    fail<FormatError>("safetensors '{}': {}", source_, fmt::format(format, std::forward<Args>(args)...));
  }

 private:
  std::string source_;
};

// The header as JSON. nlohmann keeps one of two equal keys without a word, and parsers that keep different
// ones read different tensors from the same bytes, so a key twice in any object is refused here, as it is
// parsed; so is nesting deeper than a header has (the entries' shape and data_offsets lists), which keeps
// the parse's memory proportional to the header's length.
Json parse_header(std::string_view text, const Refusal& refuse) {
  std::vector<std::set<std::string>> keys;  // of each object being parsed
  std::string entry;                        // the top-level key whose value is being parsed
  const auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        if (depth > 1) refuse("the entry '{}' nests an object deeper than a safetensors header has any", escaped(entry));
        keys.emplace_back();
        break;
      case Json::parse_event_t::array_start:
        if (depth > 2) refuse("the entry '{}' nests a list deeper than a safetensors header has any", escaped(entry));
        break;
      case Json::parse_event_t::object_end: keys.pop_back(); break;
      case Json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (depth == 1) entry = key;
        if (!keys.back().insert(key).second) {
          if (depth == 1) refuse("the name '{}' appears twice in the header", escaped(key));
          refuse("the entry '{}' has the key '{}' twice", escaped(entry), escaped(key));
        }
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return Json::parse(text, callback);
  } catch (const Json::exception& e) {
    refuse("the header is not valid JSON ({})", escaped(e.what(), 300));
  }
}

// "an array", "a number": what a JSON value is, as a message says it.
std::string kind_of(const Json& value) {
  const std::string_view type = value.type_name();
  return fmt::format("{} {}", type == "array" || type == "object" ? "an" : "a", type);
}

std::map<std::string, std::string> read_metadata(const Json& value, const Refusal& refuse) {
  if (!value.is_object()) refuse("__metadata__ is {}, not a map of strings to strings", kind_of(value));
  std::map<std::string, std::string> out;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      refuse("__metadata__ maps '{}' to {}; its values must be strings", escaped(key), kind_of(v));
    out.emplace(key, v.get<std::string>());
  }
  return out;
}

// The non-negative integers of a JSON list ("shape", "data_offsets"), or the reason it is not one.
std::vector<std::uint64_t> read_integers(const Json& value, std::string_view name, const char* what, const Refusal& refuse) {
  if (!value.is_array()) refuse("tensor '{}' has a {} that is {}, not a list", escaped(name), what, kind_of(value));
  std::vector<std::uint64_t> out;
  out.reserve(value.size());
  for (const auto& v : value) {
    if (!v.is_number_unsigned())
      refuse("tensor '{}' has a {} with {}, not a non-negative integer below 2^64", escaped(name), what, v.dump());
    out.push_back(v.get<std::uint64_t>());
  }
  return out;
}

struct Entry {
  SafetensorsTensor tensor;
  std::uint64_t begin = 0, end = 0;  // in the data buffer
};

Entry read_entry(const std::string& name, const Json& value, const Refusal& refuse) {
  const std::string n = escaped(name);
  if (!value.is_object()) refuse("tensor '{}' is {}, not an object with dtype, shape and data_offsets", n, kind_of(value));
  for (const auto& [key, v] : value.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      refuse("tensor '{}' has the unknown key '{}'; a tensor has dtype, shape and data_offsets", n, escaped(key));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) refuse("tensor '{}' has no {}", n, key);
  Entry e;
  e.tensor.name = name;
  const Json& dtype = value["dtype"];
  if (!dtype.is_string() || !parse_enum(dtype.get_ref<const std::string&>(), e.tensor.dtype))
    refuse("tensor '{}' has the unknown dtype {}; the format's are {}", n, escaped(dtype.dump()),
           enum_choices<SafetensorsDtype>());
  e.tensor.shape = read_integers(value["shape"], name, "shape", refuse);
  const std::vector<std::uint64_t> offsets = read_integers(value["data_offsets"], name, "data_offsets", refuse);
  if (offsets.size() != 2) refuse("tensor '{}' has {} data_offsets; it must have two, [begin, end]", n, offsets.size());
  e.begin = offsets[0];
  e.end = offsets[1];
  if (e.end < e.begin) refuse("tensor '{}' has data_offsets [{}, {}], which end before they begin", n, e.begin, e.end);
  std::uint64_t numel = 0, bytes = 0;
  if (!sizes_of(e.tensor.shape, element_bytes(e.tensor.dtype), numel, bytes))
    refuse("tensor '{}' has the shape {}, whose size overflows 64 bits", n, dims_str(e.tensor.shape));
  if (e.end - e.begin != bytes)
    refuse("tensor '{}' is {} {} ({} bytes) but its data_offsets [{}, {}] hold {} bytes", n, to_string(e.tensor.dtype),
           dims_str(e.tensor.shape), bytes, e.begin, e.end, e.end - e.begin);
  return e;
}

// Sorts the entries by their bytes and sets their views of `data`, which they must tile: from byte 0, each
// starting where the one before ends, the last ending at the end of the file. Bytes that no tensor covers
// are where a polyglot file hides another format.
void tile(std::vector<Entry>& entries, std::span<const std::byte> data, const Refusal& refuse) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.tensor.name) < std::tie(b.begin, b.end, b.tensor.name);
  });
  std::uint64_t covered = 0;
  const Entry* last = nullptr;
  for (Entry& e : entries) {
    const std::string name = escaped(e.tensor.name);
    if (e.end > data.size())
      refuse("tensor '{}' has data_offsets [{}, {}], past the end of the {}-byte data buffer (the file is truncated)",
             name, e.begin, e.end, data.size());
    if (e.begin > covered)
      refuse("the bytes [{}, {}) of the data buffer belong to no tensor: a hole before tensor '{}'", covered, e.begin, name);
    if (e.begin < covered)
      refuse("tensor '{}' has data_offsets [{}, {}], which overlap tensor '{}' (it ends at {})", name, e.begin, e.end,
             escaped(last->tensor.name), covered);
    e.tensor.data = data.subspan(static_cast<std::size_t>(e.begin), static_cast<std::size_t>(e.end - e.begin));
    covered = e.end;
    last = &e;
  }
  if (covered < data.size()) {
    if (!last) refuse("the file has {} bytes after the header but no tensor", data.size() - covered);
    refuse("the file has {} bytes after the last tensor '{}' (which ends at {} of the {}-byte data buffer)",
           data.size() - covered, escaped(last->tensor.name), covered, data.size());
  }
}

}  // namespace

std::size_t element_bytes(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::boolean:
    case SafetensorsDtype::u8:
    case SafetensorsDtype::i8:
    case SafetensorsDtype::f8_e5m2:
    case SafetensorsDtype::f8_e4m3: return 1;
    case SafetensorsDtype::i16:
    case SafetensorsDtype::u16:
    case SafetensorsDtype::f16:
    case SafetensorsDtype::bf16: return 2;
    case SafetensorsDtype::i32:
    case SafetensorsDtype::u32:
    case SafetensorsDtype::f32: return 4;
    case SafetensorsDtype::i64:
    case SafetensorsDtype::u64:
    case SafetensorsDtype::f64: return 8;
  }
  return 0;
}

std::uint64_t SafetensorsTensor::numel() const {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n *= d;
  return n;
}

SafetensorsView decode_safetensors(std::span<const std::byte> bytes, std::string_view source) {
  const Refusal refuse(source);
  if (bytes.size() < 8) refuse("the file has {} bytes, fewer than the 8 of the header's length", bytes.size());
  const auto n = get_le<std::uint64_t>(bytes.data());
  if (n > kMaxSafetensorsHeader)
    refuse("the header's length is {} bytes, more than the limit of {}", n, kMaxSafetensorsHeader);
  if (n > bytes.size() - 8)
    refuse("the header's length is {} bytes but only {} follow (the file is truncated or not safetensors)", n,
           bytes.size() - 8);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, static_cast<std::size_t>(n));
  if (text.empty() || text.front() != '{')
    refuse("the header does not start with '{{' (it starts with {})",
           text.empty() ? std::string("nothing: its length is 0")
                        : fmt::format("the byte {:#04x}", static_cast<unsigned char>(text.front())));
  if (const std::size_t bad = invalid_utf8_at(text); bad != std::string_view::npos)
    refuse("the header is not valid UTF-8 (byte {} of the header, {:#04x})", bad, static_cast<unsigned char>(text[bad]));
  const Json header = parse_header(text, refuse);

  SafetensorsView out;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey)
      out.metadata = read_metadata(value, refuse);
    else
      entries.push_back(read_entry(name, value, refuse));
  }
  // The tensors must tile the data buffer, which is the rest of the file.
  tile(entries, bytes.subspan(8 + static_cast<std::size_t>(n)), refuse);
  out.tensors.reserve(entries.size());
  for (Entry& e : entries) out.tensors.push_back(std::move(e.tensor));
  return out;
}

std::vector<std::byte> encode_safetensors(const SafetensorsView& file) {
  const auto check_text = [](std::string_view text, const char* what) {
    if (invalid_utf8_at(text) != std::string_view::npos)
      fail<ValueError>("encode_safetensors: the {} '{}' is not valid UTF-8", what, escaped(text));
  };
  OrderedJson header = OrderedJson::object();
  if (!file.metadata.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto& [key, value] : file.metadata) {
      check_text(key, "metadata key");
      check_text(value, "metadata value");
      meta[key] = value;
    }
    header[kMetadataKey] = std::move(meta);
  }
  std::uint64_t offset = 0;
  std::set<std::string_view> names;
  for (const auto& t : file.tensors) {
    check_text(t.name, "tensor name");
    if (t.name == kMetadataKey || !names.insert(t.name).second)
      fail<ValueError>("encode_safetensors: the name '{}' is {}", escaped(t.name),
                       t.name == kMetadataKey ? "the metadata's" : "given to two tensors");
    std::uint64_t numel = 0, bytes = 0;
    if (!sizes_of(t.shape, element_bytes(t.dtype), numel, bytes) || bytes != t.data.size())
      fail<ValueError>("encode_safetensors: tensor '{}' is {} {} but has {} bytes", escaped(t.name), to_string(t.dtype),
                       dims_str(t.shape), t.data.size());
    header[t.name] = {{"dtype", to_string(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::vector<std::byte> out(8 + text.size() + static_cast<std::size_t>(offset));
  put_le<std::uint64_t>(out.data(), text.size());
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::byte* at = out.data() + 8 + text.size();
  for (const auto& t : file.tensors) at = std::copy(t.data.begin(), t.data.end(), at);
  return out;
}

// ---- modules ------------------------------------------------------------------------------------------------

namespace {

template <class T>
constexpr SafetensorsDtype native_dtype() {
  return std::is_same_v<T, float> ? SafetensorsDtype::f32 : SafetensorsDtype::f64;
}

// One parameter's place in a file tensor: row block `part` (of TorchName::parts) of it, maybe transposed.
template <class T>
struct Slot {
  const Parameter<T>* param;
  bool transposed = false;
  int part = 0;
};

// A tensor the layout expects in the file: its name, shape, and the parameters it holds, by part.
template <class T>
struct Expected {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<Slot<T>> slots;
  std::string parameters() const {  // "attn.wq, attn.wk, attn.wv"
    std::vector<std::string> names;
    for (const auto& s : slots) names.push_back(s.param->name);
    return fmt::format("{}", fmt::join(names, ", "));
  }
};

std::vector<std::uint64_t> dims_of(const Shape& s) {
  const auto u = [](Index v) { return static_cast<std::uint64_t>(v); };
  if (s.rank == 1) return {u(s.cols)};
  if (s.rank == 2) return {u(s.rows), u(s.cols)};
  return {u(s.batch), u(s.rows), u(s.cols)};
}

// The file tensors a module's parameters make in `layout`, in the order of its parameters. ValueError
// naming the op if the module's torch_name()s do not describe a file: two parameters under one name
// other than as the distinct parts of one packed tensor of equal blocks, a transposed vector.
template <class T>
std::vector<Expected<T>> expected_tensors(const Module<T>& model, WeightLayout layout, std::string_view op) {
  std::vector<std::pair<const Parameter<T>*, TorchName>> names;
  if (layout == WeightLayout::pytorch)
    names = model.torch_names();
  else
    for (const auto* p : model.parameters()) names.emplace_back(p, TorchName{p->name});
  std::vector<Expected<T>> out;
  std::vector<std::vector<std::uint64_t>> pieces;  // the shape of each part of out[k]
  std::map<std::string, std::size_t> index;
  for (const auto& [p, n] : names) {
    std::vector<std::uint64_t> piece = dims_of(p->value.shape());
    if (n.transposed) {
      if (piece.size() != 2)
        fail<ValueError>("{}: '{}' is to be stored transposed as '{}', but it is {}, not a matrix", op, p->name,
                         escaped(n.name), p->value.shape());
      std::swap(piece[0], piece[1]);
    }
    if (n.parts < 1 || n.part < 0 || n.part >= n.parts)
      fail<ValueError>("{}: '{}' is to be part {} of {} of '{}'", op, p->name, n.part, n.parts, escaped(n.name));
    const auto parts = static_cast<std::size_t>(n.parts), part = static_cast<std::size_t>(n.part);
    const auto [it, fresh] = index.try_emplace(n.name, out.size());
    if (fresh) {
      out.push_back({n.name, piece, std::vector<Slot<T>>(parts)});
      out.back().shape[0] *= parts;
      pieces.push_back(piece);
    }
    Expected<T>& e = out[it->second];
    if (e.slots.size() != parts || e.slots[part].param || pieces[it->second] != piece) {
      const auto other = std::find_if(e.slots.begin(), e.slots.end(), [](const Slot<T>& s) { return s.param; });
      fail<ValueError>("{}: '{}' and '{}' are both stored as '{}', not as distinct, equal parts of it", op,
                       other->param->name, p->name, escaped(n.name));
    }
    e.slots[part] = {p, n.transposed, n.part};
  }
  for (const auto& e : out)
    for (std::size_t k = 0; k < e.slots.size(); ++k)
      if (!e.slots[k].param)
        fail<ValueError>("{}: '{}' is packed from {} parts but part {} is no parameter's", op, escaped(e.name),
                         e.slots.size(), k);
  return out;
}

// One element of a floating-point tensor in the file, as a double (exact for every one of these types).
using ReadElement = double (*)(const std::byte*);

double read_f16(const std::byte* p) {
  const auto h = get_le<std::uint16_t>(p);
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double magnitude = exponent == 0    ? std::ldexp(mantissa, -24)  // subnormal
                           : exponent == 31 ? (mantissa ? std::numeric_limits<double>::quiet_NaN()
                                                        : std::numeric_limits<double>::infinity())
                                            : std::ldexp(mantissa + 1024, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}
double read_bf16(const std::byte* p) { return std::bit_cast<float>(std::uint32_t{get_le<std::uint16_t>(p)} << 16); }
double read_f32(const std::byte* p) { return std::bit_cast<float>(get_le<std::uint32_t>(p)); }
double read_f64(const std::byte* p) { return std::bit_cast<double>(get_le<std::uint64_t>(p)); }

ReadElement reader_of(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::f16: return read_f16;
    case SafetensorsDtype::bf16: return read_bf16;
    case SafetensorsDtype::f32: return read_f32;
    case SafetensorsDtype::f64: return read_f64;
    default: return nullptr;
  }
}

// The value of one slot from the file tensor's bytes: its block, transposed back when the file holds W^T.
template <class T>
TensorT<T> slot_value(const SafetensorsTensor& t, const Slot<T>& slot, ReadElement read) {
  const Shape shape = slot.param->value.shape();
  TensorT<T> out(shape);
  const std::size_t size = element_bytes(t.dtype), n = static_cast<std::size_t>(out.numel());
  const std::byte* block = t.data.data() + static_cast<std::size_t>(slot.part) * n * size;
  if (slot.transposed) {  // the file's block is (cols, rows): W[i][j] = block[j][i]
    for (Index i = 0; i < shape.rows; ++i)
      for (Index j = 0; j < shape.cols; ++j)
        out.at(i, j) = static_cast<T>(read(block + static_cast<std::size_t>(j * shape.rows + i) * size));
  } else {
    for (std::size_t i = 0; i < n; ++i) out[static_cast<Index>(i)] = static_cast<T>(read(block + i * size));
  }
  return out;
}

template <class T>
void write_slot(const Slot<T>& slot, SafetensorsDtype dtype, std::byte* block) {
  const TensorT<T>& v = slot.param->value;
  const Shape s = v.shape();
  const auto write = [&](std::size_t k, T x) {
    if (dtype == SafetensorsDtype::f32)
      put_le(block + 4 * k, std::bit_cast<std::uint32_t>(static_cast<float>(x)));
    else
      put_le(block + 8 * k, std::bit_cast<std::uint64_t>(static_cast<double>(x)));
  };
  if (slot.transposed) {
    for (Index i = 0; i < s.rows; ++i)
      for (Index j = 0; j < s.cols; ++j) write(static_cast<std::size_t>(j * s.rows + i), v.at(i, j));
  } else {
    for (Index i = 0; i < v.numel(); ++i) write(static_cast<std::size_t>(i), v[i]);
  }
}

constexpr std::string_view kLoadable = "F16, BF16, F32 and F64";

// The values of the parameters `e` holds, read from the file's tensor `t` and converted to T; or, as a
// sentence for the report's `mismatched`, why they cannot be loaded.
template <class T>
std::string convert(const SafetensorsTensor& t, const Expected<T>& e, std::vector<TensorT<T>>& values) {
  const std::string name = escaped(e.name);
  const std::string params = e.slots.size() > 1 || e.slots[0].param->name != e.name
                                 ? fmt::format(" (the model's {})", e.parameters())
                                 : std::string();
  const ReadElement read = reader_of(t.dtype);
  if (!read) return fmt::format("'{}'{} is {} in the file; tapegrad loads {}", name, params, to_string(t.dtype), kLoadable);
  if (t.shape != e.shape)
    return fmt::format("'{}'{} is {} in the file but {} in the model", name, params, dims_str(t.shape), dims_str(e.shape));
  for (const Slot<T>& slot : e.slots) {
    TensorT<T> v = slot_value(t, slot, read);
    for (Index i = 0; i < v.numel(); ++i)
      if (!std::isfinite(v[i]))
        return fmt::format("'{}'{} holds {} as {} at element {} of '{}'; a weight must be finite", name, params, v[i],
                           to_string(native_dtype<T>()), i, slot.param->name);
    values.push_back(std::move(v));
  }
  return {};
}

template <class T>
LoadReport load_into(const SafetensorsView& file, Module<T>& model, const SafetensorsLoadOptions& options,
                     std::string_view source) {
  const std::string op =
      source.empty() ? std::string("load_safetensors") : fmt::format("load_safetensors '{}'", escaped(source));
  const std::vector<Expected<T>> expected = expected_tensors(std::as_const(model), options.layout, op);
  std::map<std::string_view, const SafetensorsTensor*> by_name;
  for (const auto& t : file.tensors) by_name.emplace(t.name, &t);

  // Everything is checked and converted before the module changes: all or nothing.
  LoadReport report;
  std::map<const Parameter<T>*, TensorT<T>> staged;
  std::set<std::string_view> wanted;
  for (const Expected<T>& e : expected) {
    wanted.insert(e.name);
    const auto it = by_name.find(e.name);
    if (it == by_name.end()) {
      report.missing.push_back(e.name);
      continue;
    }
    const SafetensorsTensor& t = *it->second;
    std::vector<TensorT<T>> values;
    if (std::string problem = convert(t, e, values); !problem.empty()) {
      report.mismatched.push_back(std::move(problem));
      continue;
    }
    for (std::size_t k = 0; k < e.slots.size(); ++k) {
      report.loaded.push_back(e.slots[k].param->name);
      staged.emplace(e.slots[k].param, std::move(values[k]));
    }
    if (t.dtype != native_dtype<T>())
      report.converted.push_back(
          fmt::format("'{}' from {} to {}", escaped(e.name), to_string(t.dtype), to_string(native_dtype<T>())));
  }
  for (const auto& t : file.tensors)
    if (!wanted.count(t.name)) report.unexpected.push_back(t.name);

  if (options.strict && !report.clean()) {
    std::string hint;
    const auto written = file.metadata.find("tapegrad.layout");
    if (written != file.metadata.end() && written->second != to_string(options.layout))
      hint = fmt::format(" (the file was written in the '{}' layout, and this load asked for '{}')",
                         escaped(written->second), to_string(options.layout));
    fail<FormatError>("{}: {}; nothing was loaded{}", op, report.problems(), hint);
  }
  for (auto* p : model.parameters())  // the layout walked the module as const: its parameters, writable
    if (const auto it = staged.find(p); it != staged.end()) p->value = std::move(it->second);
  return report;
}

}  // namespace

template <class T>
std::vector<std::byte> encode_safetensors(const Module<T>& model, const SafetensorsSaveOptions& options) {
  const SafetensorsDtype dtype = options.dtype.value_or(native_dtype<T>());
  if (dtype != SafetensorsDtype::f32 && dtype != SafetensorsDtype::f64)
    fail<ValueError>("save_safetensors: tapegrad writes F32 or F64, not {}", to_string(dtype));
  SafetensorsView file;
  file.metadata["producer"] = fmt::format("tapegrad {}", tapegrad_version());
  file.metadata["tapegrad.layout"] = std::string(to_string(options.layout));
  if (options.layout == WeightLayout::pytorch) file.metadata["format"] = "pt";
  const ModelRecord record = model.model_record();
  if (!record.kind.empty()) file.metadata["tapegrad.model"] = record.kind;
  for (const Setting& s : record.config) file.metadata["tapegrad.config." + s.name] = s.value;
  for (const auto& [key, value] : options.metadata) {
    if (file.metadata.count(key) || key.starts_with("tapegrad."))
      fail<ValueError>("save_safetensors: the metadata key '{}' is tapegrad's own; name the program's keys otherwise",
                       escaped(key));
    file.metadata[key] = value;
  }

  const std::vector<Expected<T>> expected = expected_tensors(model, options.layout, "save_safetensors");
  std::size_t total = 0;
  for (const auto& e : expected)
    for (const auto& s : e.slots) total += static_cast<std::size_t>(s.param->value.numel()) * element_bytes(dtype);
  std::vector<std::byte> data(total);
  std::byte* at = data.data();
  for (const auto& e : expected) {
    SafetensorsTensor t{e.name, dtype, e.shape, {}};
    std::byte* begin = at;
    for (const auto& s : e.slots) {
      write_slot(s, dtype, at);
      at += static_cast<std::size_t>(s.param->value.numel()) * element_bytes(dtype);
    }
    t.data = std::span<const std::byte>(begin, at);
    file.tensors.push_back(std::move(t));
  }
  return encode_safetensors(file);
}

template <class T>
void save_safetensors(const std::filesystem::path& path, const Module<T>& model, const SafetensorsSaveOptions& options) {
  const std::vector<std::byte> bytes = encode_safetensors(model, options);
  write_file(path, {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, Durability::durable, "save_safetensors");
}

template <class T>
LoadReport load_safetensors(const SafetensorsView& file, Module<T>& model, const SafetensorsLoadOptions& options) {
  return load_into(file, model, options, "");
}

template <class T>
LoadReport load_safetensors(const std::filesystem::path& path, Module<T>& model, const SafetensorsLoadOptions& options) {
  const std::string bytes = read_file(path, options.max_bytes, "load_safetensors");
  const SafetensorsView file = decode_safetensors(std::as_bytes(std::span<const char>(bytes)), path.string());
  return load_into(file, model, options, path.string());
}

template std::vector<std::byte> encode_safetensors(const Module<float>&, const SafetensorsSaveOptions&);
template std::vector<std::byte> encode_safetensors(const Module<double>&, const SafetensorsSaveOptions&);
template void save_safetensors(const std::filesystem::path&, const Module<float>&, const SafetensorsSaveOptions&);
template void save_safetensors(const std::filesystem::path&, const Module<double>&, const SafetensorsSaveOptions&);
template LoadReport load_safetensors(const SafetensorsView&, Module<float>&, const SafetensorsLoadOptions&);
template LoadReport load_safetensors(const SafetensorsView&, Module<double>&, const SafetensorsLoadOptions&);
template LoadReport load_safetensors(const std::filesystem::path&, Module<float>&, const SafetensorsLoadOptions&);
template LoadReport load_safetensors(const std::filesystem::path&, Module<double>&, const SafetensorsLoadOptions&);

}  // namespace tapegrad
