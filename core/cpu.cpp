#include "tapegrad/core/cpu.hpp"

// Compiled for the x86-64 baseline whatever the library's level (CMakeLists.txt), so that the check
// below runs on any x86-64 CPU: it is the one piece of the library that may meet a CPU the rest cannot.
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

#ifndef TAPEGRAD_CPU_LEVEL
#define TAPEGRAD_CPU_LEVEL ""
#endif

// Named by the library's link interface (-Wl,-u, CMakeLists.txt), so that a static link takes this file,
// and with it the check, into every program, though nothing calls it.
extern "C" const int tapegrad_cpu_check = 1;

namespace tapegrad {
namespace {

// Each level's features beyond the one below it, as __builtin_cpu_supports names them (the ones GCC 12
// and clang 14 both know: what compilers emit for that level; LZCNT and MOVBE they do not name).
constexpr std::array<const char*, 5> kV2 = {"sse3", "ssse3", "sse4.1", "sse4.2", "popcnt"};
constexpr std::array<const char*, 5> kV3 = {"avx", "avx2", "fma", "bmi", "bmi2"};
constexpr std::array<const char*, 5> kV4 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
bool cpu_has(const char* feature) {
  // Before other constructors have run, the CPU's description must be read first (GCC's manual).
  __builtin_cpu_init();
  // __builtin_cpu_supports takes a literal: one branch per name it may be asked.
  const std::string_view f = feature;
#define TAPEGRAD_FEATURE(name) \
  if (f == name) return __builtin_cpu_supports(name)
  TAPEGRAD_FEATURE("sse3");
  TAPEGRAD_FEATURE("ssse3");
  TAPEGRAD_FEATURE("sse4.1");
  TAPEGRAD_FEATURE("sse4.2");
  TAPEGRAD_FEATURE("popcnt");
  TAPEGRAD_FEATURE("avx");
  TAPEGRAD_FEATURE("avx2");
  TAPEGRAD_FEATURE("fma");
  TAPEGRAD_FEATURE("bmi");
  TAPEGRAD_FEATURE("bmi2");
  TAPEGRAD_FEATURE("avx512f");
  TAPEGRAD_FEATURE("avx512bw");
  TAPEGRAD_FEATURE("avx512cd");
  TAPEGRAD_FEATURE("avx512dq");
  TAPEGRAD_FEATURE("avx512vl");
#undef TAPEGRAD_FEATURE
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
  int depth = 0;
  if (level == "x86-64-v2") depth = 1;
  if (level == "x86-64-v3") depth = 2;
  if (level == "x86-64-v4") depth = 3;
  const std::array<const std::array<const char*, 5>*, 3> levels = {&kV2, &kV3, &kV4};
  std::size_t used = 0;
  for (int l = 0; l < depth; ++l)
    for (const char* f : *levels[static_cast<std::size_t>(l)]) {
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

std::string_view built_for_cpu() { return TAPEGRAD_CPU_LEVEL; }

std::string missing_cpu_features(std::string_view level, bool (*has)(const char* feature)) {
  char missing[256];
  write_missing(level, has, missing, sizeof missing);
  return missing;
}

std::string missing_cpu_features() { return missing_cpu_features(TAPEGRAD_CPU_LEVEL, cpu_has); }

}  // namespace tapegrad
