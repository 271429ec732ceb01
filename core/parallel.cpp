#include "tapegrad/core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
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

// Runs body over [0, n) split over up to `most` threads, or on this thread alone (see parallel_chunks).
// `measuring` (the crossover's measurement below): wait for the pool while another thread's job holds it,
// instead of running serially; neither follow a back-off nor start one; count no region.
void split_job(Index n, Index grain, int most, void (*body)(void*, Index, Index), void* context,
               bool measuring = false);

// The median time f takes, in microseconds.
template <class F>
double median_us(int samples, F f) {
  std::vector<double> t;
  for (int i = 0; i < samples; ++i) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  const auto middle = t.begin() + samples / 2;
  std::nth_element(t.begin(), middle, t.end());
  return *middle;
}

// The TAPEGRAD_PARALLEL_* settings, each unset or checked.
struct EnvironmentSettings {
  std::optional<double> min_macs, min_elements, wake_us;
  std::optional<bool> back_off;
};

std::optional<double> number_from_environment(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !(x >= 0)) fail<ValueError>("{}: expected a number >= 0, got '{}'", name, escaped(std::string_view(v)));
  return x;
}

EnvironmentSettings read_environment() {
  EnvironmentSettings e;
  e.min_macs = number_from_environment("TAPEGRAD_PARALLEL_MIN_MACS");
  e.min_elements = number_from_environment("TAPEGRAD_PARALLEL_MIN_ELEMENTS");
  e.wake_us = number_from_environment("TAPEGRAD_PARALLEL_WAKE_US");
  if (const char* v = std::getenv("TAPEGRAD_PARALLEL_BACK_OFF"); v && *v) {
    if (std::string_view(v) != "0" && std::string_view(v) != "1")
      fail<ValueError>("TAPEGRAD_PARALLEL_BACK_OFF: expected 0 or 1, got '{}'", escaped(std::string_view(v)));
    e.back_off = std::string_view(v) == "1";
  }
  return e;
}

ParallelCrossover measure_crossover() {
  const EnvironmentSettings settings = read_environment();  // a malformed value is refused before any timing
  ParallelCrossover c;
  volatile float sink = 0;
  const int threads = num_threads();
  if (threads > 1) {
    // A job of one piece per thread over the pool, each piece waiting until every thread has taken one:
    // the start and the join over all the threads, as an OpenMP region measures (its barrier), not the
    // caller alone taking empty pieces before a worker looks. The wait ends at one deadline for the whole
    // region, so a region costs about kPatience however many threads there are, and the measurement as a
    // whole stops at kBudget: its cost does not grow with the thread count, even far above the cores.
    constexpr auto kPatience = std::chrono::microseconds(200);
    constexpr auto kBudget = std::chrono::milliseconds(100);
    const auto measurement_start = Clock::now();
    auto over_budget = [&] { return Clock::now() - measurement_start > kBudget; };
    struct Rendezvous {
      std::atomic<int> arrived{0};
      int threads = 0;
      Clock::time_point deadline{};
    } meet;
    auto region = [&](int pieces, Clock::duration patience) {
      meet.arrived.store(0, std::memory_order_relaxed);
      meet.threads = pieces;
      meet.deadline = Clock::now() + patience;
      split_job(
          pieces, 1, pieces,
          [](void* context, Index begin, Index end) {
            auto& m = *static_cast<Rendezvous*>(context);
            if (end - begin > 1) return;  // run on this thread alone (not split): nothing to meet
            m.arrived.fetch_add(1, std::memory_order_acq_rel);
            while (m.arrived.load(std::memory_order_acquire) < m.threads && Clock::now() < m.deadline) {
            }
          },
          &meet, true);
    };
    for (int i = 0; i < 20 && !over_budget(); ++i) region(threads, kPatience);  // the workers exist and are awake
    // The median of the regions in which every worker came, not of all of them: a region in which the
    // scheduler kept a worker off a core measured that moment's other load, which the back-off answers
    // split by split, not the cost of a region; and the median, not the fastest, which is an outlier low.
    // Enough such regions or the budget, whichever comes first.
    constexpr double kCame = 50;  // us: a region this fast did not wait out kPatience for a worker
    std::vector<double> came;
    for (int i = 0; i < 303 && came.size() < 21 && !over_budget(); ++i) {
      const auto start = Clock::now();
      region(threads, kPatience);
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      if (us < kCame) came.push_back(us);
    }
    if (came.size() >= 21) {
      const auto middle = came.begin() + static_cast<std::ptrdiff_t>(came.size() / 2);
      std::nth_element(came.begin(), middle, came.end());
      c.region_us = *middle;
    } else {
      // Too few regions met in time: the machine was busy, and what was timed was its load. Kept, that
      // would make the process split almost nothing for its whole life, long after the load has gone;
      // so a region is assumed to cost what it does on an idle small machine, and a machine busy while
      // the work runs is the back-off's to handle (detail::BackOff).
      constexpr double kAssumedRegionUs = 2;
      c.region_us = kAssumedRegionUs;
      c.region_assumed = true;
    }
    // Waking a worker asleep deeply (ParallelCrossover::wake_us), the fastest of five: this thread sleeps
    // past kDeepSleepUs (a worker goes to sleep kSpin after its last job) and times a job of two pieces,
    // one of which waits for the worker to take the other. The fastest, as other load only adds to a
    // wake. No worker in any of the five: assumed kAssumedWakeUs.
    constexpr double kAssumedWakeUs = 100;
    double fastest = 1e3;
    for (int i = 0; i < 5; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(2 * static_cast<int>(kDeepSleepUs)));
      const auto start = Clock::now();
      region(2, std::chrono::milliseconds(1));
      fastest = std::min(fastest, std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
    c.wake_us = fastest < 1e3 ? fastest : kAssumedWakeUs;
  }
  {  // one thread's product speed, on a product a little past the sizes where the question arises
    const SingleThreaded one;
    const Index n = 96;
    RowMatrix<float> a = RowMatrix<float>::Constant(n, n, 0.5f), b = RowMatrix<float>::Constant(n, n, 0.25f), p(n, n);
    auto product = [&] {
      p.noalias() = a * b;
      sink = sink + p(0, 0);
    };
    product();
    c.macs_per_us = static_cast<double>(n * n * n) / median_us(11, product);
  }
  {  // ... and its elementwise speed
    const Index n = 1 << 14;
    Eigen::ArrayXf x = Eigen::ArrayXf::Constant(n, 0.5f), y = Eigen::ArrayXf::Zero(n);
    auto pass = [&] {
      y = 1.5f * x + y;
      sink = sink + y(0);
    };
    pass();
    c.elements_per_us = static_cast<double>(n) / median_us(21, pass);
  }
  // Two threads halve the time of work w (at speed r) and add a region (R): worth it when w / 2r >= 2R.
  c.min_macs = settings.min_macs.value_or(4 * c.region_us * c.macs_per_us);
  c.min_elements = settings.min_elements.value_or(4 * c.region_us * c.elements_per_us);
  c.wake_us = settings.wake_us.value_or(c.wake_us);
  c.back_off = settings.back_off.value_or(c.back_off);
  return c;
}

}  // namespace

namespace {
std::once_flag measured;
ParallelCrossover crossover;
}  // namespace

void check_parallel_environment() { (void)read_environment(); }

const ParallelCrossover& parallel_crossover() {
  std::call_once(measured, [] { crossover = measure_crossover(); });
  return crossover;
}

void set_parallel_crossover(const ParallelCrossover& c) {
  if (!(c.min_macs >= 0) || !(c.min_elements >= 0) || !(c.wake_us >= 0))
    fail<ValueError>("set_parallel_crossover: the minimums and the wake must be >= 0, got {} multiply-adds, {} elements and "
                     "{} us",
                     c.min_macs, c.min_elements, c.wake_us);
  parallel_crossover();  // measured first, so a later first call cannot overwrite this
  crossover = c;
}

namespace {
// Work w on floor(2 w / two_threads) threads, at least 1 and at most num_threads(): two threads at
// `two_threads`, each one more at another half of it (every thread's share is worth its region).
int threads_for(double work, double two_threads) {
  const int most = num_threads();
  if (most < 2 || !(work >= two_threads)) return 1;
  if (two_threads <= 0) return most;
  const double worth = std::floor(2 * work / two_threads);
  return worth >= most ? most : std::max(2, static_cast<int>(worth));
}

// Counted with a relaxed increment by the thread that starts the region: one per region, against the
// microseconds a region costs.
std::atomic<std::uint64_t> regions_started{0};
std::atomic<std::uint64_t> straggles{0};
std::atomic<std::uint64_t> straggle_wait_ns{0};
}  // namespace

std::uint64_t parallel_regions_started() { return regions_started.load(std::memory_order_relaxed); }
std::uint64_t parallel_straggles() { return straggles.load(std::memory_order_relaxed); }
double parallel_straggle_wait_us() { return 1e-3 * static_cast<double>(straggle_wait_ns.load(std::memory_order_relaxed)); }

namespace {
// Whether the pool's workers have slept longer than kDeepSleepUs (ParallelCrossover::wake_us).
bool workers_asleep_deeply();

// How many threads work that one thread does in `one_thread_us` is worth, `threads` by its size: one
// when the workers sleep so deeply that waking them costs more than the work.
int unless_asleep(int threads, double one_thread_us, const ParallelCrossover& c) {
  return threads > 1 && one_thread_us < c.wake_us && workers_asleep_deeply() ? 1 : threads;
}
}  // namespace

// Inside a piece nothing is split (and the crossover is not measured there: its job could not split).
int threads_for_product(double macs) {
  if (inside_split) return 1;
  const ParallelCrossover& c = parallel_crossover();
  return unless_asleep(threads_for(macs, c.min_macs), macs / c.macs_per_us, c);
}
int threads_for_elements(double elements) {
  if (inside_split) return 1;
  const ParallelCrossover& c = parallel_crossover();
  return unless_asleep(threads_for(elements, c.min_elements), elements / c.elements_per_us, c);
}

// ---- The pool ---------------------------------------------------------------------------------------
// A split job is cut into pieces (whole grains each) that the calling thread and the pool's workers take
// one at a time from a shared counter: a worker the scheduler has parked takes none, and the others take
// its share. The caller returns once every piece is done, not once every worker has arrived: a worker
// that wakes late finds nothing left and goes back to waiting. (An OpenMP region would end in a barrier
// that waits for every thread of its team, scheduled or not: with one of two cores busy, that barrier,
// hundreds of times a step, made two threads slower than one.)
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
// Not tuned yet: bench/busy_core.sh times the steps alone and beside a busy core, to tune it (and kSpin) by.
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
  // is done, with the first exception a piece threw; straggled() then says whether the caller waited for a
  // parked thread's piece (detail::BackOff).
  std::exception_ptr run(Index n, Index piece, std::uint64_t pieces, int helpers, void (*body)(void*, Index, Index),
                         void* context);
  // (A caller that took no piece has nothing to judge its wait by: it was itself parked, not kept waiting.)
  bool straggled() const {
    return longest_own_ > Clock::duration::zero() && detail::BackOff::straggled(waited_, longest_own_);
  }
  Clock::duration waited() const { return waited_; }  // ... and how long it waited for the others' pieces

  // Held by the caller: how many splits use (see detail::BackOff).
  detail::BackOff back_off;

  // Whether worker 0 (every split's first helper) has been asleep longer than kDeepSleepUs; any thread may ask.
  bool asleep_deeply() const {
    const Clock::rep since = asleep_since_.load(std::memory_order_relaxed);
    return since != 0 && Clock::now() - Clock::time_point(Clock::duration(since)) >
                             std::chrono::duration<double, std::micro>(kDeepSleepUs);
  }

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
  Clock::duration waited_{0};       // the last job's: the caller's wait for the others' pieces,
  Clock::duration longest_own_{0};  // ... and its own longest piece (0: it took none)

  std::uint64_t generation_ = 0;
  alignas(64) std::atomic<std::uint64_t> counter_{0};
  alignas(64) std::atomic<std::uint32_t> done_{0};   // pieces of the current job done
  alignas(64) std::atomic<std::uint32_t> wake_{0};   // bumped per job: sleeping workers wait on it
  std::atomic<bool> stop_{false};
  std::atomic<bool> busy_{false};
  std::atomic<Clock::rep> asleep_since_{0};  // when worker 0 went to sleep (0: it is awake)
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

// (An op run by another static's destructor after the pool's has none to wake.)
bool workers_asleep_deeply() { return !pool_gone.load(std::memory_order_acquire) && pool().asleep_deeply(); }

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
    if (index == 0) asleep_since_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    wake_.wait(seen, std::memory_order_acquire);
    if (index == 0) asleep_since_.store(0, std::memory_order_relaxed);
  }
}

std::exception_ptr Pool::run(Index n, Index piece, std::uint64_t pieces, int helpers,
                             void (*body)(void*, Index, Index), void* context) {
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
  if (helpers > 0) {  // (none: a back-off runs the pieces on this thread alone, and no worker need wake)
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();  // a system call only when a worker sleeps
    asleep_since_.store(0, std::memory_order_relaxed);  // woken, if not yet running: the next split need not wake it
  }

  const bool was_inside = inside_split;
  inside_split = true;
  longest_own_ = Clock::duration::zero();
  {
    const SingleThreaded one;  // Eigen's products in a piece run on this thread, as they did inside a region
    while (const std::uint64_t taken = take(-1)) {
      const auto start = Clock::now();
      run_piece(taken);
      longest_own_ = std::max<Clock::duration>(longest_own_, Clock::now() - start);
    }
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
  waited_ = Clock::now() - since;
  return std::exchange(error_, nullptr);
}

void split_job(Index n, Index grain, int most, void (*body)(void*, Index, Index), void* context, bool measuring) {
  grain = std::max<Index>(grain, 1);
  const Index grains = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<Index>({num_threads(), most, grains}));
  if (threads < 2 || inside_split || pool_gone.load(std::memory_order_acquire)
#ifdef _OPENMP
      || omp_in_parallel()
#endif
  ) {
    body(context, 0, n);
    return;
  }
  // Read before the pool is taken: the first call measures the crossover, which needs the pool.
  const bool back_off = !measuring && parallel_crossover().back_off;
  Pool& p = pool();
  while (!p.try_acquire()) {  // another thread's job holds the pool: this one runs here, with the same results
    if (!measuring) {
      body(context, 0, n);
      return;
    }
    std::this_thread::yield();
  }
  int wanted = 0, helpers = 0;
  try {
    p.resize(num_threads() - 1);
    wanted = std::min(threads - 1, p.workers());
    helpers = back_off ? p.back_off.helpers(wanted, Clock::now()) : wanted;
  } catch (...) {
    p.release();
    throw;
  }
  // The pieces are those of the split without a back-off, whoever runs them: a back-off changes which
  // thread runs a piece, never the pieces, so no op meets a size of scratch (a piece's rows) that the
  // steps before it did not, and a step still allocates nothing.
  const Index per_thread = static_cast<Index>(wanted + 1) * kPiecesPerThread;
  const Index per_piece = (grains + per_thread - 1) / per_thread;  // grains
  const Index pieces = (grains + per_piece - 1) / per_piece;
  std::exception_ptr error;
  try {
    // Backed off to no helper, the pool runs the pieces on this thread alone: not a region, no straggle.
    if (!measuring && helpers > 0) regions_started.fetch_add(1, std::memory_order_relaxed);
    error = p.run(n, per_piece * grain, static_cast<std::uint64_t>(pieces), helpers, body, context);
    if (!measuring && helpers > 0 && p.straggled()) {
      straggles.fetch_add(1, std::memory_order_relaxed);
      straggle_wait_ns.fetch_add(static_cast<std::uint64_t>(std::chrono::nanoseconds(p.waited()).count()),
                                 std::memory_order_relaxed);
      if (back_off) p.back_off.after_straggle(helpers, Clock::now());
    }
  } catch (...) {
    p.release();
    throw;
  }
  p.release();
  if (error) std::rethrow_exception(error);
}

}  // namespace

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

void detail::parallel_chunks(Index n, Index grain, int most, void (*body)(void*, Index, Index), void* context) {
  split_job(n, grain, most, body, context);
}

detail::BackOff detail::parallel_back_off() {
  Pool& p = pool();
  while (!p.try_acquire()) std::this_thread::yield();
  const BackOff copy = p.back_off;
  p.release();
  return copy;
}

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
