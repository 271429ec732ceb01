#pragma once
// Threads. Built with OpenMP (the TAPEGRAD_OPENMP option, on when the compiler has it), tapegrad runs
// Eigen's larger matrix products on several threads; the count comes from OMP_NUM_THREADS, as
// PyTorch's does, or from set_num_threads(). Each output element is computed by one thread, so results
// do not depend on thread timing (they may differ in the last bits between thread counts, because
// Eigen blocks a product differently for a different count).

namespace tapegrad {

int num_threads();            // 1 without OpenMP
void set_num_threads(int n);  // ValueError unless n >= 1; no effect without OpenMP
bool have_openmp();

// Eigen splits a matrix product over every thread once it holds about 50,000 multiply-adds per thread,
// but on the development machine two threads only beat one from about 4 million multiply-adds
// (m * n * k; `build/bench/gemm_threads` measures it). Smaller products run on the calling thread.
inline constexpr double kMinParallelProduct = 4194304;  // 2^22

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
