#pragma once
// Data-parallel training's hook: what the training loop needs from a group of processes ("ranks") that
// each hold a full replica of the model. The library itself knows nothing of MPI: a Trainer given a
// Collective (Trainer::set_collective) shards every global batch over the ranks and sums what they
// computed with all_reduce_sum; tapegrad::mpi (train/mpi/mpi_collective.hpp, built when TAPEGRAD_MPI is on)
// implements it over MPI. Without one, a trainer is the single-process loop it always was.
//
// How the loop uses it (train/trainer.hpp):
//   - every rank runs the same sampler, so the global batch order is the single-process order; rank r
//     takes the contiguous part shard_of(B, r, R) of each batch of B examples (uneven shards are fine, an
//     empty one contributes nothing);
//   - losses are means over a batch's weight (B::weight()), so each rank sends w_r * g_r, w_r * loss_r, w_r
//     and its metric tallies in one fused float buffer, one all_reduce_sum per step, and every rank divides
//     by the sum of the weights: the global batch's mean, whatever R is;
//   - the NaN stop, clipping and the update read the reduced values, so all ranks stop or step together;
//   - evaluation is sharded the same way (contiguous ranges of the data) and its sums reduced once;
//   - before the first step the ranks compare a checksum of their configuration and take rank 0's
//     parameters; every check_every steps they compare a CRC-32 of their parameters.
// Every rank must make the same calls in the same order: that is what a collective is.

#include <cstddef>
#include <cstdint>
#include <span>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/tensor.hpp"

namespace tapegrad {

// Ranks of a data-parallel run that no longer hold the same parameters (their replicas diverged).
class DivergenceError : public Error {
 public:
  using Error::Error;
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;  // 0 .. size() - 1
  virtual int size() const = 0;
  // The element-wise sum over every rank, in place. Every rank passes a buffer of the same length.
  virtual void all_reduce_sum(std::span<float> data) = 0;
  virtual void all_reduce_sum(std::span<double> data) = 0;
  // Rank `root`'s bytes into every rank's buffer (of the same length on every rank).
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  // Every rank's `mine` (the same length on every rank), in rank order, into `all` (size() * mine.size()).
  virtual void all_gather(std::span<const std::uint32_t> mine, std::span<std::uint32_t> all) = 0;
  virtual void barrier() = 0;
};

struct DataParallelOptions {
  Index check_every = 100;  // compare the ranks' parameters (a CRC-32) every N steps, and at the end of run()
};

// The contiguous part [begin, end) of n items that rank `rank` of `size` takes: the first n % size ranks
// take one more. Empty when n < size and rank >= n.
struct Shard {
  Index begin = 0, end = 0;
  Index size() const { return end - begin; }
};
Shard shard_of(Index n, int rank, int size);

}  // namespace tapegrad
