#include "tapegrad/train/mpi/mpi_collective.hpp"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <string_view>

namespace tapegrad {
namespace {

// IoError "data-parallel: MPI_Allreduce failed: <MPI's reason>" unless MPI says success.
void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char reason[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, reason, &length);
  fail<IoError>("data-parallel: {} failed: {}", call, std::string_view(reason, static_cast<std::size_t>(length)));
}

// MPI counts are ints: a buffer past INT_MAX elements is refused rather than truncated.
int count_of(std::size_t n, const char* call) {
  if (n > static_cast<std::size_t>(INT_MAX))
    fail<LimitError>("data-parallel: {} of {} elements is more than MPI's limit of {} per call", call, n, INT_MAX);
  return static_cast<int>(n);
}

// The elementwise sum over the ranks of `n` values at `data`, in place: both all_reduce_sum's.
void sum_in_place(void* data, std::size_t n, MPI_Datatype type) {
  check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n, "MPI_Allreduce"), type, MPI_SUM, MPI_COMM_WORLD),
        "MPI_Allreduce");
}

}  // namespace

bool started_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

MpiCollective::MpiCollective(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    fail<UsageError>("data-parallel: MPI is already initialised in this process; make one MpiCollective");
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  // Errors come back as codes (then exceptions) instead of ending the process inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiCollective::~MpiCollective() { MPI_Finalize(); }

void MpiCollective::all_reduce_sum(std::span<float> data) { sum_in_place(data.data(), data.size(), MPI_FLOAT); }
void MpiCollective::all_reduce_sum(std::span<double> data) { sum_in_place(data.data(), data.size(), MPI_DOUBLE); }

void MpiCollective::broadcast(std::span<std::byte> data, int root) {
  check(MPI_Bcast(data.data(), count_of(data.size(), "MPI_Bcast"), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

void MpiCollective::all_gather(std::span<const std::uint32_t> mine, std::span<std::uint32_t> all) {
  if (all.size() != mine.size() * static_cast<std::size_t>(size_))
    fail<ValueError>("data-parallel: all_gather of {} values from {} ranks needs room for {}, got {}", mine.size(),
                     size_, mine.size() * static_cast<std::size_t>(size_), all.size());
  const int n = count_of(mine.size(), "MPI_Allgather");
  check(MPI_Allgather(mine.data(), n, MPI_UINT32_T, all.data(), n, MPI_UINT32_T, MPI_COMM_WORLD), "MPI_Allgather");
}

void MpiCollective::barrier() { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

void MpiCollective::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; if an implementation's did, this process still ends
}

}  // namespace tapegrad
