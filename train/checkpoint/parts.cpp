// The parts of a checkpoint: how each kind (a model, an optimizer, a stream, a sampler, a trainer, a user's
// object) is checked against its entries and then loaded, and snapshot / restore / load_weights over them.
// See state.hpp.
#include <algorithm>
#include <cmath>
#include <set>

#include "tapegrad/train/checkpoint/checkpoint.hpp"

namespace tapegrad {
namespace {

template <class T>
std::string_view dtype_of() {
  return std::is_same_v<T, float> ? "f32" : "f64";
}

// " as f32" for values of the other element type: what they become is what is checked.
template <class T>
std::string as_dtype(const StateValue& v) {
  return kind_name(v) == dtype_of<T>() ? "" : fmt::format(" as {}", dtype_of<T>());
}

// "<part>: 'w' holds 1 non-finite values (NaN or Inf) of 16 (...)" for each tensor of `names` (relative to
// `in`) that holds NaN or Inf as a T, unless the options allow them.
template <class T>
void refuse_non_finite(const State& in, const std::vector<std::string>& names, std::string_view part, const char* what,
                       detail::LoadContext& context) {
  if (context.options.allow_non_finite) return;
  for (const std::string& name : names) {
    const StateValue& v = in.value(name);
    if (const Index bad = non_finite_count<T>(v); bad > 0)
      context.problems.push_back(
          fmt::format("{}: {} '{}' holds {} non-finite values (NaN or Inf) of {}{} "
                      "(LoadOptions::allow_non_finite loads it anyway)",
                      part, what, escaped(name), bad, value_count(v), as_dtype<T>(v)));
  }
}

// "the file holds a model of kind 'x' but this one is of kind 'y'"; "setting 'residual' is true in the file
// but false in the model; ..." for two records of one kind.
std::string record_differences(const ModelRecord& file, const ModelRecord& model) {
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

// The file's weights (the entries of `in`) against the model's parameters, without changing anything.
// Another element type is a mismatch unless the options convert it.
template <class T>
LoadReport match_weights(const State& in, const std::vector<Parameter<T>*>& params, const LoadOptions& options) {
  LoadReport report;
  std::set<std::string_view> names;
  for (const auto* p : params) {
    names.insert(p->name);
    if (!in.contains(p->name)) {
      report.missing.push_back(p->name);
      continue;
    }
    const StateValue& v = in.value(p->name);
    const bool tensor = v.index() <= 1, same_dtype = v.index() == (std::is_same_v<T, float> ? 0 : 1);
    if (!tensor || (!same_dtype && !options.convert_dtype))
      report.mismatched.push_back(fmt::format("'{}' is {} in the file but {} {} in the model", escaped(p->name),
                                              describe_value(v), dtype_of<T>(), p->value.shape()));
    else if (const Shape shape = *tensor_shape(v); shape != p->value.shape())
      report.mismatched.push_back(
          fmt::format("'{}' is {} in the file but {} in the model", escaped(p->name), shape, p->value.shape()));
    else {
      report.loaded.push_back(p->name);
      if (!same_dtype)
        report.converted.push_back(fmt::format("'{}' from {} to {}", escaped(p->name), kind_name(v), dtype_of<T>()));
    }
  }
  for (const std::string& name : in.names())
    if (!names.contains(name)) report.unexpected.push_back(name.empty() ? in.full_name(name) : name);
  return report;
}

template <class T>
void apply_weights(const State& in, const std::vector<Parameter<T>*>& params, const std::vector<std::string>& loaded) {
  const std::set<std::string_view> load(loaded.begin(), loaded.end());
  for (Parameter<T>* p : params)
    if (load.contains(p->name))
      std::visit(
          [&](const auto& t) {
            if constexpr (requires { t.shape(); })  // in place: the parameter keeps its buffer
              std::transform(t.data(), t.data() + t.numel(), p->value.data(), [](auto x) { return static_cast<T>(x); });
          },
          in.value(p->name));
}

template <class T>
detail::Prepared prepare_module(void* object, std::string_view part, const State& in, detail::LoadContext& context) {
  Module<T>& model = *static_cast<Module<T>*>(object);
  const std::size_t before = context.problems.size();
  if (part == kModelPart)  // by the settings' names: a release may list them in another order
    if (const std::string differ = record_differences(context.file_model, model.model_record()); !differ.empty())
      context.problems.push_back(fmt::format("{}: {}", part, differ));
  std::vector<Parameter<T>*> params = model.parameters();
  LoadReport matched = match_weights(in, params, context.options);
  if (!matched.clean()) context.problems.push_back(fmt::format("{}: {}", part, matched.problems()));
  refuse_non_finite<T>(in, matched.loaded, part, "parameter", context);
  if (context.problems.size() != before) return {};
  for (auto& c : matched.converted) context.report.converted.push_back(std::move(c));
  return {[in, params = std::move(params), loaded = std::move(matched.loaded)] { apply_weights(in, params, loaded); },
          {}};
}

template <class T>
detail::Prepared prepare_optimizer(void* object, std::string_view part, const State& in, detail::LoadContext& context) {
  Optimizer<T>& optimizer = *static_cast<Optimizer<T>*>(object);
  auto state = std::make_shared<OptimizerState<T>>();
  try {
    *state = read_optimizer_state<T>(in);
  } catch (const Error& e) {
    context.problems.push_back(fmt::format("{}: {}", part, e.what()));
    return {};
  }
  try {
    optimizer.check_state(*state, part);  // "<part>: ..."
  } catch (const Error& e) {
    context.problems.emplace_back(e.what());
    return {};
  }
  const std::size_t before = context.problems.size();
  const State buffers = in.at("state");
  refuse_non_finite<T>(buffers, buffers.names(), part, "buffer", context);
  if (context.problems.size() != before) return {};
  return {[&optimizer, state] { optimizer.load_state(*state); }, {}};
}

// A part read by `read` and checked by `check` (each throwing an Error, which names the part after it
// unless the check names it itself), applied by `apply`.
template <class S, class Read, class Check, class Apply>
detail::Prepared prepare_with(std::string_view part, detail::LoadContext& context, Read read, Check check, Apply apply,
                              bool check_names_part = false) {
  S state;
  try {
    state = read();
  } catch (const Error& e) {
    context.problems.push_back(fmt::format("{}: {}", part, e.what()));
    return {};
  }
  try {
    check(state);
  } catch (const Error& e) {
    context.problems.push_back(check_names_part ? std::string(e.what()) : fmt::format("{}: {}", part, e.what()));
    return {};
  }
  return {[apply, state = std::move(state)] { apply(state); }, {}};
}

}  // namespace

namespace detail {

template <class T>
const PartType& module_part() {
  static const PartType type{[](const void* object, State& out) {
                               for (const Parameter<T>* p : static_cast<const Module<T>*>(object)->parameters())
                                 out.put(p->name, p->value);
                             },
                             prepare_module<T>,
                             [](const void* object) { return static_cast<const Module<T>*>(object)->model_record(); }};
  return type;
}

template <class T>
const PartType& optimizer_part() {
  static const PartType type{[](const void* object, State& out) {
                               put_optimizer_state(out, static_cast<const Optimizer<T>*>(object)->state());
                             },
                             prepare_optimizer<T>, nullptr};
  return type;
}

const PartType& rng_part() {
  static const PartType type{
      [](const void* object, State& out) { put_rng_state(out, static_cast<const Rng*>(object)->state()); },
      [](void* object, std::string_view part, const State& in, LoadContext& context) {
        Rng& rng = *static_cast<Rng*>(object);
        return prepare_with<Rng::State>(
            part, context, [&] { return read_rng_state(in); },
            [](const Rng::State& s) { Rng().set_state(s); },  // the generator's own check: not all zeros
            [&rng](const Rng::State& s) { rng.set_state(s); });
      },
      nullptr};
  return type;
}

const PartType& sampler_part() {
  static const PartType type{
      [](const void* object, State& out) { put_sampler_state(out, static_cast<const Sampler*>(object)->state()); },
      [](void* object, std::string_view part, const State& in, LoadContext& context) {
        Sampler& sampler = *static_cast<Sampler*>(object);
        return prepare_with<Sampler::State>(
            part, context, [&] { return read_sampler_state(in); },
            [&sampler](const Sampler::State& s) { sampler.check_state(s); },
            [&sampler](const Sampler::State& s) { sampler.set_state(s); });
      },
      nullptr};
  return type;
}

const PartType& trainer_part() {
  static const PartType type{
      [](const void* object, State& out) { put_trainer_state(out, static_cast<const TrainerBase*>(object)->state()); },
      [](void* object, std::string_view part, const State& in, LoadContext& context) {
        TrainerBase& trainer = *static_cast<TrainerBase*>(object);
        return prepare_with<TrainerState>(
            part, context, [&] { return read_trainer_state(in); },
            [&](const TrainerState& s) { trainer.check_state(s, part); },  // "<part>: ..."
            [&trainer](const TrainerState& s) { trainer.set_state(s); }, true);
      },
      nullptr};
  return type;
}

Prepared prepare_by_comparison(std::string_view part, const State& in, std::vector<StateEntry> own,
                               std::function<void(const State&)> load, LoadContext& context) {
  const auto saved = std::make_shared<std::vector<StateEntry>>(std::move(own));
  const StateIndex mine(*saved);
  const State now = State::reader(mine, in.full_name(""));
  std::vector<std::string> missing, unexpected, mismatched;
  for (const std::string& name : now.names())
    if (!in.contains(name)) missing.push_back(in.full_name(name));
  for (const std::string& name : in.names()) {
    if (!now.contains(name)) {
      unexpected.push_back(in.full_name(name));
      continue;
    }
    const StateValue &theirs = in.value(name), &ours = now.value(name);
    if (theirs.index() != ours.index() || tensor_shape(theirs) != tensor_shape(ours))
      mismatched.push_back(fmt::format("'{}' is {} in the file but {} here", escaped(in.full_name(name)),
                                       describe_value(theirs), describe_value(ours)));
  }
  const std::size_t before = context.problems.size();
  if (!missing.empty()) context.problems.push_back(fmt::format("{}: the file lacks {}", part, quoted_list(missing)));
  if (!unexpected.empty()) context.problems.push_back(fmt::format("{}: it has no {}", part, quoted_list(unexpected)));
  constexpr std::size_t kShown = 10;  // a message stays a line
  for (std::size_t i = 0; i < mismatched.size() && i < kShown; ++i)
    context.problems.push_back(fmt::format("{}: {}", part, mismatched[i]));
  if (mismatched.size() > kShown)
    context.problems.push_back(fmt::format("{}: {} more mismatched", part, mismatched.size() - kShown));
  if (!context.options.allow_non_finite)
    for (const std::string& name : in.names())
      if (const Index bad = non_finite_count(in.value(name)); bad > 0) {
        context.problems.push_back(
            fmt::format("{}: '{}' holds {} non-finite values (NaN or Inf) (LoadOptions::allow_non_finite "
                        "loads it anyway)",
                        part, escaped(in.full_name(name)), bad));
        break;
      }
  if (context.problems.size() != before) return {};
  return {[load, in] { load(in); },
          [load, saved, prefix = in.full_name("")] {
            const StateIndex index(*saved);
            load(State::reader(index, prefix));
          }};
}

template const PartType& module_part<float>();
template const PartType& module_part<double>();
template const PartType& optimizer_part<float>();
template const PartType& optimizer_part<double>();

}  // namespace detail

void* StatePart::mutable_object() const {
  if (const_) fail<UsageError>("restore: the part '{}' was given as const: it cannot be loaded into", escaped(name_));
  return const_cast<void*>(object_);
}

// ---- snapshot, restore, load_weights ---------------------------------------------------------------------

namespace {

void check_part_names(const StateParts& parts, std::string_view op) {
  std::set<std::string_view> seen;
  for (const StatePart& p : parts) {
    if (p.name().empty() || p.name().find('.') != std::string::npos)
      fail<NameError>("{}: the part name '{}' is empty or has a '.'", op, escaped(p.name()));
    if (!seen.insert(p.name()).second) fail<NameError>("{}: the part name '{}' is given twice", op, escaped(p.name()));
  }
}

LoadReport restore_parts(const Checkpoint& c, const StateParts& parts, const LoadOptions& options,
                         std::string_view op) {
  check_checkpoint(c);
  check_part_names(parts, op);
  const detail::StateIndex index(c.entries);
  LoadReport report;
  detail::LoadContext context{options, c.model, report, {}};
  const std::vector<std::string> in_file = index.parts();
  const std::set<std::string_view> file_parts(in_file.begin(), in_file.end());
  std::set<std::string_view> given;
  std::vector<std::string> missing, unexpected;
  for (const StatePart& p : parts) {
    given.insert(p.name());
    if (!file_parts.contains(p.name())) missing.push_back(p.name());
  }
  for (const std::string& part : in_file)
    if (!given.contains(part)) unexpected.push_back(part);
  if (!missing.empty())
    context.problems.push_back(fmt::format("the file has no {} (it holds {})", quoted_list(missing),
                                           in_file.empty() ? std::string("nothing") : quoted_list(in_file)));
  if (!unexpected.empty()) {
    if (options.strict)
      context.problems.push_back(fmt::format("nothing given takes the file's {}", quoted_list(unexpected)));
    else
      report.unexpected = unexpected;
  }
  std::vector<detail::Prepared> prepared;
  for (const StatePart& p : parts) {
    if (!file_parts.contains(p.name())) continue;
    prepared.push_back(
        p.type().prepare(p.mutable_object(), escaped(p.name()), State::reader(index, p.name()), context));
    report.restored.push_back(p.name());
  }
  if (!context.problems.empty()) fail<FormatError>("{}: {}; nothing was loaded", op, fmt::join(context.problems, "; "));
  // A user's load_state may still refuse: those run first, and put back what they loaded if one does.
  std::vector<const detail::Prepared*> done;
  for (std::size_t i = 0; i < prepared.size(); ++i) {
    if (!prepared[i].undo) continue;
    done.push_back(&prepared[i]);  // one that throws halfway is put back too
    try {
      prepared[i].apply();
    } catch (const std::exception& e) {
      for (auto it = done.rbegin(); it != done.rend(); ++it) (*it)->undo();
      fail<FormatError>("{}: {}: {}; nothing was loaded", op, escaped(report.restored[i]), e.what());
    }
  }
  for (const detail::Prepared& p : prepared)
    if (!p.undo) p.apply();
  return report;
}

}  // namespace

Checkpoint snapshot(const StateParts& parts) {
  check_part_names(parts, "snapshot");
  Checkpoint c;
  for (const StatePart& p : parts) {
    State out = State::writer(c.entries, p.name());
    p.type().save(p.object(), out);
    if (p.name() == kModelPart && p.type().model_record) c.model = p.type().model_record(p.object());
  }
  try {
    check_checkpoint(c);
  } catch (const FormatError& e) {  // a part that put one name twice: the program's mistake, not a file's
    throw NameError(
        fmt::format("snapshot: {}", std::string_view(e.what()).substr(std::string_view("checkpoint: ").size())));
  }
  return c;
}

template <class T>
Checkpoint snapshot(const Module<T>& model) {
  return snapshot({{std::string(kModelPart), model}});
}

Checkpoint snapshot(const TrainerBase& trainer) {
  return snapshot(
      {{std::string(kModelPart), trainer.model()}, {"optimizer", trainer.optimizer()}, {"trainer", trainer}});
}

LoadReport restore(const Checkpoint& c, const StateParts& parts, LoadOptions options) {
  return restore_parts(c, parts, options, "load");
}

LoadReport restore(const Checkpoint& c, TrainerBase& trainer, LoadOptions options) {
  options.strict = true;
  return restore_parts(
      c, {{std::string(kModelPart), trainer.model()}, {"optimizer", trainer.optimizer()}, {"trainer", trainer}},
      options, "resume");
}

void save_checkpoint(const std::filesystem::path& path, const StateParts& parts) {
  save_checkpoint(path, snapshot(parts));
}

LoadReport load_checkpoint(const std::filesystem::path& path, const StateParts& parts, LoadOptions options) {
  return restore(read_checkpoint(path), parts, options);
}

template <class T>
LoadReport load_weights(const Checkpoint& c, Module<T>& model, LoadOptions options) {
  check_checkpoint(c);  // a Checkpoint built in memory is checked as a file's is
  const detail::StateIndex index(c.entries);
  const State in = State::reader(index, std::string(kModelPart));
  const auto params = model.parameters();
  LoadReport report = match_weights(in, params, options);
  if (options.strict && !report.clean()) {
    const bool other_dtype = std::any_of(params.begin(), params.end(), [&](const Parameter<T>* p) {
      return in.contains(p->name) && in.value(p->name).index() == (std::is_same_v<T, float> ? 1u : 0u);
    });
    fail<FormatError>(
        "load: {}; nothing was loaded{}", report.problems(),
        other_dtype && !options.convert_dtype ? " (LoadOptions::convert_dtype converts the element type)" : "");
  }
  if (!options.allow_non_finite)
    for (const std::string& name : report.loaded)
      if (const Index bad = non_finite_count<T>(in.value(name)); bad > 0)
        fail<FormatError>(
            "load: parameter '{}' holds {} non-finite values (NaN or Inf) of {}{}; nothing was loaded "
            "(LoadOptions::allow_non_finite loads it anyway)",
            escaped(name), bad, value_count(in.value(name)), as_dtype<T>(in.value(name)));
  apply_weights(in, params, report.loaded);
  return report;
}

template <class T>
OptimizerState<T> read_optimizer_state(const Checkpoint& c, std::string_view part) {
  check_checkpoint(c);
  const detail::StateIndex index(c.entries);
  try {
    return read_optimizer_state<T>(State::reader(index, std::string(part)));
  } catch (const FormatError& e) {
    fail<FormatError>("{}: {}", escaped(part), e.what());
  }
}

TrainerState read_trainer_state(const Checkpoint& c, std::string_view part) {
  check_checkpoint(c);
  const detail::StateIndex index(c.entries);
  try {
    return read_trainer_state(State::reader(index, std::string(part)));
  } catch (const FormatError& e) {
    fail<FormatError>("{}: {}", escaped(part), e.what());
  }
}

template Checkpoint snapshot(const Module<float>&);
template Checkpoint snapshot(const Module<double>&);
template LoadReport load_weights(const Checkpoint&, Module<float>&, LoadOptions);
template LoadReport load_weights(const Checkpoint&, Module<double>&, LoadOptions);
template OptimizerState<float> read_optimizer_state(const Checkpoint&, std::string_view);
template OptimizerState<double> read_optimizer_state(const Checkpoint&, std::string_view);

}  // namespace tapegrad
