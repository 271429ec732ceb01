// Checkpoints: the file format (header + CRC-32), atomic writes, the invariants every checkpoint keeps,
// what `inspect` shows, and rebuilding a model from its record. The payload's layout is in serialize.hpp;
// the parts' entries, snapshot and restore in state.cpp. See checkpoint.hpp.
#include "tapegrad/train/checkpoint/checkpoint.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <ostream>
#include <set>
#include <stdexcept>
#include <variant>

#include "tapegrad/core/crc32.hpp"
#include "tapegrad/core/descriptor.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/checkpoint/serialize.hpp"

namespace tapegrad {
namespace {

using namespace checkpoint_detail;
using detail::get_le;
using detail::put_le;

constexpr char kMagic[8] = {'T', 'G', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr std::size_t kHeaderBytes = 28;

// ---- bytes ------------------------------------------------------------------------------------------

// An output stream buffer that appends to a byte vector: the payload is written once, where the file's
// bytes will be, not into a string stream that is then copied twice (its growth, then str()). cereal writes
// through sputn alone, so xsputn is all it has (a single character put would fail, and cereal would say so).
class AppendBytes final : public std::streambuf {
 public:
  explicit AppendBytes(std::vector<std::byte>& out) : out_(out) {}

 private:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const auto* b = reinterpret_cast<const std::byte*>(s);
    out_.insert(out_.end(), b, b + n);
    return n;
  }
  std::vector<std::byte>& out_;
};

}  // namespace

std::vector<std::byte> encode_checkpoint(const Checkpoint& c) {
  // The file's size, reserved before the payload is written: the values dominate (4 or 8 bytes each, a text
  // some 16); the names, shapes and settings are small beside them.
  std::size_t estimate = kHeaderBytes + 4096;
  for (const StateEntry& e : c.entries) {
    // StateValue: f32 first, texts last
    const std::size_t each = e.value.index() == 0 ? sizeof(float) : e.value.index() == 4 ? 16 : 8;
    estimate += 64 + e.name.size() + each * static_cast<std::size_t>(value_count(e.value));
  }
  std::vector<std::byte> out(kHeaderBytes);
  out.reserve(estimate);
  {
    AppendBytes sink(out);
    std::ostream payload_stream(&sink);
    cereal::PortableBinaryOutputArchive ar(payload_stream);
    ar(c);
  }
  const std::size_t payload = out.size() - kHeaderBytes;
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put_le<std::uint32_t>(out.data() + 8, kCheckpointFormat);  // the flags, at 12, stay 0
  put_le<std::uint64_t>(out.data() + 16, payload);
  put_le<std::uint32_t>(out.data() + 24, Crc32().add(out.data() + kHeaderBytes, payload).value());
  return out;
}

Checkpoint decode_checkpoint(std::span<const std::byte> bytes, std::string_view source_name) {
  const std::string source = escaped(std::filesystem::path(source_name));  // a file name: any bytes may be in it
  if (bytes.empty()) fail<FormatError>("load '{}': the file is empty", source);
  if (std::memcmp(bytes.data(), kMagic, std::min(bytes.size(), sizeof kMagic)) != 0)
    fail<FormatError>(
        "load '{}': not a tapegrad checkpoint (it starts with {:02x}, a checkpoint with 54 47 43 4b 50 54 0d 0a)",
        source,
        fmt::join(
            std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), std::min<std::size_t>(bytes.size(), 8)),
            " "));
  if (bytes.size() < kHeaderBytes)
    fail<FormatError>("load '{}': truncated: {} bytes, not even the {}-byte header", source, bytes.size(),
                      kHeaderBytes);
  const auto version = get_le<std::uint32_t>(bytes.data() + 8);
  const auto flags = get_le<std::uint32_t>(bytes.data() + 12);
  const auto length = get_le<std::uint64_t>(bytes.data() + 16);
  const auto crc = get_le<std::uint32_t>(bytes.data() + 24);
  if (version > kCheckpointFormat)
    fail<FormatError>("load '{}': format version {} is newer than this tapegrad reads ({}); update tapegrad", source,
                      version, kCheckpointFormat);
  if (version == 0) fail<FormatError>("load '{}': format version 0 does not exist; the header is corrupt", source);
  if (version < kCheckpointFormat)  // tapegrad 0.1 and 0.2: examples/convert reads them
    fail<FormatError>(
        "load '{}': a tapegrad 0.{} checkpoint (format {}); convert it with: "
        "build/examples/convert_checkpoint '{}' NEW",
        source, version, version, source);
  if (flags != 0) fail<FormatError>("load '{}': unknown flags {:#x} in the header", source, flags);
  const std::size_t available = bytes.size() - kHeaderBytes;
  if (length > available)
    fail<FormatError>("load '{}': truncated: the header promises {} payload bytes but only {} follow", source, length,
                      available);
  if (length < available)
    fail<FormatError>("load '{}': {} stray bytes after the {}-byte payload", source, available - length, length);
  const std::span<const std::byte> payload = bytes.subspan(kHeaderBytes);
  const std::uint32_t actual = Crc32().add(payload.data(), available).value();
  if (actual != crc)
    fail<FormatError>(
        "load '{}': checksum mismatch (the header says {:08x}, the payload has {:08x}): the file is corrupt", source,
        crc, actual);

  Checkpoint c;
  try {
    InArchive ar(payload);
    std::uint32_t said = 0;
    ar(said);
    if (said != version) fail<FormatError>("the payload says format {} but the header {}", said, version);
    load_format3(ar, c);
    if (ar.bytes_left() != 0) fail<FormatError>("the payload has bytes after the checkpoint");
  } catch (const FormatError& e) {
    fail<FormatError>("load '{}': corrupt payload: {}", source, e.what());
  } catch (const cereal::Exception& e) {
    fail<FormatError>("load '{}': corrupt payload: {}", source, e.what());
  } catch (const std::bad_alloc&) {
    fail<FormatError>("load '{}': corrupt payload: it asks for more memory than there is", source);
  }
  (void)detail::StateIndex(c, fmt::format("load '{}'", source));  // well-formed, but could a run have written it?
  return c;
}

void save_checkpoint(const std::filesystem::path& path, const Checkpoint& c) {
  const std::vector<std::byte> bytes = encode_checkpoint(c);
  write_file(path, {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, Durability::durable, "save_checkpoint");
}

Checkpoint read_checkpoint(const std::filesystem::path& path, std::size_t max_bytes) {
  const std::string bytes = read_file(path, max_bytes, "load");
  return decode_checkpoint(std::as_bytes(std::span<const char>(bytes)), path.string());
}

// ---- the invariants, the parts -------------------------------------------------------------------------

namespace {

// The model part's tensors, in the file's order.
std::vector<const StateEntry*> model_weights(const Checkpoint& c) {
  std::vector<const StateEntry*> out;
  const std::string prefix = std::string(kModelPart) + ".";
  for (const StateEntry& e : c.entries)
    if (e.name.starts_with(prefix) && e.value.index() <= 1) out.push_back(&e);
  return out;
}

Index parameter_values_held(const Checkpoint& c) {
  Index held = 0;
  for (const StateEntry* e : model_weights(c)) held += value_count(e->value);
  return held;
}

std::string_view part_of(std::string_view name) { return name.substr(0, name.find('.')); }

}  // namespace

std::string_view tapegrad_version() { return TAPEGRAD_VERSION; }  // defined by CMakeLists.txt

std::vector<std::string> Checkpoint::parts() const {
  std::vector<std::string> out;
  std::set<std::string_view> seen;
  for (const StateEntry& e : entries)
    if (seen.insert(part_of(e.name)).second) out.emplace_back(part_of(e.name));
  return out;
}

bool Checkpoint::has(std::string_view part) const {
  return std::any_of(entries.begin(), entries.end(), [&](const StateEntry& e) { return part_of(e.name) == part; });
}

const StateEntry* Checkpoint::find(std::string_view name) const {
  const auto it = std::find_if(entries.begin(), entries.end(), [&](const StateEntry& e) { return e.name == name; });
  return it == entries.end() ? nullptr : &*it;
}

StateEntry* Checkpoint::find(std::string_view name) { return const_cast<StateEntry*>(std::as_const(*this).find(name)); }

void check_checkpoint(const Checkpoint& c) { (void)detail::StateIndex(c); }

// ---- what a file holds, for people -------------------------------------------------------------------

namespace {

// "1, 2, 3" or "4 values": an entry's values when there are few, escaped; a tensor's norm and how many of its values
// are not finite.
std::string shown_values(const StateValue& v) {
  constexpr std::size_t kShown = 8;
  return std::visit(
      [&](const auto& x) -> std::string {
        using V = std::remove_cvref_t<decltype(x)>;
        if constexpr (requires { x.numel(); }) {
          double sq = 0;
          for_each_number(v, [&](double e) { sq += e * e; });
          const Index bad = non_finite_count(v);
          return fmt::format("norm {:.6g}{}", std::sqrt(sq),
                             bad ? fmt::format("  ({} non-finite values: NaN or Inf)", bad) : "");
        } else if (x.size() > kShown) {
          return fmt::format("{} values", x.size());
        } else if constexpr (std::is_same_v<V, std::vector<std::string>>) {
          std::vector<std::string> text;
          for (const std::string& item : x) text.push_back(escaped(item, 60));
          return fmt::format("{}", fmt::join(text, ", "));
        } else {
          return fmt::format("{}", fmt::join(x, ", "));
        }
      },
      v);
}

// "optimizer: adam after 40 steps (lr 0.01, ...); schedule constant; 12 buffers": the optimizer's part in a line.
std::string describe_optimizer(const Checkpoint& c) {
  try {
    const OptimizerState<double> o = read_optimizer_state<double>(c);
    std::size_t buffers = 0;
    for (const auto& entry : o.per_param) buffers += entry.second.size();
    return fmt::format("optimizer: {} after {} steps ({}); schedule {}; {} buffers\n", escaped(o.kind), o.step,
                       escaped(describe_settings(o.hyperparameters)), escaped(o.schedule.describe()), buffers);
  } catch (const FormatError& e) {
    return fmt::format("optimizer: the part 'optimizer' does not read as an optimizer's state: {}\n", e.what());
  }
}

}  // namespace

std::string describe_checkpoint(const Checkpoint& c) {
  std::string s = fmt::format("tapegrad checkpoint, format {}, written by tapegrad {}\nmodel: {}\n", kCheckpointFormat,
                              escaped(c.tapegrad_version), escaped(c.model.describe()));
  const std::vector<const StateEntry*> weights = model_weights(c);
  s += fmt::format("parameters: {} tensors, {} values, crc32 {:08x}\n", weights.size(), parameter_values_held(c),
                   weights_crc32(c));
  Index non_finite = 0;
  for (const StateEntry* e : weights) non_finite += non_finite_count(e->value);
  if (non_finite)
    s += fmt::format("warning: {} parameter values are not finite; loading refuses them unless asked\n", non_finite);
  for (const auto& [k, v] : c.metadata) s += fmt::format("metadata: {} = {}\n", escaped(k), escaped(v));
  const std::vector<std::string> parts = c.parts();
  if (parts.empty() || (parts.size() == 1 && parts[0] == kModelPart)) s += "training state: none (weights only)\n";
  if (c.has(kOptimizerPart)) s += describe_optimizer(c);
  // Every part entry by entry (the model's weights, a trainer's options, step, data order and curve, an
  // optimizer's buffers, a loop's step and streams, a user's own), in one pass over the entries: a file of
  // many parts is described in time linear in its size.
  std::map<std::string_view, std::string> listed;
  for (const StateEntry& e : c.entries)
    listed[part_of(e.name)] +=
        fmt::format("  {:<32} {:<14} {}\n", escaped(e.name), describe_value(e.value), shown_values(e.value));
  for (const std::string& part : parts) s += fmt::format("part {}:\n{}", escaped(part), listed[part]);
  return s;
}

// ---- model_from_checkpoint's helpers, reports, checksums -----------------------------------------------

namespace detail {

void check_count(const Checkpoint& c, Index count) {
  if (const Index held = parameter_values_held(c); count != held)
    fail<FormatError>("load: the configuration {} implies {} parameter values but the file holds {}",
                      c.model.describe(), count, held);
}

void build_within_budget(const Checkpoint& c, const std::function<void()>& build) {
  const Index held = parameter_values_held(c);
  const std::string what =
      fmt::format("load: building the model {} from a file of {} parameter values", c.model.describe(), held);
  try {
    const TensorBudget budget(3 * sizeof(double) * static_cast<std::size_t>(held) + kBuildSlackBytes, what);
    build();
  } catch (const std::length_error&) {  // a size no vector can hold: refused before any budget is asked
    fail<LimitError>("{}: one of its tensors would be larger than memory can address", what);
  }
}

}  // namespace detail

template <class T>
std::uint32_t checksum(const TensorT<T>& t) {
  Crc32 crc;
  for (Index v : {Index(t.rank()), t.batch(), t.rows(), t.cols()}) crc.add_le(static_cast<std::uint64_t>(v));
  return crc.add(t.data(), static_cast<std::size_t>(t.numel()) * sizeof(T)).value();
}

std::uint32_t weights_crc32(const Checkpoint& c) {
  Crc32 crc;
  for (const StateEntry* e : model_weights(c))
    for_each_number(e->value, [&](double v) { crc.add_le(std::bit_cast<std::uint64_t>(v)); });
  return crc.value();
}

template std::uint32_t checksum(const TensorT<float>&);
template std::uint32_t checksum(const TensorT<double>&);

}  // namespace tapegrad
