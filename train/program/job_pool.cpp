#include "tapegrad/train/program/job_pool.hpp"

#include <sched.h>

#include <algorithm>
#include <system_error>

#include "tapegrad/core/error.hpp"
#include "tapegrad/core/parallel.hpp"

namespace tapegrad {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

JobPool::JobPool(int workers) {
  if (workers < 1) fail<ValueError>("JobPool: needs at least 1 worker, got {}", workers);
  try {
    threads_.reserve(static_cast<std::size_t>(workers));
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this](std::stop_token stop) { work(stop); });
  } catch (const std::system_error& e) {
    // The workers already started stop and are joined as threads_ goes, as in the destructor.
    fail<ResourceError>("JobPool: the system refused worker thread {} of {} ({}); ask for fewer workers",
                        threads_.size() + 1, workers, e.what());
  }
}

// The queued jobs are dropped here, so their futures report broken_promise at once; then threads_ goes
// (each worker asked to stop, and joined once its running job ends).
JobPool::~JobPool() {
  std::deque<std::function<void()>> dropped;
  std::lock_guard lock(mutex_);
  dropped.swap(queue_);
}

void JobPool::work(std::stop_token stop) {
  const SingleThreaded one_thread;  // this worker's OpenMP regions stay on this worker
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      if (!ready_.wait(lock, stop, [&] { return !queue_.empty(); })) return;  // asked to stop
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();  // a packaged_task: an exception goes into its future
  }
}

}  // namespace tapegrad
