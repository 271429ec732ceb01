// The parts of a checkpoint: the library's objects' two functions, and snapshot / restore / load_weights over
// any parts. See state.hpp.
#include <algorithm>
#include <set>

#include "tapegrad/train/checkpoint/checkpoint.hpp"

namespace tapegrad {

std::string detail::record_differences(const ModelRecord& file, const ModelRecord& model) {
  if (file.kind != model.kind)
    return fmt::format("the file holds a model of kind '{}' but this one is of kind '{}'",
                       file.kind.empty() ? "(not described)" : escaped(file.kind),
                       model.kind.empty() ? "(not described)" : escaped(model.kind));
  std::vector<std::string> out;
  for (const auto& s : model.config) {
    const std::string* theirs = find_setting(file.config, s.name);
    if (!theirs)
      out.push_back(fmt::format("setting '{}' is missing from the file", s.name));
    else if (*theirs != s.value)
      out.push_back(
          fmt::format("setting '{}' is {} in the file but {} in the model", s.name, escaped(*theirs), s.value));
  }
  std::vector<std::string> unknown;
  for (const auto& s : file.config)
    if (!find_setting(model.config, s.name)) unknown.push_back(s.name);
  if (!unknown.empty()) out.push_back("the model has no setting " + quoted_list(unknown));
  return fmt::format("{}", fmt::join(out, "; "));
}

namespace {

// restore's and load_weights' refusal of the entry `name`, a tensor that holds NaN or Inf as the element type it
// loads as (`as`): "model: 'w' holds 2 non-finite values (NaN or Inf) of 6 as f32 (...)"; "" for none. The entry
// is named relative to its part, as the part's other refusals (match_saved's) name it; a part of one value by
// the part's name (no '.': find gives npos, and npos + 1 is 0).
std::string non_finite(std::string_view name, const StateValue& v, std::string_view as) {
  const Index bad = as == "f32" ? non_finite_count<float>(v) : non_finite_count<double>(v);
  if (bad == 0) return "";
  return fmt::format(
      "{}: '{}' holds {} non-finite values (NaN or Inf) of {}{} (LoadOptions::allow_non_finite loads it anyway)",
      escaped(name.substr(0, name.find('.'))), escaped(name.substr(name.find('.') + 1)), bad, value_count(v),
      as == kind_name(v) ? "" : fmt::format(" as {}", as));
}

}  // namespace

LoadReport detail::match_saved(const State& in, const std::function<void(State&)>& save, bool convert,
                               std::string_view holder) {
  std::vector<EntryForm> mine;
  State declarer = State::declarer(mine);
  save(declarer);
  const auto shown = [&](const std::string& name) { return name.empty() ? in.full_name(name) : name; };
  LoadReport report;
  std::set<std::string_view> names;
  for (const EntryForm& e : mine) {
    names.insert(e.name);
    if (!in.contains(e.name)) {
      report.missing.push_back(shown(e.name));
    } else if (const EntryForm file = form_of(e.name, in.value(e.name));  // with `convert`, tensors of equal shapes
               file.shape != e.shape || (file.kind != e.kind && !(convert && file.shape))) {
      report.mismatched.push_back(
          fmt::format("'{}' is {} in the file but {} in {}", escaped(shown(e.name)), file.str(), e.str(), holder));
    } else {
      report.loaded.push_back(e.name);
      if (file.kind != e.kind)
        report.converted.push_back(fmt::format("'{}' from {} to {}", escaped(e.name), file.kind, e.kind));
    }
  }
  for (const std::string& name : in.names())
    if (!names.contains(name)) report.unexpected.push_back(shown(name));
  return report;
}

void detail::check_like(const State& in, std::string_view holder, const std::function<void(State&)>& save) {
  if (const LoadReport report = match_saved(in, save, false, holder); !report.clean())
    throw FormatError(report.problems(holder));
}

std::string LoadReport::problems(std::string_view holder) const {
  std::vector<std::string> parts;
  if (!missing.empty()) parts.push_back(fmt::format("the file lacks {}'s {}", holder, quoted_list(missing)));
  if (!unexpected.empty()) parts.push_back(fmt::format("{} has no {}", holder, quoted_list(unexpected)));
  constexpr std::size_t kShown = 10;  // the first 10, then "<n> more mismatched": a message stays a line
  parts.insert(parts.end(), mismatched.begin(), mismatched.begin() + std::min(mismatched.size(), kShown));
  if (mismatched.size() > kShown) parts.push_back(fmt::format("{} more mismatched", mismatched.size() - kShown));
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string LoadReport::str() const {
  std::string s = fmt::format("loaded {} parameters", loaded.size());
  if (!restored.empty())
    s = "restored " + quoted_list(restored) +
        (unexpected.empty() ? "" : "; left the file's " + quoted_list(unexpected));
  else if (!clean())
    s += "; not loaded: " + problems();
  for (const auto& c : converted) s += "; converted " + c;
  return s;
}

// ---- snapshot, restore, load_weights ---------------------------------------------------------------------

std::string missing_parts(const Checkpoint& c, const std::vector<std::string>& names) {
  const std::vector<std::string> in_file = c.parts();
  std::vector<std::string> missing;
  for (const std::string& name : names)
    if (std::ranges::find(in_file, name) == in_file.end()) missing.push_back(name);
  if (missing.empty()) return "";
  return fmt::format("the file has no {} (it holds {})", quoted_list(missing),
                     in_file.empty() ? std::string("nothing") : quoted_list(in_file));
}

namespace {

// What the parts hold now (snapshot, and what restore puts back should a part refuse); NameError "<op>: ..."
// naming a part name that is empty, has a '.' or is given twice, or an entry a part put twice.
Checkpoint snapshot_parts(const StateParts& parts, std::string_view op) {
  std::set<std::string_view> seen;
  for (const StatePart& p : parts) {
    if (p.name.empty() || p.name.find('.') != std::string::npos)
      fail<NameError>("{}: the part name '{}' is empty or has a '.'", op, escaped(p.name));
    if (!seen.insert(p.name).second) fail<NameError>("{}: the part name '{}' is given twice", op, escaped(p.name));
  }
  Checkpoint c;
  for (const StatePart& p : parts) {
    State out = State::writer(c.entries, p.name);
    p.save(out);
    if (p.name == kModelPart) c.model = p.record;
  }
  try {
    (void)detail::StateIndex(c, op);
  } catch (const FormatError& e) {  // a part that put one name twice: the program's mistake, not a file's
    throw NameError(e.what());
  }
  return c;
}

// A Trainer's run: its model, its optimizer and its own state (const parts of a const trainer).
template <class Trainer>
StateParts parts_of(Trainer& trainer) {
  return {{std::string(kModelPart), trainer.model()},
          {std::string(kOptimizerPart), trainer.optimizer()},
          {std::string(kTrainerPart), trainer}};
}

// The part's entries read by `read` (read_optimizer_state, read_trainer_state); FormatError naming the part.
template <class Read>
auto read_part(const Checkpoint& c, std::string_view part, Read read) {
  const detail::StateIndex index(c);
  try {
    return read(State::reader(index, std::string(part)));
  } catch (const FormatError& e) {
    fail<FormatError>("{}: {}", escaped(part), e.what());
  }
}

LoadReport restore_parts(const Checkpoint& c, const StateParts& parts, const LoadOptions& options,
                         std::string_view op) {
  Checkpoint converted = options.convert_dtype ? c : Checkpoint{};  // with tensors converted where the options say so
  const Checkpoint& file = options.convert_dtype ? converted : c;
  const detail::StateIndex index(file);  // checked as a file is; its values may be converted below
  // What every part holds now (its names checked): the element types the file's tensors are checked as, and
  // what puts the parts back should one of them refuse to load.
  const Checkpoint before = snapshot_parts(parts, op);
  std::vector<std::string> names;
  for (const StatePart& p : parts) {
    names.push_back(p.name);
    if (!p.load)
      fail<UsageError>("{}: the part '{}' was given as const: it cannot be loaded into", op, escaped(p.name));
  }
  const std::set<std::string_view> given(names.begin(), names.end());
  const detail::StateIndex now(before);
  LoadReport report;
  std::vector<std::string> problems;
  const std::vector<std::string> in_file = c.parts();
  const std::set<std::string_view> file_parts(in_file.begin(), in_file.end());
  for (const std::string& part : in_file)
    if (!given.contains(part)) report.unexpected.push_back(part);  // left in the file, unless strict refuses them
  if (std::string missing = missing_parts(c, names); !missing.empty()) problems.push_back(std::move(missing));
  if (options.strict && !report.unexpected.empty())
    problems.push_back(fmt::format("nothing given takes the file's {}", quoted_list(report.unexpected)));
  if (given.contains(kModelPart) && file_parts.contains(kModelPart))  // by the settings' names, in any order
    if (const std::string differ = detail::record_differences(c.model, before.model); !differ.empty())
      problems.push_back(fmt::format("{}: {}", kModelPart, differ));
  // Each tensor of a part given, as the part's element type (converted when the options say so), finite
  // unless the options allow otherwise.
  for (std::size_t i = 0; i < c.entries.size(); ++i) {
    const StateValue& v = c.entries[i].value;
    const std::string_view name = c.entries[i].name, part = name.substr(0, name.find('.'));
    if (!given.contains(part) || !tensor_shape(v)) continue;
    std::string_view as = kind_name(v);
    const StateEntry* mine = now.find(name);
    if (options.convert_dtype && mine && tensor_shape(mine->value) && mine->value.index() != v.index()) {
      as = kind_name(mine->value);
      report.converted.push_back(fmt::format("'{}' from {} to {}", escaped(name), kind_name(v), as));
      converted.entries[i].value =
          mine->value.index() == 0 ? StateValue(tensor_as<float>(v)) : StateValue(tensor_as<double>(v));
    }
    if (std::string refused = non_finite(name, v, as); !refused.empty() && !options.allow_non_finite)
      problems.push_back(std::move(refused));
  }
  // Every part loads (each checks what it reads before it changes anything); if any refused, or a check
  // above did, every part loads again what it held.
  for (const StatePart& p : parts) {
    if (!file_parts.contains(p.name)) continue;
    report.restored.push_back(p.name);
    try {
      p.load(State::reader(index, p.name));
    } catch (const std::exception& e) {  // named by its part, unless the message starts so
      const std::string part = escaped(p.name) + ": ";
      problems.push_back(std::string_view(e.what()).starts_with(part) ? e.what() : part + e.what());
    }
  }
  if (problems.empty()) return report;
  for (const StatePart& p : parts)
    if (file_parts.contains(p.name)) p.load(State::reader(now, p.name));
  fail<FormatError>("{}: {}; nothing was loaded", op, fmt::join(problems, "; "));
}

}  // namespace

Checkpoint snapshot(const StateParts& parts) { return snapshot_parts(parts, "snapshot"); }

Checkpoint snapshot(const TrainerBase& trainer) { return snapshot(parts_of(trainer)); }

LoadReport restore(const Checkpoint& c, const StateParts& parts, LoadOptions options) {
  return restore_parts(c, parts, options, "load");
}

LoadReport restore(const Checkpoint& c, TrainerBase& trainer, LoadOptions options) {
  options.strict = true;
  return restore_parts(c, parts_of(trainer), options, "resume");
}

template <class T>
LoadReport load_weights(const Checkpoint& c, Module<T>& model, LoadOptions options) {
  const detail::StateIndex index(c);  // a Checkpoint built in memory is checked as a file's is
  const State in = State::reader(index, std::string(kModelPart));
  const std::function<void(State&)> model_saves = [&](State& now) { save_state(model, now); };
  const auto match = [&](bool convert) { return detail::match_saved(in, model_saves, convert, "the model"); };
  LoadReport report = match(options.convert_dtype);
  if (options.strict && !report.clean())  // the hint where converting would load a weight this load refuses
    fail<FormatError>("load: {}; nothing was loaded{}", report.problems(),
                      !options.convert_dtype && !match(true).converted.empty()
                          ? " (LoadOptions::convert_dtype converts the element type)"
                          : "");
  if (!options.allow_non_finite)
    for (const std::string& name : report.loaded)
      if (const std::string refused = non_finite(in.full_name(name), in.value(name), kind_name(TensorT<T>()));
          !refused.empty())
        fail<FormatError>("load: {}; nothing was loaded", refused);
  auto next = report.loaded.begin();  // in the order of the parameters, which saved them
  for (Parameter<T>* p : model.parameters())
    if (next != report.loaded.end() && *next == p->name)
      p->value = tensor_as<T>(in.value(*next++), std::move(p->value));
  return report;
}

template <class T>
OptimizerState<T> read_optimizer_state(const Checkpoint& c, std::string_view part) {
  return read_part(c, part, [](const State& in) { return read_optimizer_state<T>(in); });
}

TrainerState read_trainer_state(const Checkpoint& c, std::string_view part) {
  return read_part(c, part, [](const State& in) { return read_trainer_state(in); });
}

template LoadReport load_weights(const Checkpoint&, Module<float>&, LoadOptions);
template LoadReport load_weights(const Checkpoint&, Module<double>&, LoadOptions);
template OptimizerState<float> read_optimizer_state(const Checkpoint&, std::string_view);
template OptimizerState<double> read_optimizer_state(const Checkpoint&, std::string_view);

}  // namespace tapegrad
