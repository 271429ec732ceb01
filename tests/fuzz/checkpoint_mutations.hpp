#pragma once
// Structure-aware mutations of a checkpoint: what a hostile but careful forger changes in a well-formed file
// (whose checksum they then fix): an entry duplicated (whole, emptied, one element), of another kind or
// shape or length, names swapped or renamed (control characters, NUL, long), settings by the ten thousand,
// counters at their extremes, streams of zeros, NaN and Inf values. Byte flips rarely reach these: the fuzzer
// (checkpoint_fuzz.cpp) and the command-line battery (tests/cli/battery_files.cpp) apply them to
// checkpoints the programs really write, through the real encoder, so every mutant has a valid header.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/core/rng.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"

namespace tapegrad::test {

inline constexpr int kMutationKinds = 18;

// A name a forger might pick: an escape sequence, a newline, a NUL, another record's name, a long one.
inline std::string hostile_name(Rng& rng, const std::string& other) {
  switch (rng.next_u64() % 6) {
    case 0: return other;
    case 1: return other + "\x1b[2J";
    case 2: return std::string("a\nb\0c", 5);
    case 3: return std::string(static_cast<std::size_t>(1 + rng.next_u64() % 5000), 'x');
    case 4: return "";
    default: return other + "." + other;
  }
}

inline double extreme_value(Rng& rng) {
  constexpr double values[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(), 1e300, -0.0, 5e-324};
  return values[rng.next_u64() % std::size(values)];
}

inline std::int64_t extreme_count(Rng& rng) {
  constexpr std::int64_t values[] = {-1, 0, std::int64_t{1} << 62, std::numeric_limits<std::int64_t>::max(),
                                     std::numeric_limits<std::int64_t>::min(), 1 << 24, 50000000};
  return values[rng.next_u64() % std::size(values)];
}

// The entries whose names start with `prefix` ("" for all) and hold a V (any kind when V is void).
template <class V = void>
std::vector<StateEntry*> entries_of(Checkpoint& c, std::string_view prefix = "") {
  std::vector<StateEntry*> out;
  for (auto& e : c.entries)
    if (e.name.starts_with(prefix)) {
      if constexpr (std::is_void_v<V>) out.push_back(&e);
      else if (std::holds_alternative<V>(e.value)) out.push_back(&e);
    }
  return out;
}

inline bool is_tensor(const StateEntry& e) { return e.value.index() <= 1; }

// An entry's value with another count of elements: `n` of them (a tensor becomes a vector of n).
inline StateValue resized(const StateValue& v, std::size_t n) {
  return std::visit([&](const auto& x) -> StateValue {
    using V = std::remove_cvref_t<decltype(x)>;
    if constexpr (requires { x.numel(); }) return V(Shape::vec(static_cast<Index>(n)), typename V::Scalar(0.5));
    else {
      V out = x;
      out.resize(n);
      return out;
    }
  }, v);
}

// Sets every number of a tensor or a list of numbers or integers at position i (modulo its size) to v.
inline void poke(StateValue& value, std::size_t i, double v) {
  std::visit([&](auto& x) {
    using V = std::remove_cvref_t<decltype(x)>;
    if constexpr (requires { x.numel(); }) {
      if (x.numel() > 0) x[static_cast<Index>(i % static_cast<std::size_t>(x.numel()))] = static_cast<typename V::Scalar>(v);
    } else if constexpr (std::is_same_v<V, std::vector<double>>) {
      if (!x.empty()) x[i % x.size()] = v;
    } else if constexpr (std::is_same_v<V, std::vector<std::int64_t>>) {
      if (!x.empty()) x[i % x.size()] = std::isfinite(v) ? static_cast<std::int64_t>(std::clamp(v, -9e18, 9e18)) : 0;
    }
  }, value);
}

// Applies mutation `kind` (0 .. kMutationKinds - 1) to `c`, drawing its details from `rng`.
inline void mutate(Checkpoint& c, int kind, Rng& rng) {
  auto pick = [&](auto& v) -> decltype(v[0])& { return v[static_cast<std::size_t>(rng.next_u64() % v.size())]; };
  auto& entries = c.entries;
  auto set_ints = [&](const char* name, std::int64_t v) {
    if (StateEntry* e = c.find(name); e && std::holds_alternative<std::vector<std::int64_t>>(e->value))
      std::get<std::vector<std::int64_t>>(e->value) = {v};
  };
  auto set_text = [&](const char* name, std::string v) {
    if (StateEntry* e = c.find(name)) e->value = std::vector<std::string>{std::move(v)};
  };
  switch (kind) {
    case 0:  // an entry twice, the copy whole, emptied or of one element
      if (!entries.empty()) {
        StateEntry copy = pick(entries);
        const auto how = rng.next_u64() % 3;
        if (how > 0) copy.value = resized(copy.value, how == 1 ? 0 : 1);
        entries.insert(entries.begin() + static_cast<std::ptrdiff_t>(rng.next_u64() % (entries.size() + 1)), copy);
      }
      break;
    case 1:  // an entry of another kind: a tensor of the other element type, numbers for integers, ...
      if (!entries.empty()) {
        StateEntry& e = pick(entries);
        if (const auto* f = std::get_if<TensorT<float>>(&e.value)) {
          TensorT<double> d(f->shape());
          d.array() = f->array().cast<double>();
          e.value = std::move(d);
        } else if (const auto* ints = std::get_if<std::vector<std::int64_t>>(&e.value)) {
          e.value = std::vector<double>(ints->begin(), ints->end());
        } else {
          e.value = std::vector<std::int64_t>{1, 2};
        }
      }
      break;
    case 2:  // a tensor of another shape (a count that no longer fits what reads it)
      if (auto tensors = entries_of<TensorT<float>>(c); !tensors.empty()) {
        const Index dims[] = {0, 1, 3, 100};
        const Index cols = dims[rng.next_u64() % std::size(dims)];
        pick(tensors)->value = TensorT<float>(rng.next_u64() % 2 ? Shape::vec(cols) : Shape::mat(cols, 2), 0.25f);
      }
      break;
    case 3:  // two names swapped
      if (entries.size() > 1) std::swap(pick(entries).name, pick(entries).name);
      break;
    case 4:  // a name renamed
      if (!entries.empty()) {
        auto& e = pick(entries);
        e.name = hostile_name(rng, e.name);
      }
      break;
    case 5:  // NaN or Inf in the weights or a list of numbers
      if (!entries.empty()) poke(pick(entries).value, rng.next_u64(), extreme_value(rng));
      break;
    case 6: {  // settings by the thousand (or one setting twice)
      const bool model = rng.next_u64() % 2 || !c.has("optimizer");
      const std::size_t n = rng.next_u64() % 2 ? 1 : 20000 + rng.next_u64() % 40000;
      for (std::size_t i = 0; i < n; ++i) {
        if (model)
          c.model.config.push_back(n == 1 && !c.model.config.empty() ? c.model.config.front()
                                                                      : Setting{fmt::format("k{}", i), fmt::format("{}", i)});
        else
          entries.push_back({n == 1 ? "optimizer.hyperparameters.lr" : fmt::format("optimizer.hyperparameters.h{}", i),
                             std::vector<std::string>{fmt::format("{}", i)}});
      }
      break;
    }
    case 7:  // a setting's value forged: huge, negative, not a number, long
      if (!c.model.config.empty()) {
        const char* values[] = {"50000000", "2e18", "-1", "nan", "3", "0", "18446744073709551615"};
        auto& s = pick(c.model.config);
        s.value = rng.next_u64() % 8 == 0 ? std::string(100000, '9') : values[rng.next_u64() % std::size(values)];
      }
      break;
    case 8:  // the counters at their extremes: a trainer's, a loop's
      switch (rng.next_u64() % 6) {
        case 0: set_ints("trainer.step", extreme_count(rng)); break;
        case 1: set_text("trainer.options.steps", fmt::format("{}", extreme_count(rng))); break;
        case 2: set_ints("trainer.window_steps", extreme_count(rng)); break;
        case 3: set_ints("trainer.data_order.cursor", extreme_count(rng)); break;
        case 4: set_ints("trainer.data_order.epoch", extreme_count(rng)); break;
        default: set_ints("step", extreme_count(rng)); break;
      }
      break;
    case 9: {  // both the step and the run's length forged together
      const std::int64_t n = extreme_count(rng);
      set_ints("trainer.step", n);
      set_text("trainer.options.steps", fmt::format("{}", n));
      break;
    }
    case 10:  // an optimizer buffer twice, or renamed
      if (auto buffers = entries_of(c, "optimizer.state."); !buffers.empty()) {
        if (rng.next_u64() % 2) entries.push_back(*pick(buffers)); else pick(buffers)->name = hostile_name(rng, pick(buffers)->name);
      }
      break;
    case 11:  // the optimizer's step, a buffer's NaN
      if (auto buffers = entries_of(c, "optimizer.state."); rng.next_u64() % 2 || buffers.empty())
        set_ints("optimizer.step", extreme_count(rng));
      else
        poke(pick(buffers)->value, rng.next_u64(), extreme_value(rng));
      break;
    case 12:  // the trainer's options forged
      set_text("trainer.options.batch", fmt::format("{}", extreme_count(rng)));
      if (rng.next_u64() % 2) set_text("trainer.options.eval_batch", fmt::format("{}", extreme_count(rng)));
      break;
    case 13:  // metadata forged (where the data was, how much of it)
      c.metadata[rng.next_u64() % 2 ? "task.train" : "data"] = rng.next_u64() % 2 ? "3000000000" : hostile_name(rng, "x");
      break;
    case 14:  // a curve point out of order or past the step, a window's NaN
      if (StateEntry* steps = c.find("trainer.curve.step"); steps && rng.next_u64() % 2)
        poke(steps->value, rng.next_u64(), static_cast<double>(extreme_count(rng)));
      else if (StateEntry* loss = c.find("trainer.window_loss"))
        poke(loss->value, 0, extreme_value(rng));
      break;
    case 15:  // the model's kind
      c.model.kind = hostile_name(rng, c.model.kind);
      break;
    case 16:  // a list of another length: a stream of 3 words, a curve whose columns do not fit, no values
      if (auto lists = entries_of(c); !lists.empty()) {
        StateEntry* e = pick(lists);
        if (!is_tensor(*e)) e->value = resized(e->value, static_cast<std::size_t>(rng.next_u64() % 6));
      }
      break;
    default:  // a random stream of zeros, a data order that is no permutation
      if (auto ints = entries_of<std::vector<std::int64_t>>(c); !ints.empty()) {
        auto& v = std::get<std::vector<std::int64_t>>(pick(ints)->value);
        std::fill(v.begin(), v.end(), rng.next_u64() % 2 ? 0 : 7);
      }
      break;
  }
}

// `count` mutations of random kinds.
inline void mutate_many(Checkpoint& c, Rng& rng, int count) {
  for (int i = 0; i < count; ++i) mutate(c, static_cast<int>(rng.next_u64() % kMutationKinds), rng);
}

}  // namespace tapegrad::test
