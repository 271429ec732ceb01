#pragma once
// The open state of a checkpoint (PyTorch's state_dict is the anchor): named entries that each object a run
// holds contributes and reads back. A run names its parts, and a checkpoint is what they save:
//
//   save_checkpoint(path, {{"model", model}, {"optimizer", adam}, {"noise", noise}, {"batches", sampler},
//                          {"ema", ema}, {"step", step}});
//   load_checkpoint(path, {{"model", model}, {"optimizer", adam}, ...});   // strict, all or nothing
//
// A part is a model (any Module), an optimizer (any Optimizer, a user's included), a random stream (Rng), a
// data sampler (Sampler), a Trainer's own state, a counter (an integer), or an object of the user's own with
// two functions, as a torch.nn.Module has state_dict() and load_state_dict():
//
//   struct Ema {
//     void save_state(State& out) const { out.put("weights", weights); }
//     void load_state(const State& in) { weights = in.get<Tensor>("weights"); }
//   };
//
// Each part's entries are named "<part>.<name>" ("ema.weights", "model.attn.wq") or, for a part of one value
// (a stream, a counter), "<part>". An entry holds a tensor in its own element type (f32 or f64), integers,
// numbers or texts.
//
// Loading is strict and all or nothing (checkpoint.hpp): every part must be in the file and every part of the
// file must be given; each part checks its entries before any part changes (a model its weights' names,
// shapes, element types and finiteness, an optimizer its kind, schedule and buffers, a stream that it is not
// all zeros, a sampler that its order is a permutation of its data, a user's object that its entries are
// the names, kinds and shapes it saves itself); one FormatError then names every problem. A user's
// load_state runs once every check has passed, before the library's parts load; should it refuse a value by
// a rule of its own, even halfway through, it and the user's parts loaded before it are put back from what
// they saved, and nothing else has changed.

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
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
// "f32 2x8", "ints (4)", "texts (1)": kind and size, as messages and `inspect` show an entry.
std::string describe_value(const StateValue& value);
// A tensor's shape; nullopt for a list.
std::optional<Shape> tensor_shape(const StateValue& value);
// How many values an entry holds: a tensor's elements, a list's items.
Index value_count(const StateValue& value);
// f(x) for each number of a tensor or a list of numbers, as a double, in order (nothing for other lists).
template <class F>
void for_each_number(const StateValue& value, F f) {
  std::visit(
      [&](const auto& x) {
        if constexpr (requires { x.numel(); })
          for (Index i = 0; i < x.numel(); ++i) f(static_cast<double>(x.data()[i]));
        else if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x)>, std::vector<double>>)
          for (double d : x) f(d);
      },
      value);
}
// How many of those are NaN or Inf, or become so as a T (a float64 past float32's range, narrowed).
template <class T = double>
Index non_finite_count(const StateValue& value) {
  Index bad = 0;
  for_each_number(value, [&](double x) { bad += std::isfinite(static_cast<T>(x)) ? 0 : 1; });
  return bad;
}

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
  template <std::integral I>
  void put(std::string_view name, I value) {
    put(name, StateValue(std::vector<std::int64_t>{static_cast<std::int64_t>(value)}));
  }
  template <std::floating_point F>
  void put(std::string_view name, F value) {
    put(name, StateValue(std::vector<double>{static_cast<double>(value)}));
  }
  void put(std::string_view name, std::string_view text) {
    put(name, StateValue(std::vector<std::string>{std::string(text)}));
  }
  void put(std::string_view name, const char* text) { put(name, std::string_view(text)); }

  // The entry's value: V is a kind (TensorT<float>, TensorT<double>, std::vector of std::int64_t, double or
  // std::string: a reference), or one integer, number or text (a copy). FormatError naming the entry if it
  // is missing, of another kind or, for one value, not a list of one.
  template <class V>
  decltype(auto) get(std::string_view name) const {
    if constexpr (std::is_same_v<V, bool>) {
      static_assert(!std::is_same_v<V, bool>, "State::get: save a flag as an integer (0 or 1)");
    } else if constexpr (std::is_integral_v<V>) {
      return narrow<V>(name, single<std::int64_t>(name));
    } else if constexpr (std::is_floating_point_v<V>) {
      return static_cast<V>(single<double>(name));
    } else if constexpr (std::is_same_v<V, std::string>) {
      return std::string(single<std::string>(name));
    } else {
      return std::get<V>(find(name, kind_of<V>()));
    }
  }
  // The entry's value, whatever its kind. FormatError if it is missing.
  const StateValue& value(std::string_view name) const;
  bool contains(std::string_view name) const;
  // The names of this part's entries below `name` ("" for all of them), relative to it, in the file's
  // order: settings, a model's parameters, an optimizer's buffers.
  std::vector<std::string> names(std::string_view under = "") const;
  // The entries under "<name>.": a part within a part (a trainer's data order).
  State at(std::string_view name) const;
  // "<part>.<name>", as messages name an entry.
  std::string full_name(std::string_view name) const;

  // For the library: a State that adds to `out`, or reads from `in`, under `prefix` ("" for the whole).
  static State writer(std::vector<StateEntry>& out, std::string prefix);
  static State reader(const detail::StateIndex& in, std::string prefix);

 private:
  State() = default;
  template <class V>
  static constexpr std::size_t kind_of() {
    if constexpr (std::is_same_v<V, TensorT<float>>)
      return 0;
    else if constexpr (std::is_same_v<V, TensorT<double>>)
      return 1;
    else if constexpr (std::is_same_v<V, std::vector<std::int64_t>>)
      return 2;
    else if constexpr (std::is_same_v<V, std::vector<double>>)
      return 3;
    else {
      static_assert(std::is_same_v<V, std::vector<std::string>>, "State::get: not a kind an entry holds");
      return 4;
    }
  }
  const StateValue& find(std::string_view name, std::size_t kind) const;
  template <class V>
  const V& single(std::string_view name) const {
    const auto& list = std::get<std::vector<V>>(find(name, kind_of<std::vector<V>>()));
    if (list.size() != 1) not_single(name, list.size());
    return list[0];
  }
  [[noreturn]] void not_single(std::string_view name, std::size_t size) const;
  template <class I>
  I narrow(std::string_view name, std::int64_t v) const {
    if constexpr (std::is_unsigned_v<I> && sizeof(I) == sizeof(v)) return static_cast<I>(v);  // put() kept its bits
    if (!std::in_range<I>(v)) out_of_range(name, v);
    return static_cast<I>(v);
  }
  [[noreturn]] void out_of_range(std::string_view name, std::int64_t v) const;

  std::vector<StateEntry>* out_ = nullptr;
  const detail::StateIndex* in_ = nullptr;
  std::string prefix_;
};

// ---- the library's objects' entries ------------------------------------------------------------------
// One function each way, so that a field added to a state is one place to change; the part loaders below and
// the converter of older files (examples/convert) go through them.

template <class T>
void put_optimizer_state(State& out, OptimizerState<T> state);
// FormatError naming what is missing or malformed. Buffers of the other element type are converted.
template <class T>
OptimizerState<T> read_optimizer_state(const State& in);
void put_sampler_state(State& out, const Sampler::State& state);
Sampler::State read_sampler_state(const State& in);
void put_rng_state(State& out, const Rng::State& state);
Rng::State read_rng_state(const State& in);
void put_trainer_state(State& out, const TrainerState& state);
// Also checks the counters (0 <= step <= the run's steps, windows and curve within them).
TrainerState read_trainer_state(const State& in);

struct LoadOptions;
struct LoadReport;

namespace detail {

// The names of a checkpoint's entries, sorted, to find an entry or a part's entries in O(log n). FormatError
// for a name given twice, an empty name or an empty part ("" or ".x").
class StateIndex {
 public:
  explicit StateIndex(const std::vector<StateEntry>& entries);
  const StateEntry* find(std::string_view name) const;
  // Entries named `prefix` or "<prefix>.*" ("" for all), in the file's order.
  std::vector<const StateEntry*> under(std::string_view prefix) const;
  // The parts of the entries (their first name component), in order of first appearance.
  std::vector<std::string> parts() const;

 private:
  const std::vector<StateEntry>* entries_;
  std::vector<std::pair<std::string_view, std::size_t>> sorted_;  // name -> position
};

// A part's checks passed: how to apply its entries, and (for a user's object, whose load_state may refuse)
// how to put it back.
struct Prepared {
  std::function<void()> apply;
  std::function<void()> undo;
};

// What the parts' checks share: the options, the file's model record, the problems found.
struct LoadContext {
  const LoadOptions& options;
  const ModelRecord& file_model;
  LoadReport& report;
  std::vector<std::string> problems;
};

// How the library saves, checks and loads one type of part.
struct PartType {
  void (*save)(const void* object, State& out);
  // Checks `in` without changing the object: problems go to the context (each naming the part: `part` is its
  // name escaped, as messages show it), and the result's apply is empty when there are any.
  Prepared (*prepare)(void* object, std::string_view part, const State& in, LoadContext& context);
  ModelRecord (*model_record)(const void* object);  // a model's record; null for the other parts
};

template <class T>
const PartType& module_part();
template <class T>
const PartType& optimizer_part();
const PartType& rng_part();
const PartType& sampler_part();
const PartType& trainer_part();

// A user's object: its own entries, as it saves them now, are what the file's must match (names, kinds,
// tensors' element types and shapes); its load_state then reads them, and `save` puts it back if a later
// part refuses.
Prepared prepare_by_comparison(std::string_view part, const State& in, std::vector<StateEntry> own,
                               std::function<void(const State&)> load, LoadContext& context);

template <class X>
const PartType& user_part() {
  static const PartType type{[](const void* object, State& out) { static_cast<const X*>(object)->save_state(out); },
                             [](void* object, std::string_view part, const State& in, LoadContext& context) {
                               X& x = *static_cast<X*>(object);
                               std::vector<StateEntry> own;
                               State writer = State::writer(own, in.full_name(""));
                               std::as_const(x).save_state(writer);
                               return prepare_by_comparison(
                                   part, in, std::move(own), [&x](const State& s) { x.load_state(s); }, context);
                             },
                             nullptr};
  return type;
}

// A counter: one integer.
template <class I>
const PartType& integer_part() {
  static const PartType type{
      [](const void* object, State& out) { out.put("", *static_cast<const I*>(object)); },
      [](void* object, std::string_view part, const State& in, LoadContext& context) -> Prepared {
        try {
          const I value = in.get<I>("");
          return {[object, value] { *static_cast<I*>(object) = value; }, {}};
        } catch (const Error& e) {
          context.problems.push_back(fmt::format("{}: {}", part, e.what()));
          return {};
        }
      },
      nullptr};
  return type;
}

}  // namespace detail

// One object a checkpoint holds, under a name (non-empty, without '.'): {"model", model}. It refers to the
// object, which must outlive it. The object's type says how it is saved and loaded: see the top of this file.
class StatePart {
 public:
  template <class X>
  StatePart(std::string name, X& object) : name_(std::move(name)), const_(std::is_const_v<X>) {
    using Y = std::remove_const_t<X>;
    if constexpr (std::is_base_of_v<Module<float>, Y>) {
      set(static_cast<const Module<float>&>(object), detail::module_part<float>());
    } else if constexpr (std::is_base_of_v<Module<double>, Y>) {
      set(static_cast<const Module<double>&>(object), detail::module_part<double>());
    } else if constexpr (std::is_base_of_v<Optimizer<float>, Y>) {
      set(static_cast<const Optimizer<float>&>(object), detail::optimizer_part<float>());
    } else if constexpr (std::is_base_of_v<Optimizer<double>, Y>) {
      set(static_cast<const Optimizer<double>&>(object), detail::optimizer_part<double>());
    } else if constexpr (std::is_base_of_v<TrainerBase, Y>) {
      set(static_cast<const TrainerBase&>(object), detail::trainer_part());
    } else if constexpr (std::is_same_v<Y, Rng>) {
      set(object, detail::rng_part());
    } else if constexpr (std::is_same_v<Y, Sampler>) {
      set(object, detail::sampler_part());
    } else if constexpr (std::is_integral_v<Y> && !std::is_same_v<Y, bool>) {
      set(object, detail::integer_part<Y>());
    } else {
      static_assert(
          requires(const Y& c, Y& m, State& out, const State& in) {
            c.save_state(out);
            m.load_state(in);
          },
          "a checkpoint part is a Module, an Optimizer, a Trainer, an Rng, a Sampler, an integer, or an object with "
          "`void save_state(State&) const` and `void load_state(const State&)`");
      set(object, detail::user_part<Y>());
    }
  }

  const std::string& name() const { return name_; }
  // For the library.
  const detail::PartType& type() const { return *type_; }
  const void* object() const { return object_; }
  void* mutable_object() const;  // UsageError for a part given as const

 private:
  template <class Y>
  void set(const Y& object, const detail::PartType& type) {
    object_ = &object;
    type_ = &type;
  }

  std::string name_;
  const void* object_ = nullptr;
  bool const_ = false;
  const detail::PartType* type_ = nullptr;
};

}  // namespace tapegrad
