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

ConstantLr::ConstantLr(double lr) : lr_(lr) { require_non_negative("ConstantLr", "lr", lr); }

double ConstantLr::lr_at(std::int64_t step) const {
  require_step(step);
  return lr_;
}

std::string ConstantLr::describe() const { return fmt::format("ConstantLr(lr {})", lr_); }

StepLr::StepLr(double lr, std::int64_t step_size, double gamma) : lr_(lr), step_size_(step_size), gamma_(gamma) {
  require_non_negative("StepLr", "lr", lr);
  if (step_size <= 0) fail<ValueError>("StepLr: step_size must be >= 1, got {}", step_size);
  if (!(std::isfinite(gamma) && gamma > 0)) fail<ValueError>("StepLr: gamma must be finite and > 0, got {}", gamma);
}

// lr gamma^floor(step / step_size)
double StepLr::lr_at(std::int64_t step) const {
  require_step(step);
  return lr_ * std::pow(gamma_, static_cast<double>(step / step_size_));
}

std::string StepLr::describe() const {
  return fmt::format("StepLr(lr {}, step_size {}, gamma {})", lr_, step_size_, gamma_);
}

CosineWithWarmup::CosineWithWarmup(double lr, std::int64_t warmup_steps, std::int64_t total_steps, double min_lr)
    : lr_(lr), warmup_steps_(warmup_steps), total_steps_(total_steps), min_lr_(min_lr) {
  require_non_negative("CosineWithWarmup", "lr", lr);
  require_non_negative("CosineWithWarmup", "min_lr", min_lr);
  if (min_lr > lr) fail<ValueError>("CosineWithWarmup: min_lr {} is above lr {}", min_lr, lr);
  if (warmup_steps < 0) fail<ValueError>("CosineWithWarmup: warmup_steps must be >= 0, got {}", warmup_steps);
  if (total_steps < 1) fail<ValueError>("CosineWithWarmup: total_steps must be >= 1, got {}", total_steps);
  if (warmup_steps > total_steps)
    fail<ValueError>("CosineWithWarmup: warmup_steps {} is more than total_steps {}", warmup_steps, total_steps);
}

double CosineWithWarmup::lr_at(std::int64_t step) const {
  require_step(step);
  if (step < warmup_steps_)  // lr (step + 1) / warmup
    return lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_steps_);
  if (step >= total_steps_) return min_lr_;
  // min_lr + (lr - min_lr) (1 + cos(pi progress)) / 2, progress from 0 at warmup to 1 at total
  const double progress =
      static_cast<double>(step - warmup_steps_) / static_cast<double>(total_steps_ - warmup_steps_);
  return min_lr_ + (lr_ - min_lr_) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

std::string CosineWithWarmup::describe() const {
  return fmt::format("CosineWithWarmup(lr {}, warmup_steps {}, total_steps {}, min_lr {})", lr_, warmup_steps_,
                     total_steps_, min_lr_);
}

}  // namespace tapegrad
