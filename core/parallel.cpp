#include "tapegrad/core/parallel.hpp"

#include "tapegrad/core/error.hpp"

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
