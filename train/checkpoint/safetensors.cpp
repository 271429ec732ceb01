// safetensors: the decoder that checks every rule before it allocates what a file asks for, the encoder,
// and loading any module, strictly or partially, in tapegrad's layout or PyTorch's. See safetensors.hpp.
#include "tapegrad/train/checkpoint/safetensors.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>
#include <utility>

#include <Eigen/Core>  // Eigen::half, Eigen::bfloat16
#include <nlohmann/json.hpp>

#include "tapegrad/core/descriptor.hpp"
#include "tapegrad/core/file_io.hpp"

namespace tapegrad {
namespace {

using detail::get_le;
using detail::put_le;
using Json = nlohmann::json;
// Written in the order given: __metadata__ first, then the tensors in the order of their bytes.
using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kMetadataKey = "__metadata__";

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
template <class... Args>
[[noreturn]] void refuse(const std::filesystem::path& source, fmt::format_string<Args...> format, Args&&... args) {
  fail<FormatError>("safetensors '{}': {}", escaped(source), fmt::format(format, std::forward<Args>(args)...));
}

// "an array", "a number": what a JSON value is, as a message says it.
std::string kind_of(const Json& value) {
  const std::string_view name = value.type_name();  // "array", "number", ...
  return fmt::format("{} {}", name == "array" || name == "object" ? "an" : "a", name);
}

// The header's syntax alone, through nlohmann's parse, which builds nothing: a syntax error is refused.
struct SyntaxCheck : nlohmann::detail::json_sax_acceptor<Json> {
  std::string_view source;
  [[noreturn]] bool parse_error(std::size_t, const std::string&, const Json::exception& e) {
    refuse(source, "the header is not valid JSON ({})", escaped(e.what(), 300));
  }
};

// The header, read as nlohmann's parser walks it (its SAX interface) straight into a SafetensorsView, one
// entry at a time: a JSON tree of the whole header costs some 25 times its bytes, and nlohmann's parse with
// a callback rescans the top-level object after each entry, which is quadratic in the number of tensors
// (docs/performance.md, "Decoding safetensors headers"). A tensor's three values are kept as JSON until its
// entry ends, then checked (in an array, not a JSON object: an object per entry cost the decode a third
// more time); the metadata goes into the view as it is read.
//
// The first problem throws; the caller then parses the header again for its syntax alone, so that a header
// that is not JSON is refused as such, whatever it says before its syntax error. Then it checks what needs
// every entry: unique names, and tensors that tile the data buffer.
class HeaderReader : public SyntaxCheck {
 public:
  HeaderReader(SafetensorsView& out, std::span<const std::byte> data, std::string_view file)
      : SyntaxCheck{{}, file}, out_(out), data_(data) {}

  // ---- nlohmann's SAX events; each returns true (parse on) or throws ----
  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(Json::number_integer_t v) { return value(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return value(v); }
  bool number_float(Json::number_float_t v, const std::string&) { return value(v); }
  bool string(std::string& v) { return value(std::move(v)); }

  bool start_object(std::size_t) {
    if (depth_ >= 2) fail("the entry '{}' nests an object deeper than a safetensors header has any", escaped(name_));
    if (depth_++ == 1) fields_.fill(Json(Json::value_t::discarded));  // discarded: not read yet
    return true;
  }
  bool key(std::string& k) {
    bool fresh = true;
    if (depth_ == 1) {
      name_ = k;
      if (in_metadata() && std::exchange(metadata_seen_, true))
        fail("the name '{}' appears twice in the header", kMetadataKey);
    } else if (in_metadata()) {
      std::tie(metadata_value_, fresh) = out_.metadata.try_emplace(k);
    } else if (const auto f = std::find(kFields.begin(), kFields.end(), k); f == kFields.end()) {
      fail("tensor '{}' has the unknown key '{}'; a tensor has dtype, shape and data_offsets", escaped(name_),
           escaped(k));
    } else {
      field_ = &fields_[static_cast<std::size_t>(f - kFields.begin())];
      fresh = field_->is_discarded();
    }
    if (!fresh) fail("the entry '{}' has the key '{}' twice", escaped(name_), escaped(k));
    return true;
  }
  bool end_object() {
    if (--depth_ == 1 && !in_metadata()) end_tensor();
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ >= 3) fail("the entry '{}' nests a list deeper than a safetensors header has any", escaped(name_));
    if (depth_ == 1 || in_metadata()) return value(Json::array());  // refused as a value of its place
    *field_ = Json::array();
    ++depth_;
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }

 private:
  static constexpr std::array<std::string_view, 3> kFields = {"dtype", "shape", "data_offsets"};

  bool in_metadata() const { return name_ == kMetadataKey; }

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    refuse(source, format, std::forward<Args>(args)...);
  }

  // A value that is not a container, or a list where an entry's or the metadata's value was expected.
  bool value(Json v) {
    if (depth_ == 1 && in_metadata()) fail("__metadata__ is {}, not a map of strings to strings", kind_of(v));
    if (depth_ == 1)
      fail("tensor '{}' is {}, not an object with dtype, shape and data_offsets", escaped(name_), kind_of(v));
    if (in_metadata() && !v.is_string())
      fail("__metadata__ maps '{}' to {}; its values must be strings", escaped(metadata_value_->first), kind_of(v));
    if (in_metadata())
      metadata_value_->second = std::move(v.get_ref<std::string&>());
    else if (depth_ == 2)
      *field_ = std::move(v);  // the value of a tensor's key
    else
      field_->push_back(std::move(v));  // an element of its list
    return true;
  }

  // The tensor's checks, in the order a reader would name its problems: its keys, then each value.
  void end_tensor() {
    const auto n = [this] { return escaped(name_); };  // only for a message: most tensors need none
    for (std::size_t f = 0; f < kFields.size(); ++f)
      if (fields_[f].is_discarded()) fail("tensor '{}' has no {}", n(), kFields[f]);
    const Json& dtype = fields_[0];
    if (dtype.is_array())
      fail("tensor '{}' has a dtype that is a list, not a string; the format's are {}", n(),
           enum_choices<SafetensorsDtype>());
    SafetensorsDtype type = SafetensorsDtype::f32;
    if (!dtype.is_string() || !parse_enum(dtype.get_ref<const std::string&>(), type))
      fail("tensor '{}' has the unknown dtype {}; the format's are {}", n(), escaped(dtype.dump()),
           enum_choices<SafetensorsDtype>());
    for (const std::size_t f : {1, 2}) {
      const Json& list = fields_[f];
      if (!list.is_array()) fail("tensor '{}' has a {} that is {}, not a list", n(), kFields[f], kind_of(list));
      const auto bad = std::find_if(list.begin(), list.end(), [](const Json& e) { return !e.is_number_unsigned(); });
      if (bad != list.end())
        fail("tensor '{}' has a {} with {}, not a non-negative integer below 2^64", n(), kFields[f],
             escaped(bad->dump()));
    }
    auto shape = fields_[1].get<std::vector<std::uint64_t>>();  // an exact copy: no spare capacity
    const Json& offsets = fields_[2];
    if (offsets.size() != 2)
      fail("tensor '{}' has {} data_offsets; it must have two, [begin, end]", n(), offsets.size());
    const std::uint64_t begin = offsets[0].get<std::uint64_t>(), end = offsets[1].get<std::uint64_t>();
    if (end < begin) fail("tensor '{}' has data_offsets [{}, {}], which end before they begin", n(), begin, end);
    std::uint64_t numel = 0, bytes = 0;
    if (!sizes_of(shape, element_bytes(type), numel, bytes))
      fail("tensor '{}' has the shape {}, whose size overflows 64 bits", n(), dims_str(shape));
    if (end - begin != bytes)
      fail("tensor '{}' is {} {} ({} bytes) but its data_offsets [{}, {}] hold {} bytes", n(), to_string(type),
           dims_str(shape), bytes, begin, end, end - begin);
    if (end > data_.size())
      fail("tensor '{}' has data_offsets [{}, {}], past the end of the {}-byte data buffer (the file is truncated)",
           n(), begin, end, data_.size());
    out_.tensors.push_back({name_, type, std::move(shape),
                            data_.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(bytes))});
  }

  SafetensorsView& out_;
  std::span<const std::byte> data_;
  int depth_ = 0;     // of the containers open: 1 in the header's object, 2 in an entry's, 3 in a list in it
  std::string name_;  // the entry being read
  bool metadata_seen_ = false;
  std::map<std::string, std::string>::iterator metadata_value_;  // the metadata key being read
  std::array<Json, 3> fields_;  // the tensor being read: its dtype, shape and data_offsets, by kFields
  Json* field_{};               // the one whose value is read
};

// How many times the key "data_offsets" appears in the header: the number of tensors in a header that is
// well formed, more in one that also has it as a value. Reserving that many before the parse keeps the
// view's vector from moving (and copying every entry) as it grows, which costs a large header both time
// and peak memory (docs/performance.md, "Decoding safetensors headers"). Inside a JSON string a quote is escaped, so
// the quoted key matches only a whole string, and a header holds at most one in 15 bytes; room reserved and never
// filled is address space, not memory.
std::size_t data_offsets_keys(std::string_view text) {
  constexpr std::string_view key = R"("data_offsets")";
  const std::boyer_moore_horspool_searcher search(key.begin(), key.end());
  std::size_t count = 0;
  for (auto at = std::search(text.begin(), text.end(), search); at != text.end();
       at = std::search(at + key.size(), text.end(), search))
    ++count;
  return count;
}

// Where a tensor's bytes begin in the data buffer.
std::uint64_t begin_of(const SafetensorsTensor& t, std::span<const std::byte> data) {
  return static_cast<std::uint64_t>(t.data.data() - data.data());
}

// A name twice: nlohmann keeps one of two equal keys without a word, and parsers that keep different ones
// read different tensors from the same bytes. The names' hashes are sorted, each beside its tensor's
// position, and names are compared only where hashes are equal: n log n, never worse (a header crafted
// for collisions costs name comparisons, as a sort of the names would), and 8 bytes a tensor. Sorting the
// names themselves took as long as the parse (docs/performance.md, "Decoding safetensors headers").
void check_unique_names(const std::vector<SafetensorsTensor>& tensors, std::string_view source) {
  // Each tensor takes more than one byte of a header, whose length is capped: its position fits 32 bits.
  static_assert(kMaxSafetensorsHeader < std::numeric_limits<std::uint32_t>::max());
  const auto name = [&](std::uint64_t key) -> const std::string& { return tensors[key & 0xffffffff].name; };
  std::vector<std::uint64_t> keys(tensors.size());  // the name's hash (32 bits), then the tensor's position
  for (std::size_t i = 0; i < keys.size(); ++i)
    keys[i] = (std::hash<std::string_view>{}(tensors[i].name) & 0xffffffff00000000) | i;
  std::sort(keys.begin(), keys.end(),
            [&](std::uint64_t a, std::uint64_t b) { return (a >> 32) != (b >> 32) ? a < b : name(a) < name(b); });
  const auto twice = std::adjacent_find(keys.begin(), keys.end(), [&](std::uint64_t a, std::uint64_t b) {
    return (a >> 32) == (b >> 32) && name(a) == name(b);
  });
  if (twice != keys.end()) refuse(source, "the name '{}' appears twice in the header", escaped(name(*twice)));
}

// Sorts the tensors by their bytes, which must tile the data buffer: from byte 0, each starting where the
// one before ends, the last ending at the end of the file. Bytes that no tensor covers are where a polyglot
// file hides another format.
void tile(std::vector<SafetensorsTensor>& tensors, std::span<const std::byte> data, std::string_view source) {
  const auto by_bytes = [&](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return std::tuple(begin_of(a, data), a.data.size(), std::string_view(a.name)) <
           std::tuple(begin_of(b, data), b.data.size(), std::string_view(b.name));
  };
  if (!std::is_sorted(tensors.begin(), tensors.end(), by_bytes))  // writers lay them out in order: no sort
    std::sort(tensors.begin(), tensors.end(), by_bytes);
  std::uint64_t covered = 0;
  const SafetensorsTensor* last = nullptr;
  for (const SafetensorsTensor& t : tensors) {
    const std::uint64_t begin = begin_of(t, data), end = begin + t.data.size();
    if (begin > covered)
      refuse(source, "the bytes [{}, {}) of the data buffer belong to no tensor: a hole before tensor '{}'", covered,
             begin, escaped(t.name));
    if (begin < covered)
      refuse(source, "tensor '{}' has data_offsets [{}, {}], which overlap tensor '{}' (it ends at {})",
             escaped(t.name), begin, end, escaped(last->name), covered);
    covered = end;
    last = &t;
  }
  if (covered < data.size()) {
    if (!last) refuse(source, "the file has {} bytes after the header but no tensor", data.size() - covered);
    refuse(source, "the file has {} bytes after the last tensor '{}' (which ends at {} of the {}-byte data buffer)",
           data.size() - covered, escaped(last->name), covered, data.size());
  }
}
}  // namespace

std::size_t element_bytes(SafetensorsDtype dtype) {
  // In the order of SafetensorsDtype: BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, I64, U64,
  // F64.
  constexpr std::array<std::size_t, 15> bytes = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};
  return bytes.at(static_cast<std::size_t>(dtype));
}

std::uint64_t SafetensorsTensor::numel() const {
  return std::accumulate(shape.begin(), shape.end(), std::uint64_t{1}, std::multiplies<>());
}

SafetensorsView decode_safetensors(std::span<const std::byte> bytes, std::string_view source) {
  if (bytes.size() < 8) refuse(source, "the file has {} bytes, fewer than the 8 of the header's length", bytes.size());
  const auto n = get_le<std::uint64_t>(bytes.data());
  if (n > kMaxSafetensorsHeader)
    refuse(source, "the header's length is {} bytes, more than the limit of {}", n, kMaxSafetensorsHeader);
  if (n > bytes.size() - 8)
    refuse(source, "the header's length is {} bytes but only {} follow (the file is truncated or not safetensors)", n,
           bytes.size() - 8);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, static_cast<std::size_t>(n));
  if (text.empty() || text.front() != '{')
    refuse(source, "the header does not start with '{{' (it starts with {})",
           text.empty() ? std::string("nothing: its length is 0")
                        : fmt::format("the byte {:#04x}", static_cast<unsigned char>(text.front())));
  if (const std::size_t bad = invalid_utf8_at(text); bad != std::string_view::npos)
    refuse(source, "the header is not valid UTF-8 (byte {} of the header, {:#04x})", bad,
           static_cast<unsigned char>(text[bad]));
  const std::span<const std::byte> data = bytes.subspan(8 + static_cast<std::size_t>(n));  // the rest of the file

  SafetensorsView out;
  out.tensors.reserve(data_offsets_keys(text));
  try {
    HeaderReader reader(out, data, source);
    Json::sax_parse(text.begin(), text.end(), &reader);
  } catch (const FormatError&) {
    SyntaxCheck syntax{{}, source};  // the first problem stands once the header is known to be JSON
    Json::sax_parse(text.begin(), text.end(), &syntax);
    throw;
  }
  check_unique_names(out.tensors, source);
  tile(out.tensors, data, source);
  return out;
}

std::vector<std::byte> encode_safetensors(const SafetensorsView& file) {
  const auto check_text = [](std::string_view text, const char* what) {
    if (invalid_utf8_at(text) != std::string_view::npos)
      fail<ValueError>("encode_safetensors: the {} '{}' is not valid UTF-8", what, escaped(text));
  };
  OrderedJson header = OrderedJson::object();
  for (const auto& [key, value] : file.metadata) {  // no __metadata__ when there is none
    check_text(key, "metadata key");
    check_text(value, "metadata value");
    header[kMetadataKey][key] = value;
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
};

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
  std::map<std::string, std::size_t> index;
  for (const auto& [p, n] : names) {
    // The part's shape as a file's, the last `rank` of (batch, rows, cols); then the whole tensor's.
    const Shape own = p->value.shape();
    const std::array<Index, 3> dims = {own.batch, own.rows, own.cols};
    std::vector<std::uint64_t> shape(dims.end() - own.rank, dims.end());
    if (n.transposed) {
      if (shape.size() != 2)
        fail<ValueError>("{}: '{}' is to be stored transposed as '{}', but it is {}, not a matrix", op, p->name,
                         escaped(n.name), own);
      std::swap(shape[0], shape[1]);
    }
    if (n.parts < 1 || n.part < 0 || n.part >= n.parts)
      fail<ValueError>("{}: '{}' is to be part {} of {} of '{}'", op, p->name, n.part, n.parts, escaped(n.name));
    const auto parts = static_cast<std::size_t>(n.parts), part = static_cast<std::size_t>(n.part);
    shape[0] *= parts;
    const auto [it, fresh] = index.try_emplace(n.name, out.size());
    if (fresh) out.push_back({n.name, shape, std::vector<Slot<T>>(parts)});
    Expected<T>& e = out[it->second];
    if (e.slots.size() != parts || e.slots[part].param || e.shape != shape) {
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

// One element of a floating-point tensor in the file, as a double (exact for every one of these types):
// its little-endian bits as the type, which converts exactly (F16 and BF16 through Eigen's half types:
// subnormals, infinities and NaNs with their sign).
using ReadElement = double (*)(const std::byte*);

template <class Bits, class Float>
double read_as(const std::byte* p) {
  return static_cast<double>(std::bit_cast<Float>(get_le<Bits>(p)));
}

ReadElement reader_of(SafetensorsDtype dtype) {
  using enum SafetensorsDtype;
  return dtype == f16    ? read_as<std::uint16_t, Eigen::half>
         : dtype == bf16 ? read_as<std::uint16_t, Eigen::bfloat16>
         : dtype == f32  ? read_as<std::uint32_t, float>
         : dtype == f64  ? read_as<std::uint64_t, double>
                         : nullptr;
}

// Where element k (row-major) of a parameter of shape `s` lies in its block of the file: at k, or at (j, i)
// of the (cols, rows) block when the file holds W^T.
std::size_t file_index(Index k, Shape s, bool transposed) {
  return static_cast<std::size_t>(transposed ? k % s.cols * s.rows + k / s.cols : k);
}

// Block `part` of the file tensor's bytes as a tensor of `shape`, transposed back when the file holds W^T.
template <class T>
TensorT<T> read_block(const SafetensorsTensor& t, Shape shape, int part, bool transposed, ReadElement read) {
  TensorT<T> out(shape);
  const std::size_t size = element_bytes(t.dtype);
  const std::byte* block = t.data.data() + static_cast<std::size_t>(part * out.numel()) * size;
  for (Index k = 0; k < out.numel(); ++k)
    out[k] = static_cast<T>(read(block + file_index(k, shape, transposed) * size));
  return out;
}

template <class T>
void write_slot(const Slot<T>& slot, SafetensorsDtype dtype, std::byte* block) {
  const TensorT<T>& v = slot.param->value;
  for (Index k = 0; k < v.numel(); ++k) {
    const std::size_t at = file_index(k, v.shape(), slot.transposed);
    if (dtype == SafetensorsDtype::f32)
      put_le(block + 4 * at, std::bit_cast<std::uint32_t>(static_cast<float>(v[k])));
    else
      put_le(block + 8 * at, std::bit_cast<std::uint64_t>(static_cast<double>(v[k])));
  }
}

constexpr std::string_view kLoadable = "F16, BF16, F32 and F64";

// The values of the parameters `e` holds, read from the file's tensor `t` and converted to T; or, as a
// sentence for the report's `mismatched`, why they cannot be loaded.
template <class T>
std::string convert(const SafetensorsTensor& t, const Expected<T>& e, std::vector<TensorT<T>>& values) {
  const std::string name = escaped(e.name);
  std::string params;  // " (the model's attn.wq, attn.wk, attn.wv)" when the names differ
  if (e.slots.size() > 1 || e.slots[0].param->name != e.name) {
    for (const Slot<T>& slot : e.slots) params += (params.empty() ? " (the model's " : ", ") + slot.param->name;
    params += ")";
  }
  const ReadElement read = reader_of(t.dtype);
  if (!read)
    return fmt::format("'{}'{} is {} in the file; tapegrad loads {}", name, params, to_string(t.dtype), kLoadable);
  if (t.shape != e.shape)
    return fmt::format("'{}'{} is {} in the file but {} in the model", name, params, dims_str(t.shape),
                       dims_str(e.shape));
  for (const Slot<T>& slot : e.slots) {
    TensorT<T> v = read_block<T>(t, slot.param->value.shape(), slot.part, slot.transposed, read);
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
  const std::string op = source.empty() ? std::string("load_safetensors")
                                        : fmt::format("load_safetensors '{}'", escaped(std::filesystem::path(source)));
  // A file that names its layout is read in that layout only: in the other, a square weight would load
  // transposed with every name and shape matching, strict or not. A file that names none (as PyTorch
  // writes them) is read as asked.
  if (const auto written = file.metadata.find("tapegrad.layout");
      written != file.metadata.end() && written->second != to_string(options.layout))
    fail<FormatError>(
        "{}: the file's weights are in the '{}' layout (its tapegrad.layout metadata) and this load asked "
        "for the '{}' layout; nothing was loaded",
        op, escaped(written->second), to_string(options.layout));
  const std::vector<Expected<T>> expected = expected_tensors(std::as_const(model), options.layout, op);
  std::map<std::string_view, const SafetensorsTensor*> by_name;
  for (const auto& t : file.tensors) by_name.emplace(t.name, &t);

  // Everything is checked and converted before the module changes: all or nothing.
  LoadReport report;
  std::map<const Parameter<T>*, TensorT<T>> staged;
  for (const Expected<T>& e : expected) {
    const auto found = by_name.extract(e.name);  // what is left in by_name, the model does not have
    if (found.empty()) {
      report.missing.push_back(e.name);
      continue;
    }
    const SafetensorsTensor& t = *found.mapped();
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
    if (by_name.count(t.name)) report.unexpected.push_back(t.name);

  if (options.strict && !report.clean()) fail<FormatError>("{}: {}; nothing was loaded", op, report.problems());
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
  std::vector<std::vector<std::byte>> data(expected.size());  // each tensor's bytes, which the view points into
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const Expected<T>& e = expected[i];
    const std::size_t block = element_bytes(dtype) * static_cast<std::size_t>(e.slots[0].param->value.numel());
    data[i].resize(block * e.slots.size());  // its parts are equal blocks of it
    for (std::size_t k = 0; k < e.slots.size(); ++k) write_slot(e.slots[k], dtype, data[i].data() + k * block);
    file.tensors.push_back({e.name, dtype, e.shape, data[i]});
  }
  return encode_safetensors(file);
}

template <class T>
void save_safetensors(const std::filesystem::path& path, const Module<T>& model,
                      const SafetensorsSaveOptions& options) {
  const std::vector<std::byte> bytes = encode_safetensors(model, options);
  write_file(path, {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, Durability::durable,
             "save_safetensors");
}

template <class T>
LoadReport load_safetensors(const SafetensorsView& file, Module<T>& model, const SafetensorsLoadOptions& options) {
  return load_into(file, model, options, "");
}

template <class T>
LoadReport load_safetensors(const std::filesystem::path& path, Module<T>& model,
                            const SafetensorsLoadOptions& options) {
  const std::string bytes = read_file(path, options.max_bytes, "load_safetensors");
  const SafetensorsView file = decode_safetensors(std::as_bytes(std::span<const char>(bytes)), path.string());
  return load_into(file, model, options, path.string());
}

SafetensorsFile read_safetensors(const std::filesystem::path& path, std::size_t max_bytes) {
  SafetensorsFile f;
  f.source = path.string();
  f.bytes = std::make_shared<const std::string>(read_file(path, max_bytes, "read_safetensors"));
  f.view = decode_safetensors(std::as_bytes(std::span<const char>(*f.bytes)), f.source);
  return f;
}

template <class T>
TensorT<T> SafetensorsFile::tensor(std::string_view name) const {
  const auto it = std::find_if(view.tensors.begin(), view.tensors.end(), [&](const auto& t) { return t.name == name; });
  if (it == view.tensors.end())
    fail<NameError>("safetensors '{}': no tensor named '{}' ({} tensors)", escaped(std::filesystem::path(source)),
                    escaped(name), view.tensors.size());
  const SafetensorsTensor& t = *it;
  const ReadElement read = reader_of(t.dtype);
  if (!read) refuse(source, "'{}' is {}; tapegrad reads {}", escaped(name), to_string(t.dtype), kLoadable);
  if (t.shape.size() > 3)
    refuse(source, "'{}' is {}, of rank {}; a tensor has rank 3 at most", escaped(name), dims_str(t.shape),
           t.shape.size());
  for (const std::uint64_t d : t.shape)
    if (d > static_cast<std::uint64_t>(std::numeric_limits<Index>::max()))
      refuse(source, "'{}' is {}, a dimension past what a tensor can index", escaped(name), dims_str(t.shape));
  std::array<Index, 3> dims = {1, 1, 1};  // (batch, rows, cols), ending with the file's; a scalar is vec(1)
  std::copy(t.shape.begin(), t.shape.end(), dims.end() - t.shape.size());
  const Shape shape{std::max(1, static_cast<int>(t.shape.size())), dims[0], dims[1], dims[2]};
  return read_block<T>(t, shape, 0, false, read);
}

template TensorT<float> SafetensorsFile::tensor(std::string_view) const;
template TensorT<double> SafetensorsFile::tensor(std::string_view) const;
template std::vector<std::byte> encode_safetensors(const Module<float>&, const SafetensorsSaveOptions&);
template std::vector<std::byte> encode_safetensors(const Module<double>&, const SafetensorsSaveOptions&);
template void save_safetensors(const std::filesystem::path&, const Module<float>&, const SafetensorsSaveOptions&);
template void save_safetensors(const std::filesystem::path&, const Module<double>&, const SafetensorsSaveOptions&);
template LoadReport load_safetensors(const SafetensorsView&, Module<float>&, const SafetensorsLoadOptions&);
template LoadReport load_safetensors(const SafetensorsView&, Module<double>&, const SafetensorsLoadOptions&);
template LoadReport load_safetensors(const std::filesystem::path&, Module<float>&, const SafetensorsLoadOptions&);
template LoadReport load_safetensors(const std::filesystem::path&, Module<double>&, const SafetensorsLoadOptions&);

}  // namespace tapegrad
