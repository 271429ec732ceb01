#pragma once
// Threads. Built with OpenMP (the TAPEGRAD_OPENMP option, on when the compiler has it), tapegrad splits
// large products, softmaxes, elementwise ops and optimizer updates over threads; the count comes from
// OMP_NUM_THREADS, as PyTorch's does, or from set_num_threads(). The threads are the library's own: a pool
// of num_threads() - 1 workers started the first time work is split (again when the count changes), that
// sleep when there is no work; OpenMP keeps only the count (and Eigen's own products, outside tapegrad's).
//
// One idea. A split job is cut into pieces that the calling thread and the workers take one at a time from
// one shared counter, so a thread the scheduler parks costs the piece it holds, not the job. Every output
// element is computed by exactly one thread with exactly the code one thread would run, so results are
// bit-identical at any thread count and any schedule. How many threads a job gets is one policy, below,
// decided by its size: it changes only the speed.

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <type_traits>

#include "tapegrad/core/shape.hpp"

namespace tapegrad {

int num_threads();            // 1 without OpenMP
void set_num_threads(int n);  // ValueError unless n >= 1; no effect without OpenMP
bool have_openmp();

// ---- The policy: how many threads a job gets ------------------------------------------------------
// By its size alone, with nothing measured: work of w multiply-adds (one product) or w elements (one
// elementwise pass; a pass that costs k operations an element counts k w) runs on floor(2 w / min)
// threads, at least 1 and at most num_threads(). Two threads from `min`, the work whose halves each take a
// thread about twice as long as a split costs; one more for each further half of it, so that every
// thread's share is worth its part of the cost. A split costs more than starting and joining awake
// threads: a worker idle since the last split sleeps and takes a while to wake, and the other thread reads
// its share of the operands from this one's cache and writes results that the next op reads back, a cost
// in bytes. So `min` is work whose halves outweigh a wake and their bytes: a product of 2^23 multiply-adds
// (a small model's projections, 2^21, and its attention, stay on one thread) or a pass over 2^17 elements
// (half a megabyte of floats), counted in work, not timed on the machine at hand. Small work stays on one
// thread, and only work worth it spreads over all of a big machine's cores. The measurements behind the
// constants are in docs/performance.md ("Threads").
inline constexpr double kMinMacs = 1 << 23;      // `min` for a product, in multiply-adds
inline constexpr double kMinElements = 1 << 17;  // `min` for an elementwise pass, in elements

// The policy's figures, for tests that force or forbid splits; a user may pin another machine's. Not
// synchronised with work in flight: set them before, not during, a computation.
struct ParallelCrossover {
  double min_macs = kMinMacs;
  double min_elements = kMinElements;
};
const ParallelCrossover& parallel_crossover();
void set_parallel_crossover(const ParallelCrossover& c);  // ValueError on a negative minimum

// How many threads work of this size gets (1 inside a piece of a split, and with one thread).
int threads_for_product(double macs);
int threads_for_elements(double elements);

// How many parallel regions this process has started: each parallel_for or parallel_rows that split its
// work over more than one thread (one job of pieces for the pool) counts one. A benchmark reads it to tell
// a step that split nothing (the same instructions on one thread, whatever OMP_NUM_THREADS says) from one
// that did.
std::uint64_t parallel_regions_started();

namespace detail {
void parallel_chunks(Index n, Index grain, int threads, void (*body)(void*, Index, Index), void* context);

// Grow-only buffers of the calling thread, one per slot, each starting on a 64-byte boundary: what
// autograd/kernels.hpp hands out (it names the slots). Each slot's buffer is at least `bytes` long and as
// long as the longest any thread has asked of that slot, so that a thread that meets a size for the first
// time a few steps in (pieces go to whichever thread is free) finds it already there: the pool grows its
// idle workers' buffers to those lengths when it starts a job, and equalize_thread_scratch() grows the
// calling thread's at a point where it holds no pointer into them (Tape::reset). A training step that
// records the same ops as the last one thus allocates nothing, whichever thread ran which piece.
inline constexpr std::size_t kScratchSlots = 16;
std::byte* thread_scratch_bytes(std::size_t slot, std::size_t bytes);
// Grows the calling thread's buffers to the longest asked of each slot. Invalidates every pointer the
// thread holds into them: call it between operations only.
void equalize_thread_scratch();

}  // namespace detail

// Runs body(begin, end) over [0, n) in pieces on up to `threads` threads (fewer when n has fewer grains),
// else body(0, n). The calling thread and the pool's workers take the pieces one at a time from a shared
// counter, about four per thread; the call returns when every piece is done. Piece boundaries fall on
// multiples of `grain` (see parallel_rows); which thread runs a piece, and in what order, is left to the
// schedule, so a body must not depend on it (it writes its own elements, and keeps per-thread state in
// thread_local storage, autograd/kernels.hpp). Never splits inside a piece (a parallel_for there runs
// serially on its thread), nor while another thread's split holds the pool (it then runs serially, with
// the same results).
// An exception the body throws in any piece comes out here, on the calling thread: the first one thrown
// wins, the other pieces still run to their end (so what they wrote is whole), and the rest are
// dropped. Work already done by other pieces stays done: validate before writing where that matters.
template <class F>
void parallel_for(Index n, int threads, F&& body, Index grain = 1) {
  if (threads < 2 || n < 2) {
    body(Index{0}, n);
    return;
  }
  detail::parallel_chunks(
      n, grain, threads, [](void* f, Index b, Index e) { (*static_cast<std::remove_reference_t<F>*>(f))(b, e); },
      static_cast<void*>(&body));
}

// f(first, count) over the rows of a (rows x cols) pass whose elements cost `cost` elementwise
// operations each, split in row ranges when that is worth it. Row ranges start on multiples of 16
// elements (a 64-byte boundary of a tensor's aligned buffer, for float and double alike), so a vectorised
// pass over a range runs whole packets exactly where a pass over the whole tensor would, and leaves its
// scalar tail at the same elements: Eigen's vectorised exp or erf and its scalar fallback differ in the
// last bits, so this is what makes split elementwise work bit-identical to unsplit.
template <class F>
void parallel_rows(Index rows, Index cols, F&& f, double cost = 1) {
  const Index grain = 16 / std::gcd(cols, Index{16});  // rows per 16 elements (1 when cols is 0)
  parallel_for(
      rows, threads_for_elements(cost * static_cast<double>(rows) * static_cast<double>(cols)),
      [&](Index first, Index last) { f(first, last - first); }, grain);
}

// While alive, and if `when`, OpenMP regions started by the calling thread (Eigen's products among
// them) run on that thread alone. The setting is the thread's own (OpenMP's nthreads-var), so other
// threads are not affected.
class SingleThreaded {
 public:
  explicit SingleThreaded(bool when = true);
  ~SingleThreaded();
  SingleThreaded(const SingleThreaded&) = delete;
  SingleThreaded& operator=(const SingleThreaded&) = delete;

 private:
  int saved_ = 0;  // the thread count to restore, or 0
};

}  // namespace tapegrad
