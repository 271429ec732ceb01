#pragma once
// The open state of a checkpoint (PyTorch's state_dict is the anchor): named entries that each object a run
// holds contributes and reads back. A run names its parts, and a checkpoint is what they save:
//
//   const StateParts parts = {{"model", model}, {"optimizer", adam}, {"noise", noise}, {"batches", sampler},
//                             {"ema", ema}, {"step", step}};
//   save_checkpoint(path, snapshot(parts));
//   restore(read_checkpoint(path), parts);   // strict, all or nothing
//
// The parts are everything the run carries from step to step (what is not a part must be rebuilt the same
// way in a resumed process), saved where they agree: between two steps, after every update of the step
// (the optimizer's, a moving average's, the step counter's), as a resumed run starts the next step.
//
// Every part saves and loads through two functions. A user's object has them as members, as a
// torch.nn.Module has state_dict() and load_state_dict():
//
//   struct Ema {
//     void save_state(State& out) const { out.put("weights", weights); }
//     void load_state(const State& in) { weights = in.get<Tensor>("weights"); }
//   };
//
// and the library's objects (a Module, an Optimizer, an Rng, a Sampler, a Trainer's own state, an integer, a
// std::vector of tensors) have them as the functions save_state(object, out) and load_state(object, in) below.
//
// Each part's entries are named "<part>.<name>" ("ema.weights", "model.attn.wq") or, for a part of one value
// (a stream, a counter), "<part>". An entry holds a tensor in its own element type (f32 or f64), integers,
// numbers or texts.
//
// Loading (restore, checkpoint.hpp) is strict and all or nothing: every part must be in the file and every
// part of the file given; a user's object's entries must have the names, kinds and shapes it saves itself;
// each library object checks what it reads before it changes. Should any part refuse, a user's load_state
// halfway through included, every part loads back what it held, and one FormatError names every problem.

#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/rng.hpp"
#include "tapegrad/core/tensor.hpp"
#include "tapegrad/layers/module.hpp"
#include "tapegrad/train/data.hpp"
#include "tapegrad/train/optimizer.hpp"
#include "tapegrad/train/trainer.hpp"

namespace tapegrad {

// What an entry holds: a tensor of its own element type, integers, numbers or texts (a single integer,
// number or text is a list of one).
using StateValue = std::variant<TensorT<float>, TensorT<double>, std::vector<std::int64_t>, std::vector<double>,
                                std::vector<std::string>>;

struct StateEntry {
  std::string name;  // "<part>" or "<part>.<name>"
  StateValue value;
};

// "f32", "f64", "ints", "numbers", "texts": the kinds a file names.
std::string_view kind_name(const StateValue& value);

namespace detail {
// An entry as a part declares it, without its values (State::declarer's): what detail::match_saved compares a
// file's entries with; form_of(name, value) for an entry that has them.
struct EntryForm {
  std::string name;
  std::string_view kind;       // kind_name's
  std::optional<Shape> shape;  // a tensor's; nullopt for a list
  Index count;                 // a tensor's elements, a list's items
  std::string str() const;     // as describe_value: "f32 2x8", "ints (4)"
};
EntryForm form_of(std::string name, const StateValue& value);
}  // namespace detail

// "f32 2x8", "ints (4)", "texts (1)": kind and size, as messages and `inspect` show an entry.
inline std::string describe_value(const StateValue& value) { return detail::form_of("", value).str(); }
// A tensor's shape; nullopt for a list.
inline std::optional<Shape> tensor_shape(const StateValue& value) { return detail::form_of("", value).shape; }
// How many values an entry holds: a tensor's elements, a list's items.
inline Index value_count(const StateValue& value) { return detail::form_of("", value).count; }
// f(x) for each number of a tensor or a list of numbers, as a double, in order (nothing for other lists).
template <class F>
void for_each_number(const StateValue& value, F f) {
  if (const auto* t = std::get_if<TensorT<float>>(&value))
    for (const float x : t->span()) f(static_cast<double>(x));
  if (const auto* t = std::get_if<TensorT<double>>(&value))
    for (const double x : t->span()) f(x);
  if (const auto* list = std::get_if<std::vector<double>>(&value))
    for (const double x : *list) f(x);
}
// How many of those are NaN or Inf, or become so as a T (a float64 past float32's range, narrowed).
template <class T = double>
Index non_finite_count(const StateValue& value) {
  Index bad = 0;
  for_each_number(value, [&](double x) { bad += std::isfinite(static_cast<T>(x)) ? 0 : 1; });
  return bad;
}

// A tensor entry as a TensorT<T>, converted from the other element type (f32 to f64 exactly, f64 to f32
// rounded to nearest), in `out`'s buffer if it has the shape (a parameter's, moved in and back); `out` for a list.
template <class T>
TensorT<T> tensor_as(const StateValue& value, TensorT<T> out = {}) {
  const auto convert = [&](const auto& from) {
    out.resize(from.shape());
    out.array() = from.array().template cast<T>();
  };
  if (const auto* t = std::get_if<TensorT<float>>(&value)) convert(*t);
  if (const auto* t = std::get_if<TensorT<double>>(&value)) convert(*t);
  return out;
}

struct Checkpoint;
struct LoadReport;
namespace detail {
class StateIndex;
}

// One part's entries: what a part saves into and loads from. Names are relative to the part ("weights" in
// the part "ema" is the entry "ema.weights"); "" names the part's own single value.
class State {
 public:
  // Adds an entry. Tensors keep their element type; a single integer, number or text is a list of one (a 64-bit
  // unsigned one as its bits: `inspect` shows 2^63 and above as negative, get() gives it back whole).
  void put(std::string_view name, StateValue value);
  template <class V>
  requires std::is_arithmetic_v<V>
  void put(std::string_view name, V value) {
    using Item = std::conditional_t<std::is_integral_v<V>, std::int64_t, double>;  // as get() reads it
    put(name, StateValue(std::vector<Item>{static_cast<Item>(value)}));
  }
  void put(std::string_view name, std::string_view text) {
    put(name, StateValue(std::vector<std::string>{std::string(text)}));
  }
  // A tensor: copied (a temporary moved), or, into a State::declarer, its kind and shape alone.
  template <class U, class T = std::remove_cvref_t<U>>
  requires std::same_as<T, TensorT<float>> || std::same_as<T, TensorT<double>>
  void put(std::string_view name, U&& tensor) {
    if (!forms_) return put(name, StateValue(std::forward<U>(tensor)));
    forms_->push_back({full_name(name), kind_name(T()), tensor.shape(), tensor.numel()});
  }

  // The entry's value: V is a kind (TensorT<float>, TensorT<double>, std::vector of std::int64_t, double or
  // std::string: a reference), or one integer, number or text (a copy). FormatError naming the entry if it
  // is missing, of another kind or, for one value, not a list of one (or, for an integer, out of V's range).
  template <class V>
  decltype(auto) get(std::string_view name) const {
    static_assert(!std::is_same_v<V, bool>, "State::get: save a flag as an integer (0 or 1)");
    if constexpr (std::is_arithmetic_v<V> || std::is_same_v<V, std::string>) {
      using Item = std::conditional_t<std::is_integral_v<V>, std::int64_t,
                                      std::conditional_t<std::is_floating_point_v<V>, double, std::string>>;
      const auto& list = get<std::vector<Item>>(name);
      if (list.size() != 1) refuse(name, fmt::format("{} values, not one", list.size()));
      if constexpr (std::is_integral_v<V> && !(std::is_unsigned_v<V> && sizeof(V) == sizeof(Item)))
        if (!std::in_range<V>(list[0])) refuse(name, fmt::format("{}, out of its range", list[0]));
      return static_cast<V>(list[0]);  // a 64-bit unsigned integer: put() kept its bits
    } else {
      const StateValue& v = value(name);
      if (!std::holds_alternative<V>(v))
        refuse(name, fmt::format("{}, not {}", describe_value(v), kind_name(StateValue(std::in_place_type<V>))));
      return std::get<V>(v);
    }
  }
  // The entry's value, whatever its kind. FormatError if it is missing.
  const StateValue& value(std::string_view name) const;
  bool contains(std::string_view name) const;
  // The names of this part's entries, relative to it, in the file's order: settings, a model's parameters, an
  // optimizer's buffers (at(name).names(): those below `name`).
  std::vector<std::string> names() const;
  // The entries under "<name>.": a part within a part (a trainer's data order).
  State at(std::string_view name) const;
  // "<part>.<name>", as messages name an entry.
  std::string full_name(std::string_view name) const;
  // FormatError "entry '<part>.<name>' holds <what>" (the name escaped): a value its reader refuses.
  [[noreturn]] void refuse(std::string_view name, std::string_view what) const;

  // For the library: a State that adds to `out`, or reads from `in`, under `prefix` ("" for the whole).
  static State writer(std::vector<StateEntry>& out, std::string prefix) { return {&out, nullptr, std::move(prefix)}; }
  static State reader(const detail::StateIndex& in, std::string prefix) { return {nullptr, &in, std::move(prefix)}; }
  // A State that records what is put into it without the values (the names, kinds and shapes), into `out`.
  static State declarer(std::vector<detail::EntryForm>& out) { return {nullptr, nullptr, "", &out}; }

 private:
  State(std::vector<StateEntry>* out, const detail::StateIndex* in, std::string prefix,
        std::vector<detail::EntryForm>* forms = nullptr)
      : out_(out), in_(in), prefix_(std::move(prefix)), forms_(forms) {}
  std::vector<StateEntry>* out_ = nullptr;
  const detail::StateIndex* in_ = nullptr;
  std::string prefix_;
  std::vector<detail::EntryForm>* forms_ = nullptr;
};

// ---- the library's objects' entries ------------------------------------------------------------------
// One function each way, so that a field added to a state is one place to change; the part loaders below and
// the converter of older files (examples/convert) go through them.

template <class T>
void put_optimizer_state(State& out, OptimizerState<T> state);
// FormatError naming what is missing or malformed. Buffers of the other element type are converted.
template <class T>
OptimizerState<T> read_optimizer_state(const State& in);
void put_sampler_state(State out, const Sampler::State& state);
Sampler::State read_sampler_state(const State& in);
void put_rng_state(State out, const Rng::State& state);
Rng::State read_rng_state(const State& in);
void put_trainer_state(State& out, const TrainerState& state);
// Also checks the counters (0 <= step <= the run's steps, windows and curve within them).
TrainerState read_trainer_state(const State& in);

namespace detail {

// The names of a checkpoint's entries, sorted, to find an entry or a part's entries in O(log n). Building it
// checks the checkpoint (check_checkpoint, checkpoint.hpp): FormatError "<what>: ..." for a name given twice,
// an empty name or an empty part ("" or ".x"), or a setting of the model given twice.
class StateIndex {
 public:
  explicit StateIndex(const Checkpoint& c, std::string_view what = "checkpoint");
  const StateEntry* find(std::string_view name) const;
  // Entries named `prefix` or "<prefix>.*" ("" for all), in the file's order.
  std::vector<const StateEntry*> under(std::string_view prefix) const;

 private:
  const std::vector<StateEntry>* entries_;
  std::vector<std::pair<std::string_view, std::size_t>> sorted_;  // name -> position
};

// f()'s result, any Error it throws a FormatError: settings a file holds that from_settings or a check
// refuses (a NameError, a ValueError) are the file's fault (read_trainer_state, model_config_from).
template <class F>
auto file_settings(F f) {
  try {
    return f();
  } catch (const Error& e) {
    throw FormatError(e.what());
  }
}

// The entries of `in` against what `save` saves now, declared without its values (State::declarer): the same
// names, kinds and tensor shapes (with `convert`, a tensor of the other element type converts), named relative
// to the part. `loaded` and `converted` name the entries that match, the rest are `missing`, `unexpected` or
// `mismatched` ("'w' is f32 2x3 in the file but f32 3x2 in <holder>").
LoadReport match_saved(const State& in, const std::function<void(State&)>& save, bool convert, std::string_view holder);
// FormatError LoadReport::problems(holder) unless match_saved finds `in` like what `save` saves: what the model
// and a user's object are checked against before they read it.
void check_like(const State& in, std::string_view holder, const std::function<void(State&)>& save);

}  // namespace detail

// ---- the library's objects as parts ------------------------------------------------------------------
// The two functions a user's object has, for the library's objects: each load_state checks everything it
// reads before it changes anything (a model its parameters' names, shapes and element types; an optimizer,
// a stream, a sampler and a trainer what their own load checks).

template <class T>
void save_state(const Module<T>& model, State& out) {
  for (const Parameter<T>* p : model.parameters()) out.put(p->name, p->value);
}
template <class T>
void load_state(Module<T>& model, const State& in) {
  detail::check_like(in, "the model", [&](State& now) { save_state(model, now); });
  for (Parameter<T>* p : model.parameters()) p->value.array() = in.get<TensorT<T>>(p->name).array();  // in place
}
template <class T>
void save_state(const Optimizer<T>& optimizer, State& out) {
  put_optimizer_state(out, optimizer.state());
}
// The part's name starts the messages of the object's own load ("optimizer: ..."), which restore keeps.
template <class T>
void load_state(Optimizer<T>& optimizer, const State& in) {
  optimizer.load_state(read_optimizer_state<T>(in), escaped(in.full_name("")));
}
inline void save_state(const Rng& rng, State& out) { put_rng_state(out, rng.state()); }
inline void load_state(Rng& rng, const State& in) { rng.set_state(read_rng_state(in)); }
inline void save_state(const Sampler& sampler, State& out) { put_sampler_state(out, sampler.state()); }
inline void load_state(Sampler& sampler, const State& in) { sampler.set_state(read_sampler_state(in)); }
// The trainer's own state, not its model's or optimizer's.
inline void save_state(const TrainerBase& trainer, State& out) { put_trainer_state(out, trainer.state()); }
inline void load_state(TrainerBase& trainer, const State& in) {
  trainer.set_state(read_trainer_state(in), escaped(in.full_name("")));
}
// Tensors of a run's own (a moving average of the weights), saved as "<part>.0", "<part>.1", ...; loaded only
// into as many tensors of the same shapes and element type.
template <class T>
void save_state(const std::vector<TensorT<T>>& tensors, State& out) {
  for (std::size_t i = 0; i < tensors.size(); ++i) out.put(std::to_string(i), tensors[i]);
}
template <class T>
void load_state(std::vector<TensorT<T>>& tensors, const State& in) {
  detail::check_like(in, "the part", [&](State& now) { save_state(tensors, now); });
  for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i] = in.get<TensorT<T>>(std::to_string(i));
}
template <std::integral I>
requires(!std::is_same_v<I, bool>) void save_state(const I& counter, State& out) { out.put("", counter); }
template <std::integral I>
requires(!std::is_same_v<I, bool>) void load_state(I& counter, const State& in) { counter = in.get<I>(""); }

// A user's object's two members, as the functions the library's objects have. Its entries are first checked
// against what it saves itself (detail::check_like), as its load_state may trust them.
template <class X>
requires requires(const X& object, State& out) { object.save_state(out); }
void save_state(const X& object, State& out) { object.save_state(out); }
template <class X>
requires requires(X& object, const State& in) { object.load_state(in); }
void load_state(X& object, const State& in) {
  detail::check_like(in, "the part", [&](State& now) { object.save_state(now); });
  object.load_state(in);
}

// An object with the two functions, as members (a user's) or as the library's functions above.
template <class X>
concept Stateful = requires(const X& c, X& m, State& out, const State& in) {
  save_state(c, out);
  load_state(m, in);
};

// One object a checkpoint holds, under a name (non-empty, without '.'): {"model", model}. It refers to the
// object, which must outlive it, and saves and loads it through its two functions.
struct StatePart {
  template <class X>
  StatePart(std::string part_name, X& object) : name(std::move(part_name)) {
    static_assert(Stateful<std::remove_const_t<X>>,
                  "a checkpoint part is a Module, an Optimizer, a Trainer, an Rng, a Sampler, an integer, a vector of "
                  "tensors, or an object with `void save_state(State&) const` and `void load_state(const State&)`");
    save = [&object](State& out) { save_state(std::as_const(object), out); };
    if constexpr (!std::is_const_v<X>) load = [&object](const State& in) { load_state(object, in); };
    if constexpr (requires { object.model_record(); }) record = object.model_record();
  }

  std::string name;
  std::function<void(State&)> save;
  std::function<void(const State&)> load;  // empty for a const object: it is only saved
  ModelRecord record;                      // a model's (its kind and configuration); empty for the other parts
};

}  // namespace tapegrad
