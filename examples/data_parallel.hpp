#pragma once
// --data-parallel for the example programs (train, char_lm): started by mpirun, each process is one rank
// of an MPI job and trains a replica of the model on its shard of every batch (train/data_parallel.hpp).
// Rank 0 alone prints, takes the --out folder and writes files; a failure on any rank ends the whole job
// with "<program>: rank N: <message>" and the program's exit code.
//
//   mpirun -np 2 build/examples/train --data-parallel --task cycle --out runs/c

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "tapegrad/train/collective.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"
#ifdef TAPEGRAD_HAVE_MPI
#include "tapegrad/train/mpi/mpi_collective.hpp"
#endif

namespace tapegrad::examples {

inline constexpr const char* kDataParallelHelp =
    "Train as one rank of an MPI job (mpirun -np N PROGRAM --data-parallel ...): each rank a replica of the model, "
    "its shard of every batch, gradients averaged over the ranks; rank 0 prints and writes the files";

// The program's place in a data-parallel job: rank 0 of 1 without --data-parallel.
class Job {
 public:
  Collective* collective() const {
#ifdef TAPEGRAD_HAVE_MPI
    return world_.get();
#else
    return nullptr;
#endif
  }
  int rank() const { return collective() ? collective()->rank() : 0; }
  int size() const { return collective() ? collective()->size() : 1; }
  bool leader() const { return rank() == 0; }  // prints, owns --out, writes the files

  // Runs `body` as run_program does. With --data-parallel it first joins the MPI job, refusing (exit 2) a
  // build without MPI or a program not started by an MPI launcher; a failure on any rank of a job of
  // more than one rank names the rank and ends every rank (MPI_Abort), so none waits for ever.
  int run(std::string_view program, bool data_parallel, int* argc, char*** argv, const std::function<int()>& body) {
    const auto where = [this] { return size() > 1 ? fmt::format("rank {}", rank()) : std::string(); };
    const int code = run_program(program, [&] {
      if (data_parallel) join(program, argc, argv);
      return body();
    }, where);
#ifdef TAPEGRAD_HAVE_MPI
    if (code != 0 && size() > 1) world_->abort(code);
    if (world_ && code == 0) world_->barrier();  // rank 0's files are written before any rank ends
#endif
    return code;
  }

 private:
  void join([[maybe_unused]] std::string_view program, [[maybe_unused]] int* argc, [[maybe_unused]] char*** argv) {
#ifdef TAPEGRAD_HAVE_MPI
    if (!started_by_mpi_launcher())
      fail<ValueError>("--data-parallel: this process was not started by mpirun; run it as 'mpirun -np 2 {} "
                       "--data-parallel ...'",
                       program);
    world_ = std::make_unique<MpiCollective>(argc, argv);
#else
    fail<ValueError>("--data-parallel: this build of tapegrad has no MPI; install libopenmpi-dev and configure with "
                     "-DTAPEGRAD_MPI=ON");
#endif
  }

#ifdef TAPEGRAD_HAVE_MPI
  std::unique_ptr<MpiCollective> world_;
#endif
};

}  // namespace tapegrad::examples
