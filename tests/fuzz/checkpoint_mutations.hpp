#pragma once
// Structure-aware mutations of a checkpoint: what a hostile but careful forger changes in a well-formed file
// (whose checksum they then fix): a record duplicated (whole, emptied, one element), a value count or a
// shape changed, names swapped or renamed (control characters, NUL, long), settings by the ten thousand,
// counters at their extremes, NaN and Inf values. Byte flips rarely reach these: the fuzzer
// (checkpoint_fuzz.cpp) and the command-line battery (tests/cli/battery_files.cpp) apply them to
// checkpoints the programs really write, through the real encoder, so every mutant has a valid header.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/core/rng.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"

namespace tapegrad::test {

inline constexpr int kMutationKinds = 16;

// A name a forger might pick: an escape sequence, a newline, a NUL, another record's name, a long one.
inline std::string hostile_name(Rng& rng, const std::string& other) {
  switch (rng.next_u64() % 6) {
    case 0: return other;
    case 1: return other + "\x1b[2J";
    case 2: return std::string("a\nb\0c", 5);
    case 3: return std::string(static_cast<std::size_t>(1 + rng.next_u64() % 5000), 'x');
    case 4: return "";
    default: return other + "/" + other;
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

// Applies mutation `kind` (0 .. kMutationKinds - 1) to `c`, drawing its details from `rng`.
inline void mutate(Checkpoint& c, int kind, Rng& rng) {
  auto pick = [&](auto& v) -> decltype(v[0])& { return v[static_cast<std::size_t>(rng.next_u64() % v.size())]; };
  auto& params = c.parameters;
  switch (kind) {
    case 0:  // a parameter twice, the copy whole, emptied or of one element
      if (!params.empty()) {
        TensorRecord copy = pick(params);
        const auto how = rng.next_u64() % 3;
        if (how == 1) copy.shape = Shape::vec(0), copy.values.clear();
        if (how == 2) copy.shape = Shape::vec(1), copy.values.assign(1, 0.5);
        params.insert(params.begin() + static_cast<std::ptrdiff_t>(rng.next_u64() % (params.size() + 1)), copy);
      }
      break;
    case 1:  // a value count that is not the shape's
      if (!params.empty()) {
        auto& p = pick(params);
        if (rng.next_u64() % 2 && !p.values.empty()) p.values.resize(p.values.size() / 2); else p.values.push_back(1.0);
      }
      break;
    case 2:  // a shape changed, its values kept (or made to fit, when small)
      if (!params.empty()) {
        auto& p = pick(params);
        const Index dims[] = {0, 1, 3, 1 << 20, Index{1} << 40, -1};
        p.shape.cols = dims[rng.next_u64() % std::size(dims)];
        if (rng.next_u64() % 2 && p.shape.valid() && p.shape.numel() < 100000) p.values.assign(static_cast<std::size_t>(p.shape.numel()), 0.25);
      }
      break;
    case 3:  // two names swapped
      if (params.size() > 1) std::swap(pick(params).name, pick(params).name);
      break;
    case 4:  // a name renamed
      if (!params.empty()) {
        auto& p = pick(params);
        p.name = hostile_name(rng, p.name);
      }
      break;
    case 5:  // NaN or Inf in the weights
      if (!params.empty()) {
        auto& p = pick(params);
        if (!p.values.empty()) pick(p.values) = extreme_value(rng);
      }
      break;
    case 6: {  // settings by the thousand (or one setting twice)
      Settings& s = rng.next_u64() % 2 || !c.training ? c.model.config : c.training->optimizer.hyperparameters;
      const std::size_t n = rng.next_u64() % 2 ? 1 : 20000 + rng.next_u64() % 40000;
      for (std::size_t i = 0; i < n; ++i)
        s.push_back(n == 1 && !s.empty() ? s.front() : Setting{fmt::format("k{}", i), fmt::format("{}", i)});
      break;
    }
    case 7:  // a setting's value forged: huge, negative, not a number, long
      if (!c.model.config.empty()) {
        const char* values[] = {"50000000", "2e18", "-1", "nan", "3", "0", "18446744073709551615"};
        auto& s = pick(c.model.config);
        s.value = rng.next_u64() % 8 == 0 ? std::string(100000, '9') : values[rng.next_u64() % std::size(values)];
      }
      break;
    case 8:  // the trainer's counters at their extremes
      if (c.training) {
        auto& t = c.training->trainer;
        switch (rng.next_u64() % 5) {
          case 0: t.step = extreme_count(rng); break;
          case 1: t.options.steps = extreme_count(rng); break;
          case 2: t.window_steps = extreme_count(rng); break;
          case 3: t.data_order.cursor = extreme_count(rng); break;
          default: t.data_order.epoch = extreme_count(rng); break;
        }
      }
      break;
    case 9:  // both the step and the run's length forged together
      if (c.training) c.training->trainer.step = c.training->trainer.options.steps = extreme_count(rng);
      break;
    case 10:  // an optimizer buffer twice, or renamed
      if (c.training && !c.training->optimizer.buffers.empty()) {
        auto& buffers = c.training->optimizer.buffers;
        if (rng.next_u64() % 2) buffers.push_back(pick(buffers)); else pick(buffers).name = hostile_name(rng, pick(buffers).name);
      }
      break;
    case 11:  // the optimizer's step, a buffer's NaN
      if (c.training) {
        auto& o = c.training->optimizer;
        if (rng.next_u64() % 2 || o.buffers.empty()) o.step = extreme_count(rng);
        else if (!pick(o.buffers).values.empty()) pick(pick(o.buffers).values) = extreme_value(rng);
      }
      break;
    case 12:  // the trainer's options forged
      if (c.training) {
        auto& o = c.training->trainer.options;
        o.batch = extreme_count(rng);
        if (rng.next_u64() % 2) o.eval_batch = extreme_count(rng);
      }
      break;
    case 13:  // metadata forged (where the data was, how much of it)
      c.metadata[rng.next_u64() % 2 ? "task.train" : "data"] = rng.next_u64() % 2 ? "3000000000" : hostile_name(rng, "x");
      break;
    case 14:  // a curve point out of order or past the step, a window's NaN
      if (c.training) {
        auto& t = c.training->trainer;
        if (!t.curve.empty() && rng.next_u64() % 2) pick(t.curve).step = extreme_count(rng);
        else t.window_loss = extreme_value(rng);
      }
      break;
    default:  // the model's kind
      c.model.kind = hostile_name(rng, c.model.kind);
      break;
  }
}

// `count` mutations of random kinds.
inline void mutate_many(Checkpoint& c, Rng& rng, int count) {
  for (int i = 0; i < count; ++i) mutate(c, static_cast<int>(rng.next_u64() % kMutationKinds), rng);
}

}  // namespace tapegrad::test
