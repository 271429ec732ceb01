#pragma once
// Threads. Built with OpenMP (the TAPEGRAD_OPENMP option, on when the compiler has it), tapegrad splits
// large products, softmaxes, elementwise ops and optimizer updates over threads; the count comes from
// OMP_NUM_THREADS, as PyTorch's does, or from set_num_threads(). The threads are the library's own: a pool
// of num_threads() - 1 workers started the first time work is split (again when the count changes), that
// sleep when there is no work; OpenMP keeps only the count (and Eigen's own products, outside tapegrad's).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tapegrad/core/shape.hpp"

namespace tapegrad {

int num_threads();            // 1 without OpenMP
void set_num_threads(int n);  // ValueError unless n >= 1; no effect without OpenMP
bool have_openmp();

// ---- Splitting work over threads ----------------------------------------------------------------
// Work is split only where every output element is computed by exactly one thread with exactly the code
// one thread would run: rows of a product (with the depth blocking of the whole product), items of a
// batched product, rows of a softmax, chunks of an elementwise op or of an optimizer update. Results are
// therefore bit-identical at every thread count, and whether a piece of work is split (the crossover
// below) changes only its speed.
//
// How many threads a piece of work uses is decided from its size, op by op: as many as give each thread
// a share that saves at least twice what starting and joining a parallel region costs, and never more
// than num_threads(). So a small product runs on one thread, a larger one on two, and only work worth it
// spreads over all of a big machine's cores, which would otherwise spend more on the region than they
// save. The grain comes from a measurement on the machine that runs it, once per process, at the first
// split (bounded in time whatever the thread count): the cost of a job over all the pool's threads against this thread's
// speed on a matrix product and on an elementwise pass. `TAPEGRAD_PARALLEL_MIN_MACS` /
// `TAPEGRAD_PARALLEL_MIN_ELEMENTS` in the environment override the measurement (0: every thread for any
// work).
// min_macs and min_elements are the work at which two threads pay; each further thread needs another
// half of it (work w runs on floor(2 w / min) threads, at most num_threads()).
struct ParallelCrossover {
  double min_macs = 0;      // multiply-adds of one product
  double min_elements = 0;  // elements of one elementwise pass (a row-wise pass counts its elements)
  double region_us = 0;     // what was measured: a parallel region's start and join, microseconds
  bool region_assumed = false;  // ... or not: the machine was too busy to measure it, so region_us is assumed
  double macs_per_us = 0;   // ... one thread's product speed
  double elements_per_us = 0;  // ... one thread's elementwise speed (y = a x + b over floats)
  // Whether a split that waited long for a parked thread makes the next ones use fewer threads for a while
  // (detail::BackOff). On by default; `TAPEGRAD_PARALLEL_BACK_OFF=0` turns it off, and so do tests that
  // count regions or pieces, which a back-off would make depend on the machine's other load.
  bool back_off = true;
  // What waking a worker that has slept longer than kDeepSleepUs costs the split, microseconds: the caller's
  // call to wake it and the time until it takes a piece. Work that one thread does in less time runs on
  // the calling thread alone while the workers sleep that deeply (they stay asleep): a virtual machine's
  // host lets a vCPU halt after a short idle window, and waking one past it costs several times a split's
  // usual start, more than short jobs far apart save (docs/performance.md, "A busy core"). Measured with
  // the rest; `TAPEGRAD_PARALLEL_WAKE_US` overrides it, and 0 (as tests that count regions set it) splits
  // whatever the workers are doing.
  double wake_us = 0;
};
// A worker asleep for longer than this, in microseconds, is asleep deeply (ParallelCrossover::wake_us):
// about where the cost of waking one steps up on the virtual machines measured.
inline constexpr double kDeepSleepUs = 150;
const ParallelCrossover& parallel_crossover();
// Reads the TAPEGRAD_PARALLEL_* variables and refuses a malformed one (ValueError), measuring nothing: a
// program calls it before it prints, and the measurement waits for the first split, after the program
// has applied its own thread count (with one thread, it times no region at all).
void check_parallel_environment();
// Replaces the measured crossover (tests force splitting with minimums of 0; a user may pin one machine's
// figures). Not synchronised with work in flight: call it before, not during, a computation.
void set_parallel_crossover(const ParallelCrossover& c);  // ValueError on a negative minimum

namespace detail {
void parallel_chunks(Index n, Index grain, int threads, void (*body)(void*, Index, Index), void* context);

// Grow-only buffers of the calling thread, one per slot, each starting on a 64-byte boundary: what
// autograd/scratch.hpp hands out (it names the slots). Each slot's buffer is at least `bytes` long and as
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

// A thread that the scheduler parks in the middle of a piece (its core given to another process) holds
// up the split until it runs again, a scheduler slice of milliseconds, where a region of a step lasts
// tens of microseconds. So when a split's caller has
// waited for a piece another thread held more than twice as long as its own longest piece took (plus
// kSlack), the splits of the next `length` use one helper fewer than that split had (on two cores: none;
// the step runs on the caller as on one thread, its worker asleep, and the busy core is the other
// program's). The length starts at kShortest and doubles, up to kLongest, while straggles recur within
// four lengths of the last back-off's end; a straggle during a back-off takes one helper more. Short, on
// purpose: on a machine whose cores are ours a straggle is rare, but a burst of other load on a shared
// host makes several, and longer back-offs then cost a step alone more than the straggles did
// (docs/performance.md, "A busy core"); each back-off ends by itself, and the first split after it has
// every helper again. A backed-off split keeps its pieces (fewer threads
// run them), so that no op meets a scratch size the steps before it did not. Which threads run which pieces never
// changes a result, so neither does this. Kept apart from the pool so that a test can drive it with its
// own clock.
struct BackOff {
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::duration kShortest = std::chrono::milliseconds(2);
  static constexpr Clock::duration kLongest = std::chrono::milliseconds(32);
  static constexpr Clock::duration kSlack = std::chrono::microseconds(100);

  Clock::time_point until{};
  Clock::duration length{0};
  int cap = 0;  // helpers allowed until `until`

  // Whether a split waited for a straggler: the caller's wait for the others' pieces against its own.
  static bool straggled(Clock::duration waited, Clock::duration longest_own_piece) {
    return waited > 2 * longest_own_piece + kSlack;
  }
  int helpers(int wanted, Clock::time_point now) const { return now < until ? std::min(wanted, cap) : wanted; }
  void after_straggle(int helpers_used, Clock::time_point now) {
    const bool again = length.count() > 0 && now - until < 4 * length;
    length = again ? std::min<Clock::duration>(2 * length, kLongest) : kShortest;
    cap = std::max(helpers_used - 1, 0);
    until = now + length;
  }
};
// The pool's back-off as it stands (a copy; for tests).
BackOff parallel_back_off();
}

// How many threads work of this size is worth (1 when there is one thread): see ParallelCrossover.
int threads_for_product(double macs);
int threads_for_elements(double elements);

// How many parallel regions this process has started: each parallel_for or parallel_rows that split its
// work over more than one thread (one job of pieces for the pool) counts one. A benchmark reads it to tell a step that split nothing (the
// same instructions on one thread, whatever OMP_NUM_THREADS says) from one that did.
std::uint64_t parallel_regions_started();
// How many splits waited for a thread the scheduler had parked mid-piece (detail::BackOff): a benchmark
// prints it beside the regions, 0 or nearly on a machine whose cores are free.
std::uint64_t parallel_straggles();
// ... and how long, in all, their callers waited for the parked threads' pieces, in microseconds.
double parallel_straggle_wait_us();

// Runs body(begin, end) over [0, n) in pieces on up to `threads` threads (fewer when n has fewer grains),
// else body(0, n). The calling thread and the pool's workers take the pieces one at a time from a shared
// counter, about four per thread, so a thread the scheduler has parked costs its piece, not the step (and
// after a piece held up a split, the next ones use fewer threads for a while: detail::BackOff); the call
// returns when every piece is done. Piece boundaries fall on multiples of `grain` (see parallel_rows);
// which thread runs a piece, and in what order, is left to the schedule, so a body must not depend on it
// (it writes its own elements, and keeps per-thread state in thread_local storage, autograd/scratch.hpp).
// Never splits inside a piece (a parallel_for there runs serially on its thread), nor while another
// thread's split holds the pool or a back-off leaves it no helper (it then runs serially, with the same
// results).
// An exception the body throws in any piece comes out here, on the calling thread: the first one thrown
// wins, the other pieces still run to their end (so what they wrote is whole), and the rest are
// dropped. Work already done by other pieces stays done: validate before writing where that matters.
template <class F>
void parallel_for(Index n, int threads, F&& body, Index grain = 1) {
  if (threads < 2 || n < 2) {
    body(Index{0}, n);
    return;
  }
  detail::parallel_chunks(n, grain, threads,
                          [](void* f, Index b, Index e) { (*static_cast<std::remove_reference_t<F>*>(f))(b, e); },
                          static_cast<void*>(&body));
}
// A yes/no split is gone: a bool would convert to 1 or 0 threads. Ask threads_for_* instead.
template <class F>
void parallel_for(Index n, bool split, F&& body, Index grain = 1) = delete;

// f(first, count) over the rows of a (rows x cols) pass whose elements cost `cost` elementwise
// operations each, split in row ranges when that is worth it.
template <class F>
void parallel_rows(Index rows, Index cols, F&& f, double cost = 1);

// Whether work of this size is worth splitting at all.
inline bool split_product(double macs) { return threads_for_product(macs) > 1; }
inline bool split_elements(double elements) { return threads_for_elements(elements) > 1; }

// Row ranges start on multiples of 16 elements (a 64-byte boundary of a tensor's aligned buffer, for
// float and double alike), so a vectorised pass over a range runs whole packets exactly where a pass
// over the whole tensor would, and leaves its scalar tail at the same elements: Eigen's vectorised
// exp or erf and its scalar fallback differ in the last bits, so this is what makes split elementwise
// work bit-identical to unsplit.
template <class F>
void parallel_rows(Index rows, Index cols, F&& f, double cost) {
  Index grain = 16;
  for (Index c = cols; grain > 1 && c % 2 == 0; c /= 2) grain /= 2;  // 16 / gcd(cols, 16): rows per 16 elements
  if (cols == 0) grain = 1;
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
