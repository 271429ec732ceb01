// The process's peak resident memory, for the benchmarks that report it beside their times.
#pragma once

#include <sys/resource.h>

namespace tapegrad::bench {

// The high-water mark of this process's resident memory in MB (getrusage's ru_maxrss, KB on Linux; the
// kernel's VmHWM). It never goes down: in a process that runs several workloads it is the largest so far.
inline double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

}  // namespace tapegrad::bench
