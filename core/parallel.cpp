#include "tapegrad/core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <vector>

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

// Median of `samples` timings of f(), in microseconds.
template <class F>
double median_us(int samples, F f) {
  std::vector<double> t;
  for (int i = 0; i < samples; ++i) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::nth_element(t.begin(), t.begin() + samples / 2, t.end());
  return t[static_cast<std::size_t>(samples / 2)];
}

double from_environment(const char* name, double measured) {
  const char* v = std::getenv(name);
  if (!v || !*v) return measured;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !(x >= 0)) fail<ValueError>("{}: expected a number >= 0, got '{}'", name, escaped(std::string_view(v)));
  return x;
}

ParallelCrossover measure_crossover() {
  ParallelCrossover c;
  volatile float sink = 0;
#ifdef _OPENMP
  const int threads = omp_get_max_threads();
  if (threads > 1) {
    auto region = [&] {
#pragma omp parallel num_threads(threads)
      {
        if (omp_get_thread_num() == 0) sink = sink + 1;
      }
    };
    for (int i = 0; i < 20; ++i) region();  // the team exists and is warm
    c.region_us = median_us(101, region);
  }
#endif
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
  c.min_macs = from_environment("TAPEGRAD_PARALLEL_MIN_MACS", 4 * c.region_us * c.macs_per_us);
  c.min_elements = from_environment("TAPEGRAD_PARALLEL_MIN_ELEMENTS", 4 * c.region_us * c.elements_per_us);
  return c;
}

}  // namespace

namespace {
std::once_flag measured;
ParallelCrossover crossover;
}  // namespace

const ParallelCrossover& parallel_crossover() {
  std::call_once(measured, [] { crossover = measure_crossover(); });
  return crossover;
}

void set_parallel_crossover(const ParallelCrossover& c) {
  if (!(c.min_macs >= 0) || !(c.min_elements >= 0))
    fail<ValueError>("set_parallel_crossover: the minimums must be >= 0, got {} multiply-adds and {} elements", c.min_macs,
                     c.min_elements);
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
}  // namespace

std::uint64_t parallel_regions_started() { return regions_started.load(std::memory_order_relaxed); }

int threads_for_product(double macs) { return threads_for(macs, parallel_crossover().min_macs); }
int threads_for_elements(double elements) { return threads_for(elements, parallel_crossover().min_elements); }

void detail::parallel_chunks(Index n, Index grain, [[maybe_unused]] int most, void (*body)(void*, Index, Index),
                             void* context) {
#ifdef _OPENMP
  if (!omp_in_parallel()) {
    grain = std::max<Index>(grain, 1);
    const Index grains = (n + grain - 1) / grain;
    const int threads = static_cast<int>(std::min<Index>({omp_get_max_threads(), most, grains}));
    if (threads > 1) {
      regions_started.fetch_add(1, std::memory_order_relaxed);
      // An exception cannot cross the end of an OpenMP region (the runtime calls std::terminate), so each
      // thread catches its own; the first one caught is kept, the other threads finish their chunks, and
      // it is rethrown here, on the calling thread, as a body run without threads would have thrown it.
      std::exception_ptr first_error;
      std::atomic<bool> failed{false};
#pragma omp parallel num_threads(threads)
      {
        const Index t = omp_get_thread_num(), p = omp_get_num_threads();
        const Index begin = std::min(n, grains * t / p * grain), end = std::min(n, grains * (t + 1) / p * grain);
        if (begin < end) {
          try {
            body(context, begin, end);
          } catch (...) {
            if (!failed.exchange(true)) first_error = std::current_exception();
          }
        }
      }
      if (first_error) std::rethrow_exception(first_error);
      return;
    }
  }
#endif
  body(context, 0, n);
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
