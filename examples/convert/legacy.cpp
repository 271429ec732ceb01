// Files of formats 1 and 2: format 2's reader (its bounded reads are the library's), the invariants those
// files kept, and the one converter that turns either into today's Checkpoint of named parts (legacy.hpp),
// which the library saves as format 3.
#include "convert/legacy.hpp"

#include <algorithm>

namespace tapegrad::convert::legacy {

void load(InArchive& ar, TensorRecord& t) {
  legacy::load(ar, t.name);
  legacy::load(ar, t.dtype);
  legacy::load(ar, t.shape);
  if (t.dtype == "f32") {
    const auto v = load_numbers<float>(ar, fmt::format("tensor '{}'", escaped(t.name)));
    t.values.assign(v.begin(), v.end());
  } else if (t.dtype == "f64") {
    t.values = load_numbers<double>(ar, fmt::format("tensor '{}'", escaped(t.name)));
  } else {
    fail<FormatError>("tensor '{}' has the element type '{}'; f32 and f64 are known", escaped(t.name),
                      escaped(t.dtype));
  }
  if (static_cast<Index>(t.values.size()) != t.shape.numel())
    fail<FormatError>("tensor '{}' is {} ({} elements) but holds {} values", escaped(t.name), t.shape, t.shape.numel(),
                      t.values.size());
}

void load(InArchive& ar, NamedValue& v) {
  legacy::load(ar, v.name);
  v.value = load_double(ar);
}

void load(InArchive& ar, MetricWindow& w) {
  legacy::load(ar, w.name);
  w.tally.sum = load_double(ar);
  w.tally.count = load_double(ar);
}

void load(InArchive& ar, CurvePoint& p) {
  p.step = load_i64(ar);
  p.lr = load_double(ar);
  p.seconds = load_double(ar);
  load_records(ar, p.values, "a curve point's values");
}

namespace {

Rng::State load_rng(InArchive& ar, std::string_view what) {
  const auto words = load_numbers<std::uint64_t>(ar, what);
  if (words.size() != 4) fail<FormatError>("{} has {} words; xoshiro256** has 4", what, words.size());
  Rng::State s;
  std::copy(words.begin(), words.end(), s.words.begin());
  return s;
}

void load(InArchive& ar, TrainerState& s) {
  Settings options;
  load_pairs(ar, options, "the trainer's options");
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

void load(InArchive& ar, OptimizerRecord& o) {
  legacy::load(ar, o.kind);
  load_pairs(ar, o.hyperparameters, "the optimizer's hyperparameters");
  legacy::load(ar, o.schedule.kind);
  load_pairs(ar, o.schedule.settings, "the schedule's settings");
  o.step = load_i64(ar);
  load_records(ar, o.buffers, "the optimizer buffers");
}

// ---- the invariants files of formats 1 and 2 kept -------------------------------------------------------

template <class Items, class NameOf>
void check_unique(const Items& items, NameOf name_of, const char* what) {
  std::vector<std::string_view> names;
  for (const auto& item : items) names.push_back(name_of(item));
  std::sort(names.begin(), names.end());
  std::vector<std::string> repeated;
  for (std::size_t i = 1; i < names.size(); ++i)
    if (names[i] == names[i - 1] && (repeated.empty() || repeated.back() != names[i])) repeated.emplace_back(names[i]);
  if (!repeated.empty()) fail<FormatError>("{} {} more than once", what, quoted_list(repeated));
}

void check_record(const TensorRecord& r, const char* what) {
  if (!r.shape.valid())
    fail<FormatError>("{} '{}' has an invalid shape (rank {}, {} x {} x {})", what, escaped(r.name), r.shape.rank,
                      r.shape.batch, r.shape.rows, r.shape.cols);
}

void check(const File& f) {
  const auto name = [](const auto& x) -> std::string_view { return x.name; };
  for (const auto& r : f.parameters) check_record(r, "parameter");
  check_unique(f.parameters, name, "the parameter list names");
  if (!f.training) return;
  const OptimizerRecord& o = f.training->optimizer;
  check_unique(o.hyperparameters, name, "the optimizer's hyperparameters name");
  check_unique(o.schedule.settings, name, "the schedule's settings name");
  for (const auto& b : o.buffers) {
    check_record(b, "optimizer buffer");
    const auto slash = b.name.rfind('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == b.name.size())
      fail<FormatError>("optimizer buffer '{}' is not named '<parameter>/<buffer>'", escaped(b.name));
  }
  check_unique(o.buffers, name, "the optimizer buffers name");
  const double max_steps = TrainOptions::kMaxSteps;
  if (o.step < 0 || static_cast<double>(o.step) > max_steps)
    fail<FormatError>("the optimizer's step is {}, outside [0, {}]", o.step, to_text(max_steps));
  // The trainer's counters are checked where today's are read (read_trainer_state), after the conversion.
}

// ---- the converter -----------------------------------------------------------------------------------

template <class T>
TensorT<T> tensor_of(const TensorRecord& r) {
  TensorT<T> t(r.shape);
  for (Index i = 0; i < t.numel(); ++i) t[i] = static_cast<T>(r.values[static_cast<std::size_t>(i)]);
  return t;
}

void put_tensor(State& out, const std::string& name, const TensorRecord& r) {
  if (r.dtype == "f32")
    out.put(name, tensor_of<float>(r));
  else
    out.put(name, tensor_of<double>(r));
}

// The optimizer's state in the element type of its buffers (the model's when it has none yet). Every
// parameter of the file is one of the optimizer's: an optimizer saved before its first step has none of its
// buffers, and still loads.
template <class T>
void put_optimizer(State& out, const File& f) {
  const OptimizerRecord& o = f.training->optimizer;
  OptimizerState<T> s{
      .kind = o.kind, .hyperparameters = o.hyperparameters, .schedule = o.schedule, .step = o.step, .per_param = {}};
  for (const auto& p : f.parameters) s.per_param[p.name];
  for (const auto& b : o.buffers) {
    if (b.dtype != o.buffers.front().dtype)
      fail<FormatError>("optimizer buffer '{}' is {} but '{}' is {}", escaped(b.name), b.dtype,
                        escaped(o.buffers.front().name), o.buffers.front().dtype);
    const auto slash = b.name.rfind('/');
    s.per_param[b.name.substr(0, slash)][b.name.substr(slash + 1)] = tensor_of<T>(b);
  }
  put_optimizer_state(out, std::move(s));
}

}  // namespace

Checkpoint convert(File f) {
  check(f);
  Checkpoint c;
  c.tapegrad_version = std::move(f.tapegrad_version);
  c.model = std::move(f.model);
  c.metadata = std::move(f.metadata);
  State root = State::writer(c.entries, "");
  State model = root.at(kModelPart);
  for (const auto& p : f.parameters) put_tensor(model, p.name, p);
  if (!f.training) return c;
  const OptimizerRecord& o = f.training->optimizer;
  const std::string& dtype = !o.buffers.empty()      ? o.buffers.front().dtype
                             : !f.parameters.empty() ? f.parameters.front().dtype
                                                     : std::string("f32");
  State optimizer = root.at("optimizer");
  if (dtype == "f64")
    put_optimizer<double>(optimizer, f);
  else
    put_optimizer<float>(optimizer, f);
  const TrainerState& t = f.training->trainer;
  if (c.metadata.erase(std::string(kLoopMetadata)) > 0) {
    // A loop's: its step, and its stream and data order when it had them (a loop without them saved zeros).
    root.put("step", t.step);
    if (t.rng != Rng::State{}) {
      State rng = root.at("rng");
      put_rng_state(rng, t.rng);
    }
    if (t.data_order.rng != Rng::State{}) {
      State order = root.at("data_order");
      put_sampler_state(order, t.data_order);
    }
  } else {
    State trainer = root.at("trainer");
    put_trainer_state(trainer, t);
  }
  return c;
}

void load_data_order(InArchive& ar, Sampler::State& s) {
  ar(s.epoch);
  s.cursor = load_i64(ar);
  const auto order = load_numbers<std::int64_t>(ar, "the data order");
  s.order.assign(order.begin(), order.end());
  // A stored order is for as many examples as it holds; a computed one (empty) is of unknown size in these
  // formats (Sampler::State::examples 0).
  s.examples = static_cast<Index>(s.order.size());
  s.rng = load_rng(ar, "the data order's RNG state");
}

void load_format2(InArchive& ar, File& f) {
  legacy::load(ar, f.tapegrad_version);
  legacy::load(ar, f.model.kind);
  load_pairs(ar, f.model.config, "the model's configuration");
  load_records(ar, f.parameters, "the parameter list");
  load_pairs(ar, f.metadata, "the metadata");
  if (load_bool(ar, "the has-training flag")) {
    f.training.emplace();
    load(ar, f.training->optimizer);
    load(ar, f.training->trainer);
  }
}

}  // namespace tapegrad::convert::legacy
