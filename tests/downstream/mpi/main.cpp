// Built against the installed tapegrad::mpi: its header, its library and MPI's come with the component, and
// the library's with it (shard_of is tapegrad::tapegrad's). Not started by mpirun, so it starts no MPI; it
// checks what it can without one. The umbrella header is ../main.cpp's to compile: parsing it again here
// proved nothing more, for seconds of the suite's longest test.
#include <tapegrad/train/mpi/mpi_collective.hpp>

#include <cstdio>

int main() {
  using namespace tapegrad;
  const Shard second = shard_of(33, 1, 2);
  if (started_by_mpi_launcher() || second.begin != 17 || second.end != 33) {
    std::puts("downstream_mpi: wrong answer");
    return 1;
  }
  std::puts("downstream_mpi: ok");
  return 0;
}
