#pragma once
// Counts heap allocations made through operator new, replaced in alloc_counter.cpp. Linked only into
// the allocation test (tapegrad_alloc_tests) and the benchmarks, never into the library.

namespace tapegrad::test {
long allocation_count();
}
