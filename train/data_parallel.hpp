#pragma once
// Data-parallel training: the StepReducer (train/step_reducer.hpp) of one rank of a group of processes,
// over the Collective interface (train/collective.hpp), each rank with the same model, data and options.
// The whole protocol lives here; the Trainer holds a reducer and knows nothing of it:
//
//   - start: the ranks compare the CRC-32 of their configuration (options, model, parameters' names and
//     shapes, optimizer, data, metrics, step, data order and random stream) and refuse a mismatch naming
//     the rank and what differs (ValueError), then take rank 0's parameters and size the step's buffer
//     (no allocation after that);
//   - every rank runs the same sampler and takes the contiguous part shard_of(B, r, R) of each global
//     batch, so the batch order is the single-process order; a part that is empty or weighs nothing is not
//     computed;
//   - one all-reduce per step of w g, w loss, w and the metric tallies in one float buffer, divided by the
//     summed weight: the global batch's means, whatever the number of ranks but for float rounding. The
//     NaN stop, clipping and the update read the reduced values, so every rank stops, or steps, alike;
//   - evaluation: contiguous ranges of the data, its sums reduced once;
//   - every options.check_every steps and at the end of run() the ranks compare a CRC-32 of their
//     parameters (DivergenceError naming the step and the ranks);
//   - dropout: at each step every rank draws one number from the training stream and seeds its own
//     stream with it and its rank, so the saved stream is the same on every rank and a resume on as many
//     ranks is exact; with dropout the masks, and so the results, depend on the number of ranks.
//
// What throws on every rank alike (a mismatch, a non-finite reduced loss or norm, a divergence) leaves the
// group consistent; what throws on one rank only (anomaly detection, a user's loss function, a full disk
// on rank 0) leaves the others waiting in the next collective, so a program must then end the job
// (MpiCollective::abort), as examples/data_parallel.hpp does for any failure.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/train/collective.hpp"
#include "tapegrad/train/step_reducer.hpp"

namespace tapegrad {

class DataParallel final : public StepReducer {
 public:
  // `collective` must outlive the reducer. ValueError for check_every < 1. A group of one rank would
  // compute the single-process step with more rounding (w g / w): reducer_for() gives it SingleProcess.
  DataParallel(Collective& collective, DataParallelOptions options);

  int rank() const { return collective_.rank(); }
  int size() const { return collective_.size(); }

  void start(TrainerBase& trainer) override;
  void restart() override { started_ = false; }
  Rng& step_stream(Rng&) override { return step_stream_; }
  std::span<const Index> shard(std::span<const Index> batch, Rng& training) override;
  bool computes(double weight) const override { return weight > 0; }  // else 0 / 0 would poison the sums
  double reduce(std::span<Parameter<float>* const> params, std::optional<double> loss, double weight,
                std::span<Tally> tallies) override;
  void after_step(std::span<Parameter<float>* const> params, Index step) override {
    if (step % options_.check_every == 0) check_replicas(params, step);
  }
  void after_run(std::span<Parameter<float>* const> params, Index step) override { check_replicas(params, step); }
  Shard eval_shard(Index n) const override { return shard_of(n, rank(), size()); }
  void reduce_sums(std::span<double> sums) override { collective_.all_reduce_sum(sums); }

  // DivergenceError naming the step and the ranks unless every rank holds rank 0's parameters.
  void check_replicas(std::span<Parameter<float>* const> params, Index step);

 private:
  // Compares the CRC-32 of each (what, text) of `configuration` across the ranks and refuses a difference
  // (ValueError naming the first that differs, the ranks, and rank 0's text).
  void refuse_mismatch(const std::vector<std::pair<std::string, std::string>>& configuration);

  Collective& collective_;
  DataParallelOptions options_;
  bool started_ = false;
  Rng step_stream_;
  std::size_t metrics_ = 0;                  // tallies per step, as the group started
  std::vector<float> fused_;                 // w g of every parameter, then w loss, w, the tallies
  std::vector<std::uint32_t> replica_crcs_;  // every rank's parameter checksum
};

// The reducer of this rank of `collective` (what Trainer::set_collective installs): DataParallel for a
// group of several ranks, SingleProcess for a group of one (nothing to share and nothing to compare: the
// single-process loop, bit for bit). ValueError for check_every < 1.
std::unique_ptr<StepReducer> reducer_for(Collective& collective, DataParallelOptions options = {});

}  // namespace tapegrad
