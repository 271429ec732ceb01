#include "tapegrad/core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/tensor.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tapegrad {

#ifdef _OPENMP
bool have_openmp() { return true; }
int num_threads() { return omp_get_max_threads(); }
#else
bool have_openmp() { return false; }
int num_threads() { return 1; }
#endif

void set_num_threads(int n) {
  if (n < 1) fail<ValueError>("set_num_threads: needs at least 1 thread, got {}", n);
#ifdef _OPENMP
  omp_set_num_threads(n);  // Eigen asks omp_get_max_threads() for its count; no Eigen::setNbThreads,
#endif                     // which would override SingleThreaded below
}

namespace {

using Clock = std::chrono::steady_clock;

// True on a pool worker always, and on a caller while it runs pieces: work split inside a piece runs
// serially on the thread that reaches it (no nested splitting).
thread_local bool inside_split = false;

ParallelCrossover crossover;

// Counted with a relaxed increment by the thread that starts the region.
std::atomic<std::uint64_t> regions_started{0};

// ---- The policy (core/parallel.hpp) -----------------------------------------------------------------
int threads_for(double work, double min) {
  const int most = num_threads();
  if (most < 2 || inside_split || !(work >= min)) return 1;
  if (min <= 0) return most;
  const double worth = std::floor(2 * work / min);  // >= 2, as work >= min
  return worth >= most ? most : static_cast<int>(worth);
}

// ---- The pool ---------------------------------------------------------------------------------------
// A split job is cut into pieces (whole grains each) that the calling thread and the pool's workers take
// one at a time from a shared counter: a worker the scheduler has parked takes none, and the others take
// its share. The caller returns once every piece is done, not once every worker has arrived: a worker
// that wakes late finds nothing left and goes back to waiting. (An OpenMP region ends in a barrier that
// waits for every thread of its team, scheduled or not: with one core busy, two threads were slower than
// one.)

// ---- Scratch (see detail::thread_scratch_bytes) ----
// The longest length asked of each slot by any thread, and a count bumped whenever one rises, so that
// a thread whose buffers are already as long (its `seen` matches) checks one atomic and nothing else.
std::atomic<std::size_t> scratch_longest[detail::kScratchSlots];
std::atomic<std::uint64_t> scratch_rises{0};

struct ScratchSet {
  std::vector<std::byte, AlignedAllocator<std::byte>> buffers[detail::kScratchSlots];
  std::uint64_t seen = 0;  // scratch_rises when this set was last grown to every slot's longest

  void grow_to_longest() {
    const std::uint64_t rises = scratch_rises.load(std::memory_order_acquire);
    if (rises == seen) return;
    for (std::size_t slot = 0; slot < detail::kScratchSlots; ++slot) {
      const std::size_t longest = scratch_longest[slot].load(std::memory_order_relaxed);
      if (buffers[slot].size() < longest) buffers[slot].resize(longest);
    }
    seen = rises;
  }
};

thread_local ScratchSet* worker_scratch = nullptr;  // a pool worker's set, owned by the pool
ScratchSet& my_scratch() {
  thread_local ScratchSet own;  // any other thread's
  return worker_scratch ? *worker_scratch : own;
}

// A piece is about 1 / kPiecesPerThread of a thread's even share: small enough that a parked thread's
// share is spread over the others, large enough that taking one (an atomic operation on a shared line)
// and the work each piece repeats (a product's piece packs its own panels of B) stay small against it.
constexpr Index kPiecesPerThread = 4;

// How long an idle worker spins (checking for a job) before it sleeps, and how long a caller spins for
// the pieces still running before it sleeps: long enough to span the gap between two jobs of a step,
// short enough that an idle thread does not take a busy core's time from work that has it.
constexpr auto kSpin = std::chrono::microseconds(50);

// The job's counter, one 64-bit word: helpers (the high 32 bits) | pieces left (the low 32). Taking a
// piece is a compare-and-swap from the word the thread read, so a piece is taken once: the swap fails when
// another thread took one first or a new job was published since, unless the new job's word is the same,
// and then the piece taken is that job's next one (a thread reads which piece, and the job, after the
// swap). Helpers: how many workers may take part (workers 0 .. helpers-1), so a job worth 2 threads of 8
// wakes 1 helper's work.
constexpr std::uint64_t kLeftBits = 32, kLeftMask = (std::uint64_t{1} << kLeftBits) - 1;
constexpr int kMostWorkers = 255;  // 256 threads with the caller, whatever OMP_NUM_THREADS asks

std::uint64_t pieces_left(std::uint64_t word) { return word & kLeftMask; }
// Whether `worker` (-1: the caller) may take a piece of the job whose counter reads `word`.
bool can_take(std::uint64_t word, int worker) {
  return pieces_left(word) > 0 && worker < static_cast<int>(word >> kLeftBits);
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Returns once ready() is true: spins checking it for kSpin, then sleeps on `bell`, and so again. Whoever
// makes ready() true changes `bell` and notifies it after (a worker's bell: a count bumped per job; a
// caller's: the pieces done, which is what ready() reads). `bell` is read before ready(), so a change
// between the two ends the sleep at once.
template <class Ready>
void await(const std::atomic<std::uint32_t>& bell, Ready ready) {
  auto since = Clock::now();
  for (int spins = 1; !ready(); ++spins) {
    if (spins % 64 != 0 || Clock::now() - since <= kSpin) {
      cpu_relax();
      continue;
    }
    const std::uint32_t rung = bell.load(std::memory_order_acquire);
    if (!ready()) bell.wait(rung, std::memory_order_acquire);
    since = Clock::now();  // awake again (a worker woken by a job it found done): a whole spin before the next sleep
  }
}

// One job: body(context, begin, end) over [0, n) in `pieces` pieces of `piece` elements (the last one
// shorter).
struct Job {
  void (*body)(void*, Index, Index) = nullptr;
  void* context = nullptr;
  Index n = 0, piece = 0;
  std::uint64_t pieces = 0;
};

// Set once the pool is destroyed (at exit): work split after that runs on the calling thread.
std::atomic<bool> pool_gone{false};

class Pool {
 public:
  // Held by the one caller the pool serves at a time: another thread that finds it taken runs its work
  // serially.
  std::mutex busy;

  ~Pool() {
    if (getpid() == owner_) {
      stop_workers();
    } else {
      for (std::jthread& t : workers_) t.detach();  // not this process's threads: nothing to join
    }
    pool_gone.store(true, std::memory_order_release);
  }

  // Held by the caller: makes the pool `workers` threads (only when the count changed).
  void resize(int workers) {
    workers = std::clamp(workers, 0, kMostWorkers);
    if (workers == this->workers()) return;
    stop_workers();
    workers_.reserve(static_cast<std::size_t>(workers));
    while (scratch_.size() < static_cast<std::size_t>(workers)) scratch_.push_back(std::make_unique<ScratchSet>());
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i](const std::stop_token& stop) { work(stop, i); });
  }
  int workers() const { return static_cast<int>(workers_.size()); }

  // Held by the caller: runs `job`, taken piece by piece by the calling thread and up to `helpers` workers.
  // Returns when every piece is done, with the first exception a piece threw.
  std::exception_ptr run(const Job& job, int helpers) {
    // The last job is done (every piece counted, with acquire): no worker holds a pointer into its scratch
    // until this job is published below, so growing their buffers here races with nothing.
    for (int i = 0; i < helpers; ++i) scratch_[static_cast<std::size_t>(i)]->grow_to_longest();
    job_ = job;
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    counter_.store(static_cast<std::uint64_t>(helpers) << kLeftBits | job.pieces, std::memory_order_release);
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();  // a system call only when a worker sleeps

    inside_split = true;  // (false before: a split inside a piece does not reach the pool)
    {
      const SingleThreaded one;  // Eigen's products in a piece run on this thread, as they did inside a region
      while (const std::uint64_t taken = take(-1)) run_piece(taken);
    }
    inside_split = false;
    // The pieces other threads took: spin for a while (they are usually nearly done), then sleep until the
    // last one is counted, so a worker parked on this core gets it.
    await(done_, [&] { return done_.load(std::memory_order_acquire) == job.pieces; });
    return std::exchange(error_, nullptr);
  }

 private:
  // Takes one piece of the current job, if one is left and `worker` (-1: the caller) may help; returns
  // the counter's word as it was before the take (0: none taken).
  std::uint64_t take(int worker) {
    std::uint64_t word = counter_.load(std::memory_order_acquire);
    while (can_take(word, worker)) {
      if (counter_.compare_exchange_weak(word, word - 1, std::memory_order_acquire, std::memory_order_acquire))
        return word;
    }
    return 0;
  }

  void run_piece(std::uint64_t taken) {
    const std::uint64_t pieces = job_.pieces;  // read before `done_` counts this piece (the job may end then)
    const Index k = static_cast<Index>(pieces - pieces_left(taken));
    const Index begin = k * job_.piece, end = std::min(job_.n, begin + job_.piece);
    // An exception must not leave a worker's thread, so each piece catches its own; the first one is kept
    // and the other pieces still run to their end, so what they wrote is whole.
    try {
      job_.body(job_.context, begin, end);
    } catch (...) {
      if (!failed_.exchange(true, std::memory_order_relaxed)) error_ = std::current_exception();
    }
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == pieces) done_.notify_one();
  }

  void work(const std::stop_token& stop, int index) {
    inside_split = true;
    worker_scratch = scratch_[static_cast<std::size_t>(index)].get();
    set_num_threads(1);  // Eigen's products in a piece run on this thread, as they did inside a region
    for (;;) {
      await(wake_, [&] { return stop.stop_requested() || can_take(counter_.load(std::memory_order_acquire), index); });
      if (stop.stop_requested()) return;
      while (const std::uint64_t taken = take(index)) run_piece(taken);
    }
  }

  void stop_workers() {
    for (std::jthread& t : workers_) t.request_stop();
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();
    workers_.clear();  // joins them
  }

  // The job: written by the caller before it publishes the counter, read by a thread only after it has
  // taken a piece (so only while the caller waits for that piece, and the context is alive).
  Job job_;
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;  // the first exception; written before its piece is counted done

  alignas(64) std::atomic<std::uint64_t> counter_{0};
  alignas(64) std::atomic<std::uint32_t> done_{0};  // pieces of the current job done
  alignas(64) std::atomic<std::uint32_t> wake_{0};  // bumped per job (and to stop): sleeping workers wait on it
  std::vector<std::jthread> workers_;
  // Worker i's scratch buffers: here, not in the thread, so that run() can grow them while the workers
  // are idle (between jobs no piece runs, so no worker holds a pointer into them).
  std::vector<std::unique_ptr<ScratchSet>> scratch_;
  pid_t owner_ = getpid();  // a forked child has the pool's memory but none of its threads
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

// ---- The policy's figures, and the split (core/parallel.hpp) ----------------------------------------
const ParallelCrossover& parallel_crossover() { return crossover; }

void set_parallel_crossover(const ParallelCrossover& c) {
  if (!(c.min_macs >= 0) || !(c.min_elements >= 0))
    fail<ValueError>("set_parallel_crossover: the minimums must be >= 0, got {} multiply-adds and {} elements",
                     c.min_macs, c.min_elements);
  crossover = c;
}

int threads_for_product(double macs) { return threads_for(macs, crossover.min_macs); }
int threads_for_elements(double elements) { return threads_for(elements, crossover.min_elements); }

std::uint64_t parallel_regions_started() { return regions_started.load(std::memory_order_relaxed); }

void detail::parallel_chunks(Index n, Index grain, int most, void (*body)(void*, Index, Index), void* context) {
  grain = std::max<Index>(grain, 1);
  const Index grains = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<Index>({num_threads(), most, grains}));
  std::unique_lock<std::mutex> held;  // the pool, for this job
  if (threads < 2 || inside_split || pool_gone.load(std::memory_order_acquire)
#ifdef _OPENMP
      || omp_in_parallel()
#endif
      || !(held = std::unique_lock(pool().busy, std::try_to_lock))) {
    body(context, 0, n);  // (another thread's job may hold the pool: this one runs here, with the same results)
    return;
  }
  Pool& p = pool();
  p.resize(num_threads() - 1);
  const int helpers = std::min(threads - 1, p.workers());
  const Index per_thread = static_cast<Index>(helpers + 1) * kPiecesPerThread;
  const Index per_piece = (grains + per_thread - 1) / per_thread;  // grains
  const Index pieces = (grains + per_piece - 1) / per_piece;
  regions_started.fetch_add(1, std::memory_order_relaxed);
  const std::exception_ptr error =
      p.run({body, context, n, per_piece * grain, static_cast<std::uint64_t>(pieces)}, helpers);
  if (error) std::rethrow_exception(error);
}

std::byte* detail::thread_scratch_bytes(std::size_t slot, std::size_t bytes) {
  auto& buffer = my_scratch().buffers[slot];
  if (buffer.size() >= bytes) return buffer.data();
  std::size_t longest = scratch_longest[slot].load(std::memory_order_relaxed);
  while (longest < bytes && !scratch_longest[slot].compare_exchange_weak(longest, bytes, std::memory_order_relaxed)) {
  }
  if (longest < bytes) scratch_rises.fetch_add(1, std::memory_order_release);
  buffer.resize(std::max(bytes, longest));
  return buffer.data();
}

void detail::equalize_thread_scratch() { my_scratch().grow_to_longest(); }

// The calling thread's count (OpenMP's nthreads-var, which set_num_threads sets) is 1 while it lives; without
// OpenMP it is 1 always, and there is nothing to do.
SingleThreaded::SingleThreaded(bool when) : saved_(when && num_threads() > 1 ? num_threads() : 0) {
  if (saved_ > 0) set_num_threads(1);
}

SingleThreaded::~SingleThreaded() {
  if (saved_ > 0) set_num_threads(saved_);
}

}  // namespace tapegrad
