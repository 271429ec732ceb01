#pragma once
// How the processes that train one model share its steps: the Trainer's one partner in that, so the loop
// itself has a single shape whatever the number of processes. A training step is, in this order:
//
//   start(trainer)                      every process together, before the first step (a no-op after)
//   shard(global batch, training rng)   this process's indices; the forward draws from step_stream()
//   computes(weight)                    whether this process runs the forward on them
//   reduce(params, loss, weight, ...)   this process's loss, gradient and metric tallies -> the batch's
//   after_step(params, step)            once the update is taken
//
// and an evaluation shards its examples (eval_shard) and reduces its sums (reduce_sums) the same way.
// StepReducer's own hooks, and so SingleProcess, the Trainer's default, are the identity. DataParallel
// (train/data_parallel.hpp) is the group of processes over a Collective. Every process of a group makes the
// same calls in the same order: what one process throws from a hook, every process throws alike.

#include <limits>
#include <optional>
#include <span>

#include "tapegrad/autograd/parameter.hpp"
#include "tapegrad/core/rng.hpp"
#include "tapegrad/train/collective.hpp"
#include "tapegrad/train/metrics.hpp"

namespace tapegrad {

class TrainerBase;

// Its hooks are the identity, the single-process loop: the whole batch is this process's shard, the sums are
// what it computed, there is nothing to compare. A group of processes overrides them.
class StepReducer {
 public:
  virtual ~StepReducer() = default;

  // Before a step, run() or evaluate(), on a trainer that is complete (evaluation data, metrics, a resumed
  // state): the first call after construction or restart() starts the group (a group compares what its
  // processes were given and refuses a mismatch); the others return at once.
  virtual void start(TrainerBase&) {}
  // The trainer's state was replaced (a resume): the next start() starts over.
  virtual void restart() {}
  // The stream the model draws a step's random masks from, given the trainer's training stream (the one
  // checkpoints save). The trainer sets it as the model's (Module::set_rng) with the reducer.
  virtual Rng& step_stream(Rng& training) { return training; }

  // This process's part of the global batch `batch` (the sampler's next). May draw from `training`, the
  // same number of times on every process, to seed step_stream() for the step.
  virtual std::span<const Index> shard(std::span<const Index> batch, Rng&) { return batch; }
  // Whether this process runs the forward on its shard (not empty), which weighs `weight` (B::weight()).
  // One process runs every batch: what a batch that weighs nothing means is its loss function's business
  // (cross_entropy's is a loss of 0).
  virtual bool computes(double) const { return true; }
  // Forward was a mean over this process's shard of weight `weight`: `loss` (none when it computed
  // nothing), its gradient in each parameter's grad when the loss is finite (zeros, which every step starts
  // from, when it is not or there is none: backward was not run, and a non-finite loss stops the step),
  // `tallies` its metrics' tallies. Leaves the global batch's mean gradient in
  // the grads and its tallies in `tallies`, and returns its mean loss, which the trainer checks (NaN when
  // nothing weighed anything).
  virtual double reduce(std::span<Parameter<float>* const>, std::optional<double> loss, double, std::span<Tally>) {
    return loss.value_or(std::numeric_limits<double>::quiet_NaN());
  }
  // After the update of step `step` (steps taken), and at the end of run().
  virtual void after_step(std::span<Parameter<float>* const>, Index) {}
  virtual void after_run(std::span<Parameter<float>* const>, Index) {}

  // The range of n evaluation examples this process evaluates, and the sum over the processes of what
  // each summed over its range, in place.
  virtual Shard eval_shard(Index n) const { return {0, n}; }
  virtual void reduce_sums(std::span<double>) {}
};

// One process: the single-process loop, the trainer's default.
class SingleProcess final : public StepReducer {};

}  // namespace tapegrad
