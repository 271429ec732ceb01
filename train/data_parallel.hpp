#pragma once
// One replica's part in data-parallel training, behind the Collective interface (train/collective.hpp):
// what a Trainer given a Collective does besides the single-process loop, so the Trainer itself holds one
// pointer to it and no state of its own for it. The arithmetic and the guarantees are collective.hpp's:
// shards of one global batch, one all-reduce of w g, w loss, w and the metric tallies per step, rank 0's
// parameters at the start, a CRC-32 of the parameters compared every check_every steps.

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/autograd/parameter.hpp"
#include "tapegrad/core/rng.hpp"
#include "tapegrad/train/collective.hpp"
#include "tapegrad/train/metrics.hpp"

namespace tapegrad {

class DataParallel {
 public:
  DataParallel(Collective& collective, DataParallelOptions options);  // ValueError for check_every < 1

  Collective& collective() const { return collective_; }
  int rank() const { return collective_.rank(); }
  int size() const { return collective_.size(); }
  bool started() const { return started_; }
  void restart() { started_ = false; }  // a new state (a resume): the ranks compare again before they go on

  // Every rank together, before the first step: compares the CRC-32 of each (what, text) of
  // `configuration` and refuses a difference (ValueError naming the first that differs, the ranks, and
  // rank 0's text); then takes rank 0's parameters and sizes the step's buffers (none after this).
  void start(const std::vector<std::pair<std::string, std::string>>& configuration,
             std::span<Parameter<float>* const> params, std::size_t metrics);

  // This rank's contiguous part of a global batch. Every rank draws the step's seed from `stream` (the
  // training stream a checkpoint saves, so it stays the same on every rank) and seeds step_stream() with
  // it and its rank, for the step's dropout masks.
  std::span<const Index> shard(std::span<const Index> batch, Rng& stream);
  Rng& step_stream() { return step_stream_; }
  std::vector<Tally>& step_tallies() { return step_tallies_; }  // this rank's metric tallies of one step

  // Forward was a mean over this rank's shard of weight w (loss, its gradient in each parameter's grad;
  // `have_gradient` false for an empty shard). One all-reduce of w g, w loss, w and the tallies; returns
  // the global batch's mean loss (NaN if no rank weighed anything).
  double reduce(std::span<Parameter<float>* const> params, bool have_gradient, double loss, double weight);
  // After reduce(): the global batch's mean gradient into each parameter's grad, and the reduced tallies
  // added into `windows`.
  void take_mean(std::span<Parameter<float>* const> params, std::span<MetricWindow> windows);

  Shard eval_shard(Index n) const { return shard_of(n, rank(), size()); }
  void reduce_sums(std::span<double> sums) { collective_.all_reduce_sum(sums); }
  // DivergenceError naming the step and the ranks unless every rank holds rank 0's parameters.
  void check_replicas(std::span<Parameter<float>* const> params, Index step);
  const DataParallelOptions& options() const { return options_; }

 private:
  Collective& collective_;
  DataParallelOptions options_;
  bool started_ = false;
  Rng step_stream_;
  std::vector<Tally> step_tallies_;
  std::vector<float> fused_;                 // w g of every parameter, then w loss, w, the tallies
  std::vector<std::uint32_t> replica_crcs_;  // every rank's parameter checksum
};

}  // namespace tapegrad
