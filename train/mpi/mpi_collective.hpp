#pragma once
// tapegrad::mpi: the data-parallel hook (train/collective.hpp) over MPI, for a training run started by
// mpirun, one process per rank:
//
//   MpiCollective world(&argc, &argv);    // MPI_Init; MPI_Finalize when it goes
//   trainer.set_collective(&world);       // each rank a replica, its shard of every global batch
//   trainer.run();
//
// A separate library (built when TAPEGRAD_MPI is on and MPI is found) so that tapegrad::tapegrad needs no
// MPI. Every call is a collective of MPI_COMM_WORLD; an MPI error is an IoError naming the call and MPI's
// reason. A rank that fails on its own (an exception no other rank sees) must end the whole job with
// abort(), or the others wait for it for ever.

#include <span>

#include "tapegrad/train/collective.hpp"

namespace tapegrad {

// Whether this process was started by an MPI launcher (mpirun, mpiexec, srun): from the environment it
// sets (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, ...), without starting MPI.
bool started_by_mpi_launcher();

class MpiCollective final : public Collective {
 public:
  // MPI_Init_thread (MPI calls from the main thread only); UsageError if MPI already runs in this process.
  MpiCollective(int* argc, char*** argv);
  ~MpiCollective() override;  // MPI_Finalize
  MpiCollective(const MpiCollective&) = delete;
  MpiCollective& operator=(const MpiCollective&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(std::span<float> data) override;
  void all_reduce_sum(std::span<double> data) override;
  void broadcast(std::span<std::byte> data, int root) override;
  void all_gather(std::span<const std::uint32_t> mine, std::span<std::uint32_t> all) override;
  void barrier() override;
  // Ends every rank of the job now (MPI_Abort); mpirun exits with `code`.
  [[noreturn]] void abort(int code) const;

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace tapegrad
