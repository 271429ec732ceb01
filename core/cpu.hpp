#pragma once
// The CPU a build is for. A build without TAPEGRAD_NATIVE is compiled for one x86-64 level
// (TAPEGRAD_ARCH, x86-64-v3 by default: AVX2 and FMA, no AVX-512), and its instructions would stop a CPU
// without them with SIGILL somewhere in the first product. So the library checks the level's features
// when it is loaded, before any of its code runs, and a CPU that lacks one ends the process with one line
// naming what is missing and the build option that fixes it (exit status 4: the system cannot run it).

#include <string>
#include <string_view>

namespace tapegrad {

// The features of `level` (x86-64-v2, -v3 or -v4; any other level has none to check) that `has` says the
// CPU lacks, as the compiler's feature names joined by ", " ("" when none is missing).
std::string missing_cpu_features(std::string_view level, bool (*has)(const char* feature));
// The same for this CPU and this build.
std::string missing_cpu_features();

}  // namespace tapegrad
