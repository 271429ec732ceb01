#include "tapegrad/core/cpu.hpp"

// Compiled for the x86-64 baseline whatever the library's level (CMakeLists.txt), so that the check
// below runs on any x86-64 CPU: it is the one piece of the library that may meet a CPU the rest cannot.
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifndef TAPEGRAD_CPU_LEVEL
#define TAPEGRAD_CPU_LEVEL ""
#endif

// Named by the library's link interface (-Wl,-u, CMakeLists.txt), so that a static link takes this file,
// and with it the check, into every program, though nothing calls it.
extern "C" const int tapegrad_cpu_check = 1;

namespace tapegrad {
namespace {

// The features of x86-64-v2, -v3 and -v4, each level's beyond the one below it, as __builtin_cpu_supports
// names them (the ones GCC 12 and clang 14 both know: what compilers emit for that level; LZCNT and MOVBE
// they do not name).
constexpr const char* kLevelFeatures[3][5] = {{"sse3", "ssse3", "sse4.1", "sse4.2", "popcnt"},
                                              {"avx", "avx2", "fma", "bmi", "bmi2"},
                                              {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
struct CpuFeature {
  const char* name;
  int supported;
};

bool cpu_has(const char* feature) {
  // Before other constructors have run, the CPU's description must be read first (GCC's manual).
  __builtin_cpu_init();
  // __builtin_cpu_supports takes a literal: each name it may be asked, written out.
  const CpuFeature features[] = {
      {"sse3", __builtin_cpu_supports("sse3")},         {"ssse3", __builtin_cpu_supports("ssse3")},
      {"sse4.1", __builtin_cpu_supports("sse4.1")},     {"sse4.2", __builtin_cpu_supports("sse4.2")},
      {"popcnt", __builtin_cpu_supports("popcnt")},     {"avx", __builtin_cpu_supports("avx")},
      {"avx2", __builtin_cpu_supports("avx2")},         {"fma", __builtin_cpu_supports("fma")},
      {"bmi", __builtin_cpu_supports("bmi")},           {"bmi2", __builtin_cpu_supports("bmi2")},
      {"avx512f", __builtin_cpu_supports("avx512f")},   {"avx512bw", __builtin_cpu_supports("avx512bw")},
      {"avx512cd", __builtin_cpu_supports("avx512cd")}, {"avx512dq", __builtin_cpu_supports("avx512dq")},
      {"avx512vl", __builtin_cpu_supports("avx512vl")}};
  for (const CpuFeature& f : features)
    if (std::strcmp(f.name, feature) == 0) return f.supported != 0;
  return true;
}
#else
bool cpu_has(const char*) { return true; }
#endif

// The missing features of `level`, written into out (joined by ", ", cut to fit). Plain C, no std::string:
// the check below calls it, and a template shared with the library's other files could be the linker's
// copy from one of them, compiled for the level being checked.
void write_missing(std::string_view level, bool (*has)(const char*), char* out, std::size_t size) {
  out[0] = '\0';
  const int depth = level == "x86-64-v2" ? 1 : level == "x86-64-v3" ? 2 : level == "x86-64-v4" ? 3 : 0;
  std::size_t used = 0;
  for (int l = 0; l < depth; ++l)
    for (const char* f : kLevelFeatures[l]) {
      if (has(f)) continue;
      const int n = std::snprintf(out + used, size - used, "%s%s", used == 0 ? "" : ", ", f);
      if (n < 0 || static_cast<std::size_t>(n) >= size - used) return;
      used += static_cast<std::size_t>(n);
    }
}

// Runs when the library is loaded, before its other static initialisers (priority 101, the first a
// program may use) and before main().
[[gnu::constructor(101)]] void check_cpu() {
  char missing[256];
  write_missing(TAPEGRAD_CPU_LEVEL, cpu_has, missing, sizeof missing);
  if (missing[0] == '\0') return;
  std::fprintf(stderr,
               "tapegrad: this build is for %s CPUs, and this CPU lacks %s; rebuild with -DTAPEGRAD_ARCH=x86-64 "
               "(any x86-64) or -DTAPEGRAD_NATIVE=ON (this CPU)\n",
               TAPEGRAD_CPU_LEVEL, missing);
  std::_Exit(4);
}

}  // namespace

std::string missing_cpu_features(std::string_view level, bool (*has)(const char* feature)) {
  char missing[256];
  write_missing(level, has, missing, sizeof missing);
  return missing;
}

std::string missing_cpu_features() { return missing_cpu_features(TAPEGRAD_CPU_LEVEL, cpu_has); }

}  // namespace tapegrad
