// The open state: entries by name (State, StateIndex), and the entries of the library's objects, one function
// each way (an optimizer's, a random stream's, a sampler's, a trainer's). How parts are checked and loaded:
// parts.cpp. See state.hpp.
#include "tapegrad/train/checkpoint/state.hpp"

#include "tapegrad/train/checkpoint/checkpoint.hpp"

#include <algorithm>
#include <bit>
#include <set>

namespace tapegrad {

std::string_view kind_name(const StateValue& value) {
  static constexpr std::string_view names[] = {"f32", "f64", "ints", "numbers", "texts"};
  return names[value.index()];
}

std::string detail::EntryForm::str() const {
  return shape ? fmt::format("{} {}", kind, *shape) : fmt::format("{} ({})", kind, count);
}

detail::EntryForm detail::form_of(std::string name, const StateValue& value) {
  return std::visit(
      [&](const auto& x) -> EntryForm {
        if constexpr (requires { x.shape(); })
          return {std::move(name), kind_name(value), x.shape(), x.numel()};
        else
          return {std::move(name), kind_name(value), std::nullopt, static_cast<Index>(x.size())};
      },
      value);
}

// ---- State ---------------------------------------------------------------------------------------------

std::string State::full_name(std::string_view name) const {
  if (prefix_.empty()) return std::string(name);
  if (name.empty()) return prefix_;
  return prefix_ + "." + std::string(name);
}

State State::at(std::string_view name) const {
  State s = *this;
  s.prefix_ = full_name(name);
  return s;
}

void State::put(std::string_view name, StateValue value) {
  if (forms_) return forms_->push_back(detail::form_of(full_name(name), value));
  if (!out_)
    fail<UsageError>("State::put: '{}': this state is read from a checkpoint, not written", escaped(full_name(name)));
  out_->push_back({full_name(name), std::move(value)});
}

const StateValue& State::value(std::string_view name) const {
  if (!in_) fail<UsageError>("State::get: '{}': this state is being written, not read", escaped(full_name(name)));
  const std::string full = full_name(name);
  const StateEntry* e = in_->find(full);
  if (!e) fail<FormatError>("the checkpoint has no entry '{}'", escaped(full));
  return e->value;
}

void State::refuse(std::string_view name, std::string_view what) const {
  fail<FormatError>("entry '{}' holds {}", escaped(full_name(name)), what);
}

bool State::contains(std::string_view name) const { return in_ && in_->find(full_name(name)) != nullptr; }

std::vector<std::string> State::names() const {
  std::vector<std::string> out;
  if (!in_) return out;
  for (const StateEntry* e : in_->under(prefix_))
    out.push_back(e->name.size() == prefix_.size() ? std::string()
                                                   : e->name.substr(prefix_.empty() ? 0 : prefix_.size() + 1));
  return out;
}

namespace detail {

StateIndex::StateIndex(const Checkpoint& c, std::string_view what) : entries_(&c.entries) {
  std::set<std::string_view> settings;
  std::set<std::string> repeated_settings;
  for (const Setting& s : c.model.config)
    if (!settings.insert(s.name).second) repeated_settings.insert(s.name);
  if (!repeated_settings.empty())
    fail<FormatError>("{}: the model's configuration names {} more than once", what,
                      quoted_list({repeated_settings.begin(), repeated_settings.end()}));
  const std::vector<StateEntry>& entries = c.entries;
  sorted_.reserve(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string& name = entries[i].name;
    if (name.empty() || name.front() == '.')
      fail<FormatError>("{}: entry {} is named '{}': an entry's name starts with its part's", what, i, escaped(name));
    sorted_.emplace_back(name, i);
  }
  std::sort(sorted_.begin(), sorted_.end());
  std::vector<std::string> repeated;
  for (std::size_t i = 1; i < sorted_.size(); ++i)
    if (sorted_[i].first == sorted_[i - 1].first && (repeated.empty() || repeated.back() != sorted_[i].first))
      repeated.emplace_back(sorted_[i].first);
  if (!repeated.empty()) fail<FormatError>("{}: the entries name {} more than once", what, quoted_list(repeated));
}

const StateEntry* StateIndex::find(std::string_view name) const {
  const auto it = std::lower_bound(sorted_.begin(), sorted_.end(), std::pair(name, std::size_t{0}));
  return it != sorted_.end() && it->first == name ? &(*entries_)[it->second] : nullptr;
}

std::vector<const StateEntry*> StateIndex::under(std::string_view prefix) const {
  // "<prefix>" and "<prefix>.*" sort together: from "<prefix>" up to the first name that does not start so.
  std::vector<const StateEntry*> out;
  for (auto it = std::lower_bound(sorted_.begin(), sorted_.end(), std::pair(prefix, std::size_t{0}));
       it != sorted_.end() && it->first.starts_with(prefix); ++it)
    if (prefix.empty() || it->first.size() == prefix.size() || it->first[prefix.size()] == '.')
      out.push_back(&(*entries_)[it->second]);
  std::sort(out.begin(), out.end());  // in the file's order: the entries are one vector
  return out;
}

}  // namespace detail

// ---- the library's objects' entries ------------------------------------------------------------------

namespace {

// FormatError naming the entries of `in` that none of `known` (a name, or "<name>.*" for all below it)
// accounts for: a part's reader takes what it knows and refuses the rest.
void refuse_others(const State& in, std::initializer_list<std::string_view> known) {
  std::vector<std::string> others;
  for (const std::string& name : in.names()) {
    const bool ok = std::any_of(known.begin(), known.end(), [&](std::string_view k) {
      return k.ends_with(".*") ? name.starts_with(k.substr(0, k.size() - 1)) : name == k;
    });
    if (!ok) others.push_back(in.full_name(name));
  }
  if (!others.empty()) fail<FormatError>("unexpected entries {}", quoted_list(others));
}

// Settings, one text entry each under `in`, in order.
Settings read_settings(const State& in) {
  Settings out;
  for (const std::string& name : in.names())
    if (!name.empty()) out.push_back({name, in.get<std::string>(name)});
  return out;
}

void put_settings(State out, const Settings& settings) {
  for (const Setting& s : settings) out.put(s.name, s.value);
}

// One list entry of f(row) for each row, in order: a column of a table kept as columns (the trainer's windows
// and curve), the optimizer's parameters, a stream's words.
template <class Rows, class F>
void put_column(State out, std::string_view name, const Rows& rows, F f) {
  std::vector<std::remove_cvref_t<decltype(f(*rows.begin()))>> column;
  for (const auto& row : rows) column.push_back(f(row));
  out.put(name, StateValue(std::move(column)));
}

}  // namespace

template <class T>
void put_optimizer_state(State& out, OptimizerState<T> s) {
  out.put("kind", s.kind);
  // every parameter, whether its buffers are made or not
  put_column(out, "params", s.per_param, [](const auto& entry) { return entry.first; });
  put_settings(out.at("hyperparameters"), s.hyperparameters);
  out.put("schedule", s.schedule.kind);
  put_settings(out.at("schedule"), s.schedule.settings);
  out.put("step", s.step);
  for (auto& [param, named] : s.per_param)
    for (auto& [buffer, tensor] : named) out.put("state." + param + "." + buffer, StateValue(std::move(tensor)));
}

template <class T>
OptimizerState<T> read_optimizer_state(const State& in) {
  refuse_others(in, {"kind", "params", "hyperparameters.*", "schedule", "schedule.*", "step", "state.*"});
  OptimizerState<T> s;
  s.kind = in.get<std::string>("kind");
  for (const std::string& p : in.get<std::vector<std::string>>("params"))
    if (!s.per_param.emplace(p, std::map<std::string, TensorT<T>>{}).second)
      fail<FormatError>("entry '{}' names the parameter '{}' twice", escaped(in.full_name("params")), escaped(p));
  s.hyperparameters = read_settings(in.at("hyperparameters"));
  s.schedule.kind = in.get<std::string>("schedule");
  s.schedule.settings = read_settings(in.at("schedule"));
  s.step = in.get<std::int64_t>("step");
  if (s.step < 0 || static_cast<double>(s.step) > TrainOptions::kMaxSteps)
    fail<FormatError>("the optimizer's step is {}, outside [0, {}]", s.step, to_text(TrainOptions::kMaxSteps));
  const State buffers = in.at("state");
  for (const std::string& name : buffers.names()) {
    const auto dot = name.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == name.size())
      fail<FormatError>("optimizer buffer '{}' is not named '<parameter>.<buffer>'", escaped(buffers.full_name(name)));
    const StateValue& v = buffers.value(name);
    if (!tensor_shape(v)) buffers.refuse(name, fmt::format("{}, not a tensor", describe_value(v)));
    // Finite values that become NaN or Inf as a T (a float64 past float32's range) are refused as loading refuses
    // non-finite ones.
    if (const Index bad = non_finite_count<T>(v); bad > non_finite_count(v))
      buffers.refuse(name, fmt::format("{} non-finite values (NaN or Inf) of {} as {}", bad, value_count(v),
                                       kind_name(TensorT<T>())));
    // A buffer of a parameter the list does not name is kept: check_state names it.
    s.per_param[name.substr(0, dot)][name.substr(dot + 1)] = tensor_as<T>(v);
  }
  return s;
}

void put_rng_state(State out, const Rng::State& state) {
  put_column(out, "", state.words, [](std::uint64_t w) { return std::bit_cast<std::int64_t>(w); });
}

Rng::State read_rng_state(const State& in) {
  refuse_others(in, {""});
  const auto& words = in.get<std::vector<std::int64_t>>("");
  if (words.size() != 4) in.refuse("", fmt::format("{} words; a random stream (xoshiro256**) has 4", words.size()));
  Rng::State s;
  for (std::size_t i = 0; i < 4; ++i) s.words[i] = std::bit_cast<std::uint64_t>(words[i]);
  return s;
}

// Every field of Sampler::State, here and only here.
void put_sampler_state(State out, const Sampler::State& state) {
  out.put("epoch", state.epoch);
  out.put("cursor", state.cursor);
  out.put("order", StateValue(std::vector<std::int64_t>(state.order.begin(), state.order.end())));
  out.put("examples", state.examples);  // what the order is for: a state of another n is refused
  put_rng_state(out.at("rng"), state.rng);
}

Sampler::State read_sampler_state(const State& in) {
  refuse_others(in, {"epoch", "cursor", "order", "examples", "rng"});
  Sampler::State s;
  s.epoch = in.get<std::int64_t>("epoch");
  s.cursor = in.get<Index>("cursor");
  const auto& order = in.get<std::vector<std::int64_t>>("order");
  s.order.assign(order.begin(), order.end());
  s.examples = in.get<Index>("examples");
  s.rng = read_rng_state(in.at("rng"));
  return s;
}

void put_trainer_state(State& out, const TrainerState& s) {
  put_settings(out.at("options"), to_settings(s.options));
  out.put("step", s.step);
  out.put("data_fingerprint", s.data_fingerprint);
  // a list of one fingerprint, or of none without evaluation data
  out.put("eval_fingerprint",
          StateValue(std::vector<std::int64_t>(s.eval_fingerprint ? 1 : 0, s.eval_fingerprint.value_or(0))));
  put_sampler_state(out.at("data_order"), s.data_order);
  put_rng_state(out.at("rng"), s.rng);
  out.put("window_loss", s.window_loss);
  out.put("window_steps", s.window_steps);
  put_column(out, "metrics", s.window_metrics, [](const MetricWindow& w) { return w.name; });
  put_column(out, "metric_sums", s.window_metrics, [](const MetricWindow& w) { return w.tally.sum; });
  put_column(out, "metric_counts", s.window_metrics, [](const MetricWindow& w) { return w.tally.count; });
  // The curve as columns: every point names the same values (the trainer's columns), kept once.
  State curve = out.at("curve");
  put_column(curve, "step", s.curve, [](const CurvePoint& p) { return std::int64_t{p.step}; });
  put_column(curve, "lr", s.curve, [](const CurvePoint& p) { return p.lr; });
  put_column(curve, "seconds", s.curve, [](const CurvePoint& p) { return p.seconds; });
  const NamedValues& columns = s.curve.empty() ? NamedValues{} : s.curve.front().values;
  put_column(curve, "columns", columns, [](const NamedValue& v) { return v.name; });
  std::vector<double> values;
  for (const CurvePoint& p : s.curve) {
    if (p.values.size() != columns.size())
      fail<FormatError>("the curve's point at step {} has {} values, the first has {}", p.step, p.values.size(),
                        columns.size());
    for (std::size_t k = 0; k < columns.size(); ++k) {
      if (p.values[k].name != columns[k].name)
        fail<FormatError>("the curve's point at step {} names '{}' where the first names '{}'", p.step,
                          escaped(p.values[k].name), escaped(columns[k].name));
      values.push_back(p.values[k].value);
    }
  }
  curve.put("values", StateValue(std::move(values)));
}

TrainerState read_trainer_state(const State& in) {
  refuse_others(in, {"options.*", "step", "data_fingerprint", "eval_fingerprint", "data_order.*", "rng", "window_loss",
                     "window_steps", "metrics", "metric_sums", "metric_counts", "curve.step", "curve.lr",
                     "curve.seconds", "curve.columns", "curve.values"});
  TrainerState s;
  s.options = detail::file_settings(
      [&] { return from_settings<TrainOptions>(read_settings(in.at("options")), "the trainer's options"); });
  s.step = in.get<Index>("step");
  s.data_fingerprint = in.get<std::uint32_t>("data_fingerprint");
  const auto& eval = in.get<std::vector<std::int64_t>>("eval_fingerprint");
  if (eval.size() > 1) in.refuse("eval_fingerprint", fmt::format("{} fingerprints, not 0 or 1", eval.size()));
  if (!eval.empty()) s.eval_fingerprint = in.get<std::uint32_t>("eval_fingerprint");
  s.data_order = read_sampler_state(in.at("data_order"));
  s.rng = read_rng_state(in.at("rng"));
  s.window_loss = in.get<double>("window_loss");
  s.window_steps = in.get<Index>("window_steps");
  const auto& metrics = in.get<std::vector<std::string>>("metrics");
  const auto& sums = in.get<std::vector<double>>("metric_sums");
  const auto& counts = in.get<std::vector<double>>("metric_counts");
  if (sums.size() != metrics.size() || counts.size() != metrics.size())
    fail<FormatError>("the trainer's windows hold {} metrics, {} sums and {} counts", metrics.size(), sums.size(),
                      counts.size());
  for (std::size_t k = 0; k < metrics.size(); ++k) s.window_metrics.push_back({metrics[k], {sums[k], counts[k]}});
  const State curve = in.at("curve");
  const auto& steps = curve.get<std::vector<std::int64_t>>("step");
  const auto& lr = curve.get<std::vector<double>>("lr");
  const auto& seconds = curve.get<std::vector<double>>("seconds");
  const auto& columns = curve.get<std::vector<std::string>>("columns");
  const auto& values = curve.get<std::vector<double>>("values");
  for (const std::string& column : columns)
    if (column.size() > TrainerBase::kMaxMetricName + std::string_view("train_").size())
      fail<FormatError>("the curve's column '{}' is longer than a metric's column", escaped(column));
  const std::size_t n = steps.size(), k = columns.size();
  if (lr.size() != n || seconds.size() != n || (k > 0 && values.size() / k != n) || values.size() != n * k)
    fail<FormatError>("the curve holds {} steps, {} rates, {} times and {} values of {} columns", n, lr.size(),
                      seconds.size(), values.size(), k);
  // The counters of a run that could have been: 0 <= step <= the run's steps; windows, the data order and
  // the curve within the steps taken.
  if (s.step < 0 || s.step > s.options.steps)
    fail<FormatError>("the trainer is at step {}, outside its run of {} steps", s.step, s.options.steps);
  if (s.window_steps < 0 || s.window_steps > s.step)
    fail<FormatError>("the trainer's window holds {} steps, outside [0, {}]", s.window_steps, s.step);
  const Sampler::State& order = s.data_order;
  // An empty order is a computed one (Sampler): its position is checked against the data when it resumes.
  if (order.epoch < 0 || order.cursor < 0 ||
      (!order.order.empty() && order.cursor > static_cast<Index>(order.order.size())))
    fail<FormatError>("the data order is at epoch {}, position {} of {}", order.epoch, order.cursor,
                      order.order.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (steps[i] < (i > 0 ? steps[i - 1] : 0) || steps[i] > s.step)
      fail<FormatError>("a curve point is at step {}, out of order or past the trainer's step {}", steps[i], s.step);
    CurvePoint p{.step = steps[i], .lr = lr[i], .seconds = seconds[i], .values = {}};
    for (std::size_t c = 0; c < k; ++c) p.values.push_back({columns[c], values[i * k + c]});
    s.curve.push_back(std::move(p));
  }
  return s;
}

template void put_optimizer_state(State&, OptimizerState<float>);
template void put_optimizer_state(State&, OptimizerState<double>);
template OptimizerState<float> read_optimizer_state(const State&);
template OptimizerState<double> read_optimizer_state(const State&);

}  // namespace tapegrad
