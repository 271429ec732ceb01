#pragma once
// Learning-rate schedules: the lr to use at optimizer step `step` (0 for the first step). The training
// loop drives the optimizer with them: opt.set_lr(schedule.lr_at(step)) before opt.step().
// StepLr and CosineWithWarmup are checked against torch.optim.lr_scheduler in tests/test_optimizer.cpp.

#include <cstdint>
#include <string>

namespace tapegrad {

class LrSchedule {
 public:
  virtual ~LrSchedule();
  // Throws ValueError for a negative step.
  virtual double lr_at(std::int64_t step) const = 0;
  // One line for logs: "StepLr(lr 0.1, step_size 30, gamma 0.1)".
  virtual std::string describe() const = 0;
};

// lr at every step.
class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(double lr);
  double lr_at(std::int64_t step) const override;
  std::string describe() const override;

 private:
  double lr_;
};

// torch StepLR: lr gamma^floor(step / step_size).
class StepLr final : public LrSchedule {
 public:
  StepLr(double lr, std::int64_t step_size, double gamma);
  double lr_at(std::int64_t step) const override;
  std::string describe() const override;

 private:
  double lr_;
  std::int64_t step_size_;
  double gamma_;
};

// Linear warm-up, then cosine decay:
//   step < warmup_steps:          lr (step + 1) / warmup_steps          (the last warm-up step is at lr)
//   warmup_steps <= step < total: min_lr + (lr - min_lr) (1 + cos(pi (step - warmup) / (total - warmup))) / 2
//   step >= total_steps:          min_lr
// The same as torch's SequentialLR(LinearLR(1/warmup, 1, warmup - 1), CosineAnnealingLR(total - warmup,
// min_lr), milestones=[warmup]) up to total_steps (after which torch's cosine would rise again).
class CosineWithWarmup final : public LrSchedule {
 public:
  CosineWithWarmup(double lr, std::int64_t warmup_steps, std::int64_t total_steps, double min_lr = 0);
  double lr_at(std::int64_t step) const override;
  std::string describe() const override;

 private:
  double lr_;
  std::int64_t warmup_steps_, total_steps_;
  double min_lr_;
};

}  // namespace tapegrad
