#include "tapegrad/train/schedule.hpp"

#include <cmath>
#include <numbers>

#include "tapegrad/core/error.hpp"

namespace tapegrad {
namespace {

void require_step(std::int64_t step) {
  if (step < 0) fail<ValueError>("lr_at: step must be >= 0, got {}", step);
}

}  // namespace

LrSchedule::~LrSchedule() = default;

double ConstantLr::lr_at(double lr, std::int64_t step) const {
  require_step(step);
  return lr;
}

ScheduleRecord ConstantLr::record() const { return {std::string(to_string(ScheduleKind::constant)), {}}; }

// lr gamma^floor(step / step_size)
double StepLr::lr_at(double lr, std::int64_t step) const {
  require_step(step);
  return lr * std::pow(options_.gamma, static_cast<double>(step / options_.step_size));
}

CosineWithWarmup::CosineWithWarmup(CosineOptions options) : ScheduleWith(options, "CosineWithWarmup") {
  if (options_.warmup_steps > options_.total_steps)
    fail<ValueError>("CosineWithWarmup: warmup_steps {} is more than total_steps {}", options_.warmup_steps,
                     options_.total_steps);
}

double CosineWithWarmup::lr_at(double lr, std::int64_t step) const {
  require_step(step);
  const auto [warmup, total, min_lr] = options_;
  if (min_lr > lr) fail<ValueError>("CosineWithWarmup: min_lr {} is above the optimizer's lr {}", min_lr, lr);
  if (step < warmup)  // lr (step + 1) / warmup
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return min_lr;
  // min_lr + (lr - min_lr) (1 + cos(pi progress)) / 2, progress from 0 at warmup to 1 at total
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return min_lr + (lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

std::unique_ptr<LrSchedule> make_schedule(const ScheduleRecord& r) {
  const std::string what = fmt::format("schedule '{}'", r.kind);
  switch (parse_enum<ScheduleKind>(r.kind)) {
    case ScheduleKind::constant:
      if (!r.settings.empty()) fail<NameError>("{}: takes no settings, got {}", what, describe_settings(r.settings));
      return std::make_unique<ConstantLr>();
    case ScheduleKind::step:
      return std::make_unique<StepLr>(from_settings<StepLrOptions>(r.settings, what));
    case ScheduleKind::cosine:
      return std::make_unique<CosineWithWarmup>(from_settings<CosineOptions>(r.settings, what));
  }
  fail<NameError>("{}: no such schedule", what);
}

}  // namespace tapegrad
