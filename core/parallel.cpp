#include "tapegrad/core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
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

bool have_openmp() {
#ifdef _OPENMP
  return true;
#else
  return false;
#endif
}

int num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

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

// ---- The policy (core/parallel.hpp) -----------------------------------------------------------------
int threads_for(double work, double min) {
  const int most = num_threads();
  if (most < 2 || inside_split || !(work >= min)) return 1;
  if (min <= 0) return most;
  const double worth = std::floor(2 * work / min);  // >= 2, as work >= min
  return worth >= most ? most : static_cast<int>(worth);
}

}  // namespace

const ParallelCrossover& parallel_crossover() { return crossover; }

void set_parallel_crossover(const ParallelCrossover& c) {
  if (!(c.min_macs >= 0) || !(c.min_elements >= 0))
    fail<ValueError>("set_parallel_crossover: the minimums must be >= 0, got {} multiply-adds and {} elements",
                     c.min_macs, c.min_elements);
  crossover = c;
}

int threads_for_product(double macs) { return threads_for(macs, crossover.min_macs); }
int threads_for_elements(double elements) { return threads_for(elements, crossover.min_elements); }

namespace {
// Counted with a relaxed increment by the thread that starts the region.
std::atomic<std::uint64_t> regions_started{0};
}  // namespace

std::uint64_t parallel_regions_started() { return regions_started.load(std::memory_order_relaxed); }

// ---- The pool ---------------------------------------------------------------------------------------
// A split job is cut into pieces (whole grains each) that the calling thread and the pool's workers take
// one at a time from a shared counter: a worker the scheduler has parked takes none, and the others take
// its share. The caller returns once every piece is done, not once every worker has arrived: a worker
// that wakes late finds nothing left and goes back to waiting. (An OpenMP region ends in a barrier that
// waits for every thread of its team, scheduled or not: with one core busy, two threads were slower than
// one.)
namespace {

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

// The job's counter, one 64-bit word: generation (24 bits) | helpers (8 bits) | pieces left (32 bits).
// Taking a piece is a compare-and-swap that fails when another thread took one first or when the
// generation moved on (a new job was published since this thread read the word), so a piece is taken
// once and only from the job it belongs to. Helpers: how many workers may take part (workers 0 ..
// helpers-1), so a job worth 2 threads of 8 wakes 1 helper's work.
constexpr std::uint64_t kLeftBits = 32, kHelperBits = 8, kGenerationBits = 24;
constexpr std::uint64_t kLeftMask = (std::uint64_t{1} << kLeftBits) - 1;
constexpr std::uint64_t kHelperMask = (std::uint64_t{1} << kHelperBits) - 1;
constexpr std::uint64_t kGenerationMask = (std::uint64_t{1} << kGenerationBits) - 1;
constexpr int kMostWorkers = static_cast<int>(kHelperMask);  // 255 workers, 256 threads with the caller

std::uint64_t pieces_left(std::uint64_t word) { return word & kLeftMask; }
int helpers_of(std::uint64_t word) { return static_cast<int>((word >> kLeftBits) & kHelperMask); }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class Pool {
 public:
  Pool() = default;
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool();

  // One caller at a time: another thread that finds the pool taken runs its work serially.
  bool try_acquire() { return !busy_.exchange(true, std::memory_order_acquire); }
  void release() { busy_.store(false, std::memory_order_release); }

  // Held by the caller: makes the pool `workers` threads (only when the count changed).
  void resize(int workers);
  int workers() const { return static_cast<int>(workers_.size()); }

  // Held by the caller: body(context, begin, end) over [0, n) in `pieces` pieces of `piece` elements (the
  // last one shorter), taken by the calling thread and up to `helpers` workers. Returns when every piece
  // is done, with the first exception a piece threw.
  std::exception_ptr run(Index n, Index piece, std::uint64_t pieces, int helpers, void (*body)(void*, Index, Index),
                         void* context);

 private:
  // Takes one piece of the current job, if one is left and `worker` (-1: the caller) may help; returns
  // the counter's word as it was before the take (0: none taken).
  std::uint64_t take(int worker);
  void run_piece(std::uint64_t taken);
  void work(int index);
  void stop_workers();

  // The job: written by the caller before it publishes the counter, read by a thread only after it has
  // taken a piece (so only while the caller waits for that piece, and the context is alive).
  void (*body_)(void*, Index, Index) = nullptr;
  void* context_ = nullptr;
  Index n_ = 0, piece_ = 0;
  std::uint64_t pieces_ = 0;
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;  // the first exception; written before its piece is counted done

  std::uint64_t generation_ = 0;
  alignas(64) std::atomic<std::uint64_t> counter_{0};
  alignas(64) std::atomic<std::uint32_t> done_{0};  // pieces of the current job done
  alignas(64) std::atomic<std::uint32_t> wake_{0};  // bumped per job: sleeping workers wait on it
  std::atomic<bool> stop_{false};
  std::atomic<bool> busy_{false};
  std::vector<std::thread> workers_;
  // Worker i's scratch buffers: here, not in the thread, so that run() can grow them while the workers
  // are idle (between jobs no piece runs, so no worker holds a pointer into them).
  std::vector<std::unique_ptr<ScratchSet>> scratch_;
  pid_t owner_ = getpid();  // a forked child has the pool's memory but none of its threads
};

// Set once the pool is destroyed (at exit): work split after that runs on the calling thread.
std::atomic<bool> pool_gone{false};

Pool& pool() {
  static Pool p;
  return p;
}

Pool::~Pool() {
  if (getpid() == owner_) {
    stop_workers();
  } else {
    for (std::thread& t : workers_) t.detach();  // not this process's threads: nothing to join
  }
  pool_gone.store(true, std::memory_order_release);
}

void Pool::stop_workers() {
  stop_.store(true, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  stop_.store(false, std::memory_order_relaxed);
}

void Pool::resize(int workers) {
  workers = std::clamp(workers, 0, kMostWorkers);
  if (workers == this->workers()) return;
  stop_workers();
  workers_.reserve(static_cast<std::size_t>(workers));
  while (scratch_.size() < static_cast<std::size_t>(workers)) scratch_.push_back(std::make_unique<ScratchSet>());
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i] { work(i); });
}

std::uint64_t Pool::take(int worker) {
  std::uint64_t word = counter_.load(std::memory_order_acquire);
  while (pieces_left(word) > 0 && worker < helpers_of(word)) {
    if (counter_.compare_exchange_weak(word, word - 1, std::memory_order_acquire, std::memory_order_acquire))
      return word;
  }
  return 0;
}

void Pool::run_piece(std::uint64_t taken) {
  const std::uint64_t pieces = pieces_;  // read before `done_` counts this piece (the job may end then)
  const Index k = static_cast<Index>(pieces - pieces_left(taken));
  const Index begin = k * piece_, end = std::min(n_, begin + piece_);
  // An exception must not leave a worker's thread, so each piece catches its own; the first one is kept
  // and the other pieces still run to their end, so what they wrote is whole.
  try {
    body_(context_, begin, end);
  } catch (...) {
    if (!failed_.exchange(true, std::memory_order_relaxed)) error_ = std::current_exception();
  }
  if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == pieces) done_.notify_one();
}

void Pool::work(int index) {
  inside_split = true;
  worker_scratch = scratch_[static_cast<std::size_t>(index)].get();
#ifdef _OPENMP
  omp_set_num_threads(1);  // Eigen's products in a piece run on this thread, as they did inside a region
#endif
  for (;;) {
    auto since = Clock::now();
    for (int spins = 1;; ++spins) {
      if (const std::uint64_t taken = take(index)) {
        run_piece(taken);
        since = Clock::now();
        continue;
      }
      if (stop_.load(std::memory_order_acquire)) return;
      if (spins % 64 == 0 && Clock::now() - since > kSpin) break;
      cpu_relax();
    }
    // Asleep until the next job: read the wake count before looking for work, so a job published after
    // the look has bumped it and the wait returns at once.
    const std::uint32_t seen = wake_.load(std::memory_order_acquire);
    const std::uint64_t word = counter_.load(std::memory_order_acquire);
    if ((pieces_left(word) > 0 && index < helpers_of(word)) || stop_.load(std::memory_order_acquire)) continue;
    wake_.wait(seen, std::memory_order_acquire);
  }
}

std::exception_ptr Pool::run(Index n, Index piece, std::uint64_t pieces, int helpers, void (*body)(void*, Index, Index),
                             void* context) {
  // The last job is done (every piece counted, with acquire): no worker holds a pointer into its scratch
  // until this job is published below, so growing their buffers here races with nothing.
  for (int i = 0; i < helpers; ++i) scratch_[static_cast<std::size_t>(i)]->grow_to_longest();
  body_ = body;
  context_ = context;
  n_ = n;
  piece_ = piece;
  pieces_ = pieces;
  failed_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  generation_ = (generation_ + 1) & kGenerationMask;
  counter_.store(generation_ << (kLeftBits + kHelperBits) | static_cast<std::uint64_t>(helpers) << kLeftBits | pieces,
                 std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();  // a system call only when a worker sleeps

  const bool was_inside = inside_split;
  inside_split = true;
  {
    const SingleThreaded one;  // Eigen's products in a piece run on this thread, as they did inside a region
    while (const std::uint64_t taken = take(-1)) run_piece(taken);
  }
  inside_split = was_inside;
  // The pieces other threads took: spin for a while (they are usually nearly done), then sleep until the
  // last one is counted, so a worker parked on this core gets it.
  const auto since = Clock::now();
  for (int spins = 1;; ++spins) {
    const std::uint32_t done = done_.load(std::memory_order_acquire);
    if (done == pieces) break;
    if (spins % 64 == 0 && Clock::now() - since > kSpin) {
      done_.wait(done, std::memory_order_acquire);
      continue;
    }
    cpu_relax();
  }
  return std::exchange(error_, nullptr);
}

}  // namespace

void detail::parallel_chunks(Index n, Index grain, int most, void (*body)(void*, Index, Index), void* context) {
  grain = std::max<Index>(grain, 1);
  const Index grains = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<Index>({num_threads(), most, grains}));
  if (threads < 2 || inside_split || pool_gone.load(std::memory_order_acquire)
#ifdef _OPENMP
      || omp_in_parallel()
#endif
      || !pool().try_acquire()) {  // (another thread's job holds the pool: this one runs here, with the same results)
    body(context, 0, n);
    return;
  }
  Pool& p = pool();
  const struct Held {
    Pool& p;
    ~Held() { p.release(); }
  } held{p};
  p.resize(num_threads() - 1);
  const int helpers = std::min(threads - 1, p.workers());
  const Index per_thread = static_cast<Index>(helpers + 1) * kPiecesPerThread;
  const Index per_piece = (grains + per_thread - 1) / per_thread;  // grains
  const Index pieces = (grains + per_piece - 1) / per_piece;
  regions_started.fetch_add(1, std::memory_order_relaxed);
  const std::exception_ptr error =
      p.run(n, per_piece * grain, static_cast<std::uint64_t>(pieces), helpers, body, context);
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

SingleThreaded::SingleThreaded([[maybe_unused]] bool when) {
#ifdef _OPENMP
  if (when && omp_get_max_threads() > 1) {
    saved_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
#endif
}

SingleThreaded::~SingleThreaded() {
#ifdef _OPENMP
  if (saved_ > 0) omp_set_num_threads(saved_);
#endif
}

}  // namespace tapegrad
