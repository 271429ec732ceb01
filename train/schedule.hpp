#pragma once
// Learning-rate schedules. A schedule holds no learning rate of its own: the optimizer's `lr` is the one
// home of that number, and a schedule attached to the optimizer (Optimizer::set_schedule) turns it into
// the rate of each step: lr_at(lr, step), step 0 being the first. StepLr and CosineWithWarmup are checked
// against torch.optim.lr_scheduler in tests/test_optimizer.cpp.
//
// Each schedule's settings are an options struct whose fields() list is their one table (core/settings.hpp):
// checks, checkpoints (ScheduleRecord), `inspect` and make_schedule() read it.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tapegrad/core/enum_names.hpp"
#include "tapegrad/core/settings.hpp"

namespace tapegrad {

enum class ScheduleKind { constant, step, cosine };

template <>
struct EnumNames<ScheduleKind> {
  static constexpr std::string_view what = "schedule";
  static constexpr std::array<EnumName<ScheduleKind>, 3> names = {{
      {ScheduleKind::constant, "constant"},
      {ScheduleKind::step, "step"},
      {ScheduleKind::cosine, "cosine"},
  }};
};

// What a checkpoint keeps of a schedule: its kind and settings. Two schedules with equal records give
// the same rates.
struct ScheduleRecord {
  std::string kind = "constant";
  Settings settings;
  bool operator==(const ScheduleRecord&) const = default;
  // "cosine (warmup_steps 10, total_steps 100, min_lr 0)"
  std::string describe() const {
    return settings.empty() ? kind : fmt::format("{} ({})", kind, describe_settings(settings));
  }
};

class LrSchedule {
 public:
  virtual ~LrSchedule();
  // The rate of step `step` for an optimizer whose learning rate is `lr`. Throws ValueError for a
  // negative step.
  virtual double lr_at(double lr, std::int64_t step) const = 0;
  virtual ScheduleRecord record() const = 0;
  virtual std::unique_ptr<LrSchedule> clone() const = 0;
  std::string describe() const { return record().describe(); }
};

// The optimizer's lr at every step (what an optimizer without a schedule does).
class ConstantLr final : public LrSchedule {
 public:
  double lr_at(double lr, std::int64_t step) const override;
  ScheduleRecord record() const override;
  std::unique_ptr<LrSchedule> clone() const override { return std::make_unique<ConstantLr>(*this); }
};

// A schedule of kind K whose settings are the options struct O, checked at construction (`op` names the
// schedule in messages): its record and its copy, once for every such schedule.
template <class Self, ScheduleKind K, class O>
class ScheduleWith : public LrSchedule {
 public:
  ScheduleRecord record() const final { return {std::string(to_string(K)), to_settings(options_)}; }
  std::unique_ptr<LrSchedule> clone() const final { return std::make_unique<Self>(static_cast<const Self&>(*this)); }

 protected:
  ScheduleWith(O options, std::string_view op) : options_(options) { check_fields(options_, op); }
  O options_;
};

struct StepLrOptions {
  std::int64_t step_size = 1;
  double gamma = 0.1;
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("step_size", s.step_size, "steps between decays", at_least(1));
    field("gamma", s.gamma, "factor applied at each decay", above(0));
  }
};

// torch StepLR: lr gamma^floor(step / step_size).
class StepLr final : public ScheduleWith<StepLr, ScheduleKind::step, StepLrOptions> {
 public:
  explicit StepLr(StepLrOptions options) : ScheduleWith(options, "StepLr") {}  // ValueError for one out of range
  double lr_at(double lr, std::int64_t step) const override;
};

struct CosineOptions {
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  double min_lr = 0;  // the floor; at most the optimizer's lr
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("warmup_steps", s.warmup_steps, "steps of linear warm-up", at_least(0));
    field("total_steps", s.total_steps, "step at which the cosine reaches min_lr", at_least(1));
    field("min_lr", s.min_lr, "the rate after total_steps", at_least(0));
  }
};

// Linear warm-up, then cosine decay:
//   step < warmup_steps:          lr (step + 1) / warmup_steps          (the last warm-up step is at lr)
//   warmup_steps <= step < total: min_lr + (lr - min_lr) (1 + cos(pi (step - warmup) / (total - warmup))) / 2
//   step >= total_steps:          min_lr
// The same as torch's SequentialLR(LinearLR(1/warmup, 1, warmup - 1), CosineAnnealingLR(total - warmup,
// min_lr), milestones=[warmup]) up to total_steps (after which torch's cosine would rise again).
// lr_at throws ValueError if min_lr is above the optimizer's lr.
class CosineWithWarmup final : public ScheduleWith<CosineWithWarmup, ScheduleKind::cosine, CosineOptions> {
 public:
  explicit CosineWithWarmup(CosineOptions options);  // ValueError for options out of range
  double lr_at(double lr, std::int64_t step) const override;
};

// The schedule a record describes (a checkpoint's, or a command line's). NameError for an unknown kind,
// NameError or ValueError for settings that do not fit it.
std::unique_ptr<LrSchedule> make_schedule(const ScheduleRecord& record);

}  // namespace tapegrad
