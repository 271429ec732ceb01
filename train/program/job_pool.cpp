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
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  } catch (const std::system_error& e) {
    // No destructor runs for a constructor that throws: the workers already started must be told to
    // stop here, or joining them (in threads_' destructor) would wait for ever.
    const std::size_t started = threads_.size();
    stop_workers();
    fail<ResourceError>("JobPool: the system refused worker thread {} of {} ({}); ask for fewer workers", started + 1,
                        workers, e.what());
  } catch (const std::bad_alloc&) {
    stop_workers();
    throw;
  }
}

// Also the destructor's: the queued jobs are dropped, the running ones end, the workers are joined.
void JobPool::stop_workers() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  dropped.clear();  // before the join below: the dropped jobs' futures report broken_promise at once
  ready_.notify_all();
  threads_.clear();  // joins, once the running jobs end
}

JobPool::~JobPool() { stop_workers(); }

void JobPool::push(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(job));
  }
  ready_.notify_one();
}

void JobPool::work() {
  const SingleThreaded one_thread;  // this worker's OpenMP regions stay on this worker
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();  // a packaged_task: an exception goes into its future
  }
}

}  // namespace tapegrad
