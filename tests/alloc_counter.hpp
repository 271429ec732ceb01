#pragma once
// Counts heap allocations made through operator new, replaced in alloc_counter.cpp: test support
// (tapegrad_test_alloc_counter), linked only into the allocation tests (tapegrad_alloc_tests,
// tapegrad_mpi_tests) and the benchmarks, never into the library.

namespace tapegrad::test {
long allocation_count();
}
