#pragma once
// Independent jobs on a fixed set of worker threads: training runs that share nothing mutable (a sweep's
// seeds and learning rates, the demo's two models on each task), one per core. Each worker runs its jobs
// one after another, in the order they were submitted, with OpenMP regions (Eigen's products) on that
// worker alone, so N workers use N cores and a job computes exactly what it computes on the main thread:
// results do not depend on the worker count. A job's exception reaches whoever calls get() on its future.
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <type_traits>
#include <vector>

namespace tapegrad {

// The CPUs this process may run on (its affinity mask: `taskset -c 0` gives 1), at least 1.
int available_cores();

class JobPool {
 public:
  // ValueError unless workers >= 1; ResourceError (every worker started so far stopped and joined) when the
  // system refuses a thread.
  explicit JobPool(int workers);
  // Runs no job not yet started (their futures report std::future_error, broken_promise), waits for
  // the running ones.
  ~JobPool();
  JobPool(const JobPool&) = delete;
  JobPool& operator=(const JobPool&) = delete;

  int workers() const { return static_cast<int>(threads_.size()); }

  // Queues job(); the future holds its result or its exception.
  template <class F>
  auto submit(F job) -> std::future<std::invoke_result_t<F&>> {
    using R = std::invoke_result_t<F&>;
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(job));
    std::future<R> result = task->get_future();
    {
      std::lock_guard lock(mutex_);
      queue_.emplace_back([task] { (*task)(); });
    }
    ready_.notify_one();
    return result;
  }

 private:
  void work(std::stop_token stop);

  std::mutex mutex_;
  std::condition_variable_any ready_;  // wakes a waiting worker when a job comes or it is asked to stop
  std::deque<std::function<void()>> queue_;
  // Last, so it goes first, in the destructor and when the constructor throws alike: each jthread asks its
  // worker to stop, then joins it.
  std::vector<std::jthread> threads_;
};

}  // namespace tapegrad
