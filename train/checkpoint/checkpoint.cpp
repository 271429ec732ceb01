// Checkpoints: the file format (header + CRC-32), atomic writes, and strict all-or-nothing loading of
// any model and any training run. The payload's layout is in serialize.hpp (format 2) and
// format1.cpp (format 1). See checkpoint.hpp.
#include "tapegrad/train/checkpoint/checkpoint.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "tapegrad/core/crc32.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/checkpoint/serialize.hpp"

namespace tapegrad {
namespace {

using namespace checkpoint_detail;

constexpr char kMagic[8] = {'T', 'G', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr std::size_t kHeaderBytes = 28;

// ---- bytes ------------------------------------------------------------------------------------------

template <class U>
void put_le(std::vector<std::byte>& out, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

std::uint32_t crc32_of(const std::byte* data, std::size_t n) { return Crc32().add(data, n).value(); }

template <class U>
U get_le(const std::byte* p) {
  U v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) v |= static_cast<U>(std::to_integer<unsigned>(p[i])) << (8 * i);
  return v;
}

std::string hex_prefix(std::span<const std::byte> bytes) {
  std::string s;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 8); ++i)
    s += fmt::format("{}{:02x}", i ? " " : "", std::to_integer<unsigned>(bytes[i]));
  return s;
}

// ---- building and applying --------------------------------------------------------------------------

template <class T>
std::string dtype_of() {
  return std::is_same_v<T, float> ? "f32" : "f64";
}

template <class T>
TensorRecord record(const std::string& name, const TensorT<T>& t) {
  return {name, dtype_of<T>(), t.shape(), std::vector<double>(t.data(), t.data() + t.numel())};
}

// The record's values into a tensor of its shape (check_checkpoint has made sure they fit).
template <class T>
void copy_values(const TensorRecord& r, TensorT<T>& t) {
  if (r.shape != t.shape() || static_cast<Index>(r.values.size()) != t.numel())
    fail<FormatError>("load: tensor '{}' holds {} values for {}, not {}", escaped(r.name), r.values.size(), r.shape, t.shape());
  for (Index i = 0; i < t.numel(); ++i) t[i] = static_cast<T>(r.values[static_cast<std::size_t>(i)]);
}

std::size_t count_non_finite(const TensorRecord& r) {
  return static_cast<std::size_t>(std::count_if(r.values.begin(), r.values.end(), [](double v) { return !std::isfinite(v); }));
}

// FormatError naming the first of `records` (those whose names are in `names`, or all when it is null) that
// holds a NaN or Inf, unless the caller allows it.
void refuse_non_finite(const std::vector<TensorRecord>& records, const std::set<std::string>* names, const char* what,
                       const LoadOptions& options) {
  if (options.allow_non_finite) return;
  for (const auto& r : records)
    if (!names || names->count(r.name))
      if (const std::size_t bad = count_non_finite(r); bad > 0)
        fail<FormatError>("load: {} '{}' holds {} non-finite values (NaN or Inf) of {}; nothing was loaded "
                          "(LoadOptions::allow_non_finite loads it anyway)",
                          what, escaped(r.name), bad, r.values.size());
}

// Names of `items` that occur more than once, in order, each once: a sort, not a quadratic scan (a forged
// file may hold a hundred thousand).
template <class Items, class NameOf>
std::vector<std::string> repeated_names(const Items& items, NameOf name_of) {
  std::vector<std::string_view> names;
  names.reserve(items.size());
  for (const auto& item : items) names.push_back(name_of(item));
  std::sort(names.begin(), names.end());
  std::vector<std::string> repeated;
  for (std::size_t i = 1; i < names.size(); ++i)
    if (names[i] == names[i - 1] && (repeated.empty() || repeated.back() != names[i])) repeated.emplace_back(names[i]);
  return repeated;
}

void check_unique(const std::vector<TensorRecord>& records, const char* what) {
  const auto repeated = repeated_names(records, [](const TensorRecord& r) -> std::string_view { return r.name; });
  if (!repeated.empty()) fail<FormatError>("checkpoint: {} {} more than once", what, quoted_list(repeated));
}

void check_unique(const Settings& settings, const char* what) {
  const auto repeated = repeated_names(settings, [](const Setting& s) -> std::string_view { return s.name; });
  if (!repeated.empty()) fail<FormatError>("checkpoint: {} {} more than once", what, quoted_list(repeated));
}

void check_record(const TensorRecord& r, const char* what) {
  if (r.dtype != "f32" && r.dtype != "f64")
    fail<FormatError>("checkpoint: {} '{}' has the element type '{}'; f32 and f64 are known", what, escaped(r.name),
                      escaped(r.dtype));
  if (!r.shape.valid())
    fail<FormatError>("checkpoint: {} '{}' has an invalid shape (rank {}, {} x {} x {})", what, escaped(r.name),
                      r.shape.rank, r.shape.batch, r.shape.rows, r.shape.cols);
  if (static_cast<Index>(r.values.size()) != r.shape.numel())
    fail<FormatError>("checkpoint: {} '{}' is {} ({} values) but holds {} values", what, escaped(r.name), r.shape,
                      r.shape.numel(), r.values.size());
}

void check_training(const TrainingRecord& t) {
  const OptimizerRecord& o = t.optimizer;
  check_unique(o.hyperparameters, "the optimizer's hyperparameters name");
  check_unique(o.schedule.settings, "the schedule's settings name");
  for (const auto& b : o.buffers) {
    check_record(b, "optimizer buffer");
    const auto slash = b.name.rfind('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == b.name.size())
      fail<FormatError>("checkpoint: optimizer buffer '{}' is not named '<parameter>/<buffer>'", escaped(b.name));
  }
  check_unique(o.buffers, "the optimizer buffers name");
  const double max_steps = TrainOptions::kMaxSteps;
  if (o.step < 0 || static_cast<double>(o.step) > max_steps)
    fail<FormatError>("checkpoint: the optimizer's step is {}, outside [0, {}]", o.step, to_text(max_steps));
  const TrainerState& s = t.trainer;
  try {
    check_fields(s.options, "checkpoint: the trainer's options");
  } catch (const ValueError& e) {
    throw FormatError(e.what());
  }
  if (s.step < 0 || s.step > s.options.steps)
    fail<FormatError>("checkpoint: the trainer is at step {}, outside its run of {} steps", s.step, s.options.steps);
  if (s.window_steps < 0 || s.window_steps > s.step)
    fail<FormatError>("checkpoint: the trainer's window holds {} steps, outside [0, {}]", s.window_steps, s.step);
  const auto& order = s.data_order;
  // An empty order is a computed one (Sampler): its position is checked against the data when it resumes.
  if (order.epoch < 0 || order.cursor < 0 || (!order.order.empty() && order.cursor > static_cast<Index>(order.order.size())))
    fail<FormatError>("checkpoint: the data order is at epoch {}, position {} of {}", order.epoch, order.cursor,
                      order.order.size());
  Index previous = 0;
  for (const CurvePoint& p : s.curve) {
    if (p.step < previous || p.step > s.step)
      fail<FormatError>("checkpoint: a curve point is at step {}, out of order or past the trainer's step {}", p.step, s.step);
    previous = p.step;
  }
}

// Matches the file's parameters against the model's, without changing anything. Another element type is
// a mismatch unless the options convert it.
template <class T>
LoadReport match(const Checkpoint& c, const std::vector<Parameter<T>*>& params, const LoadOptions& options) {
  LoadReport report;
  std::map<std::string, const TensorRecord*> by_name;
  for (const auto& r : c.parameters) by_name.emplace(r.name, &r);
  std::set<std::string> seen;
  for (const auto* p : params) {
    const auto it = by_name.find(p->name);
    if (it == by_name.end()) {
      report.missing.push_back(p->name);
      continue;
    }
    seen.insert(p->name);
    const TensorRecord& r = *it->second;
    const bool same_dtype = r.dtype == dtype_of<T>();
    if (!same_dtype && !options.convert_dtype)
      report.mismatched.push_back(fmt::format("'{}' is {} {} in the file but {} {} in the model", escaped(p->name), r.dtype,
                                              r.shape, dtype_of<T>(), p->value.shape()));
    else if (r.shape != p->value.shape())
      report.mismatched.push_back(
          fmt::format("'{}' is {} in the file but {} in the model", escaped(p->name), r.shape, p->value.shape()));
    else {
      report.loaded.push_back(p->name);
      if (!same_dtype)
        report.converted.push_back(fmt::format("'{}' from {} to {}", escaped(p->name), r.dtype, dtype_of<T>()));
    }
  }
  for (const auto& r : c.parameters)
    if (!seen.count(r.name)) report.unexpected.push_back(r.name);
  return report;
}

template <class T>
void apply_weights(const Checkpoint& c, const std::vector<Parameter<T>*>& params, const LoadReport& report) {
  const std::set<std::string> load(report.loaded.begin(), report.loaded.end());
  std::map<std::string_view, Parameter<T>*> by_name;
  for (auto* p : params) by_name.emplace(p->name, p);
  for (const auto& r : c.parameters)
    if (load.count(r.name)) copy_values(r, by_name.at(r.name)->value);
}

template <class T>
OptimizerState<T> optimizer_state(const OptimizerRecord& o) {
  OptimizerState<T> s;
  s.kind = o.kind;
  s.hyperparameters = o.hyperparameters;
  s.schedule = o.schedule;
  s.step = o.step;
  for (const auto& b : o.buffers) {
    const auto slash = b.name.rfind('/');
    if (slash == std::string::npos)
      fail<FormatError>("optimizer buffer '{}' is not named '<parameter>/<buffer>'", escaped(b.name));
    TensorT<T> tensor(b.shape);
    copy_values(b, tensor);
    s.per_param[b.name.substr(0, slash)][b.name.substr(slash + 1)] = std::move(tensor);
  }
  return s;
}

// "setting 'residual' is true in the file but false in the model; ..." for two records of one kind.
std::string record_differences(const ModelRecord& file, const ModelRecord& model) {
  if (file.kind != model.kind)
    return fmt::format("the file holds a model of kind '{}' but the trainer's is of kind '{}'",
                       file.kind.empty() ? "(not described)" : escaped(file.kind),
                       model.kind.empty() ? "(not described)" : escaped(model.kind));
  std::vector<std::string> out;
  for (const auto& s : model.config) {
    const std::string* theirs = find_setting(file.config, s.name);
    if (!theirs)
      out.push_back(fmt::format("setting '{}' is missing from the file", s.name));
    else if (*theirs != s.value)
      out.push_back(fmt::format("setting '{}' is {} in the file but {} in the model", s.name, escaped(*theirs), s.value));
  }
  std::vector<std::string> unknown;
  for (const auto& s : file.config)
    if (!find_setting(model.config, s.name)) unknown.push_back(s.name);
  if (!unknown.empty()) out.push_back("the model has no setting " + quoted_list(unknown));
  return fmt::format("{}", fmt::join(out, "; "));
}

double norm(const TensorRecord& r) {
  double sq = 0;
  for (double v : r.values) sq += v * v;
  return std::sqrt(sq);
}

}  // namespace

// ---- public API ----------------------------------------------------------------------------------------

std::string_view tapegrad_version() { return TAPEGRAD_VERSION; }  // defined by CMakeLists.txt

void check_checkpoint(const Checkpoint& c) {
  check_unique(c.model.config, "the model's configuration names");
  for (const auto& r : c.parameters) check_record(r, "parameter");
  check_unique(c.parameters, "the parameter list names");
  if (c.training) check_training(*c.training);
}

namespace {

// An output stream buffer that appends to a byte vector: the payload is written once, where the file's
// bytes will be, not into a string stream that is then copied twice (its growth, then str()).
class AppendBytes final : public std::streambuf {
 public:
  explicit AppendBytes(std::vector<std::byte>& out) : out_(out) {}

 private:
  int_type overflow(int_type ch) override {
    if (!traits_type::eq_int_type(ch, traits_type::eof())) out_.push_back(static_cast<std::byte>(ch));
    return traits_type::not_eof(ch);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const auto* b = reinterpret_cast<const std::byte*>(s);
    out_.insert(out_.end(), b, b + n);
    return n;
  }
  std::vector<std::byte>& out_;
};

// The payload's size before it is written, to reserve it: the values dominate (a float or a double each);
// the names, shapes, settings and curve are small beside them.
std::size_t payload_estimate(const Checkpoint& c) {
  std::size_t bytes = 4096;
  auto add = [&](const std::vector<TensorRecord>& records) {
    for (const TensorRecord& t : records) bytes += 64 + t.name.size() + t.values.size() * (t.dtype == "f32" ? 4 : 8);
  };
  add(c.parameters);
  if (c.training) {
    add(c.training->optimizer.buffers);
    bytes += 8 * c.training->trainer.data_order.order.size() + 64 * c.training->trainer.curve.size();
  }
  return bytes;
}

}  // namespace

std::vector<std::byte> encode_checkpoint(const Checkpoint& c) {
  std::vector<std::byte> out(kHeaderBytes);
  out.reserve(kHeaderBytes + payload_estimate(c));
  {
    AppendBytes sink(out);
    std::ostream payload_stream(&sink);
    cereal::PortableBinaryOutputArchive ar(payload_stream);
    NodeFree node_free(ar);
    save_as(node_free, c, kCheckpointFormat);  // whatever it was read from, it is written as today's
  }
  const std::size_t payload = out.size() - kHeaderBytes;
  std::vector<std::byte> header;
  for (char m : kMagic) header.push_back(static_cast<std::byte>(m));
  put_le<std::uint32_t>(header, kCheckpointFormat);
  put_le<std::uint32_t>(header, 0);
  put_le<std::uint64_t>(header, payload);
  put_le<std::uint32_t>(header, crc32_of(out.data() + kHeaderBytes, payload));
  std::copy(header.begin(), header.end(), out.begin());
  return out;
}

Checkpoint decode_checkpoint(std::span<const std::byte> bytes, std::string_view source_name) {
  const std::string source = escaped(source_name);  // a file name: the user's, and any bytes may be in it
  if (bytes.empty()) fail<FormatError>("load '{}': the file is empty", source);
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    if (bytes.size() < sizeof kMagic && std::memcmp(bytes.data(), kMagic, bytes.size()) == 0)
      fail<FormatError>("load '{}': truncated: {} bytes, not even the {}-byte header", source, bytes.size(), kHeaderBytes);
    fail<FormatError>("load '{}': not a tapegrad checkpoint (it starts with {}, a checkpoint with 54 47 43 4b 50 54 0d 0a)",
                      source, hex_prefix(bytes));
  }
  if (bytes.size() < kHeaderBytes)
    fail<FormatError>("load '{}': truncated: {} bytes, not even the {}-byte header", source, bytes.size(), kHeaderBytes);
  const auto version = get_le<std::uint32_t>(bytes.data() + 8);
  const auto flags = get_le<std::uint32_t>(bytes.data() + 12);
  const auto length = get_le<std::uint64_t>(bytes.data() + 16);
  const auto crc = get_le<std::uint32_t>(bytes.data() + 24);
  if (version > kCheckpointFormat)
    fail<FormatError>("load '{}': format version {} is newer than this tapegrad reads ({}); update tapegrad", source,
                      version, kCheckpointFormat);
  if (version == 0) fail<FormatError>("load '{}': format version 0 does not exist; the header is corrupt", source);
  if (flags != 0) fail<FormatError>("load '{}': unknown flags {:#x} in the header", source, flags);
  const std::size_t available = bytes.size() - kHeaderBytes;
  if (length > available)
    fail<FormatError>("load '{}': truncated: the header promises {} payload bytes but only {} follow", source, length,
                      available);
  if (length < available)
    fail<FormatError>("load '{}': {} stray bytes after the {}-byte payload", source, available - length, length);
  const std::byte* payload = bytes.data() + kHeaderBytes;
  const std::uint32_t actual = crc32_of(payload, available);
  if (actual != crc)
    fail<FormatError>("load '{}': checksum mismatch (the header says {:08x}, the payload has {:08x}): the file is corrupt",
                      source, crc, actual);

  Checkpoint c;
  try {
    std::istringstream in(std::string(reinterpret_cast<const char*>(payload), available), std::ios::binary);
    InArchive ar(in, available);
    ar(c.format_version);
    if (c.format_version != version)
      fail<FormatError>("the payload says format {} but the header {}", c.format_version, version);
    if (version == 1)
      load_format1(ar, c);
    else
      load_format2(ar, c);
    if (in.peek() != std::char_traits<char>::eof()) fail<FormatError>("the payload has bytes after the checkpoint");
  } catch (const FormatError& e) {
    fail<FormatError>("load '{}': corrupt payload: {}", source, e.what());
  } catch (const cereal::Exception& e) {
    fail<FormatError>("load '{}': corrupt payload: {}", source, e.what());
  } catch (const std::bad_alloc&) {
    fail<FormatError>("load '{}': corrupt payload: it asks for more memory than there is", source);
  }
  try {
    check_checkpoint(c);
  } catch (const FormatError& e) {  // well-formed, but not a checkpoint any run could have written
    std::string_view why = e.what();
    if (why.starts_with("checkpoint: ")) why.remove_prefix(12);
    fail<FormatError>("load '{}': {}", source, why);
  }
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

template <class T>
Checkpoint snapshot(const Module<T>& model) {
  Checkpoint c;
  c.model = model.model_record();
  for (const auto* p : model.parameters()) c.parameters.push_back(record(p->name, p->value));
  return c;
}

namespace {
template <class T>
OptimizerRecord optimizer_record(const Optimizer<T>& optimizer) {
  const OptimizerState<T> s = optimizer.state();
  OptimizerRecord r;
  r.kind = s.kind;
  r.hyperparameters = s.hyperparameters;
  r.schedule = s.schedule;
  r.step = s.step;
  for (const auto& [param, buffers] : s.per_param)
    for (const auto& [buffer, tensor] : buffers) r.buffers.push_back(record(param + "/" + buffer, tensor));
  return r;
}
}  // namespace

Checkpoint snapshot(const TrainerBase& trainer) {
  Checkpoint c = snapshot(trainer.model());
  c.training = TrainingRecord{optimizer_record(trainer.optimizer()), trainer.state()};
  return c;
}

template <class T>
Checkpoint snapshot(const Module<T>& model, const Optimizer<T>& optimizer, const LoopState& loop) {
  if (loop.step < 0 || static_cast<double>(loop.step) > TrainOptions::kMaxSteps)
    fail<ValueError>("snapshot: the loop's step must be in [0, {}], got {}", to_text(TrainOptions::kMaxSteps), loop.step);
  Checkpoint c = snapshot(model);
  TrainingRecord t{optimizer_record(optimizer), TrainerState{}};
  // A loop has no run length of its own: recorded as a run that has reached its step, so the counters'
  // checks hold, and a Trainer, whose options differ, refuses to resume it.
  t.trainer.options.steps = loop.step;
  t.trainer.step = loop.step;
  t.trainer.rng = loop.rng;
  t.trainer.data_order = loop.data_order;
  c.training = std::move(t);
  c.metadata[std::string(kLoopMetadata)] = "a training loop of the program's own";
  check_checkpoint(c);  // a data order whose position is past its permutation, say
  return c;
}

template <class T>
LoopState load_loop(const Checkpoint& c, Module<T>& model, Optimizer<T>& optimizer, LoadOptions options) {
  check_checkpoint(c);
  if (!c.training) fail<FormatError>("load_loop: the checkpoint holds weights only, not the state of training");
  const TrainingRecord& t = *c.training;
  const ModelRecord model_record = model.model_record();
  if (!(c.model == model_record)) fail<FormatError>("load_loop: {}", record_differences(c.model, model_record));
  // Every part checked before any changes: weights, then the optimizer's state.
  const auto params = model.parameters();
  options.strict = true;
  const LoadReport report = match(c, params, options);
  if (!report.clean()) fail<FormatError>("load_loop: {}; nothing was loaded", report.problems());
  refuse_non_finite(c.parameters, nullptr, "parameter", options);
  refuse_non_finite(t.optimizer.buffers, nullptr, "optimizer buffer", options);
  const OptimizerState<T> state = optimizer_state<T>(t.optimizer);
  optimizer.check_state(state);
  apply_weights(c, params, report);
  optimizer.load_state(state);
  return {.step = t.trainer.step, .rng = t.trainer.rng, .data_order = t.trainer.data_order};
}

template <class T>
LoadReport load_weights(const Checkpoint& c, Module<T>& model, LoadOptions options) {
  check_checkpoint(c);  // a Checkpoint built in memory is checked as a file's is
  const auto params = model.parameters();
  LoadReport report = match(c, params, options);
  if (options.strict && !report.clean()) {
    const bool other_dtype = std::any_of(c.parameters.begin(), c.parameters.end(),
                                         [](const TensorRecord& r) { return r.dtype != dtype_of<T>(); });
    fail<FormatError>("load: {}; nothing was loaded{}", report.problems(),
                      other_dtype && !options.convert_dtype ? " (LoadOptions::convert_dtype converts the element type)" : "");
  }
  const std::set<std::string> loading(report.loaded.begin(), report.loaded.end());
  refuse_non_finite(c.parameters, &loading, "parameter", options);
  apply_weights(c, params, report);
  return report;
}

LoadReport load_training(const Checkpoint& c, TrainerBase& trainer, LoadOptions options) {
  check_checkpoint(c);
  if (!c.training) fail<FormatError>("resume: the checkpoint holds weights only, not the state of training");
  const TrainingRecord& t = *c.training;
  Module<float>& model = trainer.model();
  const ModelRecord model_record = model.model_record();
  if (!(c.model == model_record)) fail<FormatError>("resume: {}", record_differences(c.model, model_record));
  // Check every part before changing any: weights, optimizer state, trainer state.
  const auto params = model.parameters();
  LoadReport report = match(c, params, options);
  if (!report.clean()) fail<FormatError>("resume: {}; nothing was loaded", report.problems());
  refuse_non_finite(c.parameters, nullptr, "parameter", options);
  refuse_non_finite(t.optimizer.buffers, nullptr, "optimizer buffer", options);
  const OptimizerState<float> state = optimizer_state<float>(t.optimizer);
  trainer.optimizer().check_state(state);
  TrainerState saved = t.trainer;
  if (c.format_version == 1) {  // its data was recorded otherwise: the program compares it (format1.cpp)
    const TrainerState mine = trainer.state();
    saved.data_fingerprint = mine.data_fingerprint;
    saved.eval_fingerprint = mine.eval_fingerprint;
  }
  trainer.check_state(saved);

  apply_weights(c, params, report);
  trainer.optimizer().load_state(state);
  trainer.set_state(saved);
  report.training_state = true;
  return report;
}

namespace detail {

const Settings& model_config_of(const Checkpoint& c, std::string_view kind) {
  if (c.model.kind != kind)
    fail<FormatError>("load: the file holds a model of kind '{}', not '{}'",
                      c.model.kind.empty() ? "(not described)" : escaped(c.model.kind), kind);
  return c.model.config;
}

Index parameter_values_held(const Checkpoint& c) {
  Index held = 0;
  for (const auto& p : c.parameters) held += p.shape.numel();
  return held;
}

void refuse_implied_count(const ModelRecord& record, Index implied, Index held) {
  fail<FormatError>("load: the configuration {} implies {} parameter values but the file holds {}", record.describe(),
                    implied, held);
}

std::size_t build_budget_bytes(const Checkpoint& c) {
  return 3 * sizeof(double) * static_cast<std::size_t>(parameter_values_held(c)) + kBuildSlackBytes;
}

void refuse_build(const Checkpoint& c) {
  fail<LimitError>("{}: one of its tensors would be larger than memory can address", build_description(c));
}

std::string build_description(const Checkpoint& c) {
  return fmt::format("load: building the model {} from a file of {} parameter values", c.model.describe(),
                     parameter_values_held(c));
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
  for (const auto& p : c.parameters)
    for (double v : p.values) crc.add_le(std::bit_cast<std::uint64_t>(v));
  return crc.value();
}

std::string LoadReport::problems() const {
  std::vector<std::string> parts;
  if (!missing.empty()) parts.push_back("the file lacks the model's " + quoted_list(missing));
  if (!unexpected.empty()) parts.push_back("the model has no " + quoted_list(unexpected));
  constexpr std::size_t kShown = 10;  // a message stays a line, however many shapes differ
  for (std::size_t i = 0; i < mismatched.size() && i < kShown; ++i) parts.push_back(mismatched[i]);
  if (mismatched.size() > kShown) parts.push_back(fmt::format("{} more mismatched", mismatched.size() - kShown));
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string LoadReport::str() const {
  std::string s = fmt::format("loaded {} parameters", loaded.size());
  if (!missing.empty()) s += "; not in the file: " + quoted_list(missing);
  if (!unexpected.empty()) s += "; not in the model: " + quoted_list(unexpected);
  constexpr std::size_t kShown = 10;
  for (std::size_t i = 0; i < mismatched.size() && i < kShown; ++i) s += "; skipped " + mismatched[i];
  if (mismatched.size() > kShown) s += fmt::format("; {} more skipped", mismatched.size() - kShown);
  for (const auto& c : converted) s += "; converted " + c;
  if (training_state) s += "; optimizer state, data order, step and curve restored";
  return s;
}

std::string describe_checkpoint(const Checkpoint& c) {
  const auto p = [](std::string_view text) { return escaped(text); };
  std::string s = fmt::format("tapegrad checkpoint, format {}, written by tapegrad {}\nmodel: {}\n", c.format_version,
                              p(c.tapegrad_version), p(c.model.describe()));
  Index scalars = 0;
  for (const auto& r : c.parameters) scalars += r.shape.numel();
  s += fmt::format("parameters: {} tensors, {} values, crc32 {:08x}\n", c.parameters.size(), scalars, weights_crc32(c));
  std::size_t non_finite = 0;
  for (const auto& r : c.parameters) {
    const std::size_t bad = count_non_finite(r);
    non_finite += bad;
    s += fmt::format("  {:<20} {} {:>10}  norm {:.6g}{}\n", p(r.name), p(r.dtype), r.shape.str(), norm(r),
                     bad ? fmt::format("  ({} non-finite values: NaN or Inf)", bad) : "");
  }
  if (non_finite)
    s += fmt::format("warning: {} parameter values are not finite; loading refuses them unless asked\n", non_finite);
  for (const auto& [k, v] : c.metadata) s += fmt::format("metadata: {} = {}\n", p(k), p(v));
  if (!c.training) return s + "training state: none (weights only)\n";
  const OptimizerRecord& o = c.training->optimizer;
  const TrainerState& t = c.training->trainer;
  s += fmt::format("training: step {} of {} ({}), data fingerprint {:08x}{}{}\n", t.step, t.options.steps,
                   describe_settings(to_settings(t.options)), t.data_fingerprint, c.format_version == 1 ? " (format 1: see the metadata)" : "",
                   t.eval_fingerprint ? fmt::format(", evaluation data fingerprint {:08x}", *t.eval_fingerprint) : "");
  s += fmt::format("optimizer: {} after {} steps ({}); schedule {}; {} buffers\n", p(o.kind), o.step,
                   p(describe_settings(o.hyperparameters)), p(o.schedule.describe()), o.buffers.size());
  for (const auto& b : o.buffers) {
    const std::size_t bad = count_non_finite(b);
    s += fmt::format("  {:<32} {:>10}  norm {:.6g}{}\n", p(b.name), b.shape.str(), norm(b),
                     bad ? fmt::format("  ({} non-finite values: NaN or Inf)", bad) : "");
  }
  if (t.data_order.order.empty())
    s += fmt::format("data order: epoch {}, position {} (computed, a keyed bijection; nothing stored)\n",
                     t.data_order.epoch, t.data_order.cursor);
  else
    s += fmt::format("data order: epoch {}, position {} of {}\n", t.data_order.epoch, t.data_order.cursor,
                     t.data_order.order.size());
  if (!t.curve.empty()) {
    const CurvePoint& last = t.curve.back();
    std::string values;
    for (const auto& v : last.values) values += fmt::format(", {} {:.4f}", p(v.name), v.value);
    s += fmt::format("last evaluation: step {}{}\n", last.step, values);
  }
  return s;
}

template Checkpoint snapshot(const Module<float>&);
template Checkpoint snapshot(const Module<double>&);
template Checkpoint snapshot(const Module<float>&, const Optimizer<float>&, const LoopState&);
template Checkpoint snapshot(const Module<double>&, const Optimizer<double>&, const LoopState&);
template LoopState load_loop(const Checkpoint&, Module<float>&, Optimizer<float>&, LoadOptions);
template LoopState load_loop(const Checkpoint&, Module<double>&, Optimizer<double>&, LoadOptions);
template LoadReport load_weights(const Checkpoint&, Module<float>&, LoadOptions);
template LoadReport load_weights(const Checkpoint&, Module<double>&, LoadOptions);
template std::uint32_t checksum(const TensorT<float>&);
template std::uint32_t checksum(const TensorT<double>&);

}  // namespace tapegrad
