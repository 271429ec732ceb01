# Flags for tapegrad's own targets. All PRIVATE: nothing here leaks into a project that links
# tapegrad::tapegrad (no global compiler flags).

# clang runs its OpenMP optimisation pass over every file compiled with -fopenmp (every file that links
# tapegrad, through OpenMP::OpenMP_CXX), though the library has no OpenMP region of its own, and a host-only
# program gains nothing from it. With clang 14 that pass was a third of autograd/ops_elementwise.cpp's
# compile time under the sanitizers and a fifth of the demo's; -mllvm -openmp-opt-disable skips it. Used
# only where the compiler accepts the option.
set(TAPEGRAD_SKIP_OPENMP_OPT OFF)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND TAPEGRAD_OPENMP AND OpenMP_CXX_FOUND)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag("-fopenmp -mllvm -openmp-opt-disable" TAPEGRAD_HAVE_OPENMP_OPT_DISABLE)
  set(TAPEGRAD_SKIP_OPENMP_OPT ${TAPEGRAD_HAVE_OPENMP_OPT_DISABLE})
endif()

# A target's warnings, architecture and sanitizers. CLIENT: a test or program of the library's
# (tapegrad_client_flags passes it), which no fuzzer runs.
function(tapegrad_target_flags target)
  cmake_parse_arguments(PARSE_ARGV 1 arg CLIENT "" "")
  if(TAPEGRAD_SKIP_OPENMP_OPT)
    target_compile_options(${target} PRIVATE "SHELL:-mllvm -openmp-opt-disable")
  endif()
  if(TAPEGRAD_WARNINGS)
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
      -Wno-sign-conversion)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
      # GCC 12 reports false '(may be) used uninitialized' inside its own AVX-512 intrinsic headers
      # when Eigen's kernels are inlined (GCC bug 105593, fixed in 13); clang builds keep the warning.
      target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized -Wno-uninitialized)
    endif()
  endif()
  if(TAPEGRAD_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(TAPEGRAD_NATIVE)
    target_compile_options(${target} PRIVATE -march=native)
  elseif(TAPEGRAD_ARCH)
    target_compile_options(${target} PRIVATE -march=${TAPEGRAD_ARCH})
  endif()
  if(TAPEGRAD_FUZZ AND NOT arg_CLIENT)
    # Coverage for libFuzzer in the library, its support libraries (they share precompiled headers, so one set
    # of flags) and the fuzz targets, which hold what a fuzzer runs; not in the library's clients, which no
    # fuzzer runs. Only the fuzz executables link the fuzzer's main. Not in Eigen's functions
    # (tests/fuzz/coverage_ignorelist.txt): instrumented, its GEMM kernels were no longer inlined and the
    # sanitized programs ran far slower (docs/performance.md, "Build time").
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link
      -fsanitize-coverage-ignorelist=${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../tests/fuzz/coverage_ignorelist.txt)
  endif()
  if(TAPEGRAD_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-sanitize-recover=all
      -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# The own code of the library's clients, the programs of examples/ with their precompiled header and the test
# programs, at -Og in Release: what they run fast is the library's, which stays at -O3, as do the support
# libraries (the lesson, gpt's model, the command-line parse, the catalogue) and the benchmarks; at -O3 they
# were most of a fresh build, and -Og runs GCC's shortest optimising pipeline (docs/performance.md, "Build
# time"). A template that a client and the library both instantiate is linked once, from the client's object,
# so the library's hot templates are instantiated in the library alone (extern template, as
# train/optimizer.hpp's optimizers): what a program shares with it is cold (fmt, settings, the module walk, an
# error's message). A client that defines copies of library code it runs, or that compares a reference it
# computes with the library's results bit for bit, passes LIBRARY_BITS: GCC then contracts multiply-adds as at
# -O3 (-O1 with -fexpensive-optimizations; at -Og it contracts none itself). clang reads -Og as -O1.
# GCC uses a precompiled header safely only with the -O and -f options it was built with (its manual), so a
# header is reused only by targets of the same flags, and a -O3 target never reuses a client's.
# Under clang's sanitizers (CI's second pass) every client is at -O0: there its code is checked, not timed, and
# clang's optimiser and code generation were most of that build. The static library's objects then come first on
# the client's link line, so that a template both emit runs the library's optimised copy, not the client's -O0
# one (the linker keeps the first copy it meets: without this, the suite's products ran unoptimised Eigen
# code); a shared library cannot be put first. Not with GCC: at -O0 it contracts no multiply-add, and
# LIBRARY_BITS clients compare bits.
# docs/performance.md, "Build time".
function(tapegrad_client_flags target)
  cmake_parse_arguments(PARSE_ARGV 1 arg LIBRARY_BITS "" "")
  tapegrad_target_flags(${target} CLIENT)
  set(level -Og)
  if(arg_LIBRARY_BITS)
    set(level "-O1;$<$<CXX_COMPILER_ID:GNU>:-fexpensive-optimizations>")
  endif()
  target_compile_options(${target} PRIVATE "$<$<CONFIG:Release>:${level}>")
  if(TAPEGRAD_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND NOT BUILD_SHARED_LIBS)
    target_compile_options(${target} PRIVATE -O0)
    target_link_options(${target} PRIVATE "LINKER:--whole-archive" "$<TARGET_FILE:tapegrad>"
      "LINKER:--no-whole-archive")
  endif()
endfunction()

# Precompiled headers: Eigen, fmt and the standard library headers nearly every file includes, parsed
# once per target instead of once per file (seconds of every file's compile time; docs/internals.md,
# "Build time"). PRIVATE, so a project linking tapegrad::tapegrad is not affected; extra headers
# (doctest, CLI11) as further arguments. -DTAPEGRAD_PCH=OFF compiles every file from its own includes,
# which is how to check that a file includes what it uses.
function(tapegrad_precompile target)
  if(TAPEGRAD_PCH)
    target_precompile_headers(${target} PRIVATE <Eigen/Core> <fmt/format.h> <algorithm> <functional> <map> <memory>
      <string> <string_view> <vector> ${ARGN})
  endif()
endfunction()

# A target whose header set and flags are those of `from` (a support library beside another) reuses its
# precompiled header instead of building the same one again (seconds of g++ each: docs/internals.md).
function(tapegrad_precompile_reuse target from)
  if(TAPEGRAD_PCH)
    target_precompile_headers(${target} REUSE_FROM ${from})
  endif()
endfunction()

# A target of a few files (a support library, a program, the command-line battery) compiled as one unit,
# as the library is (TAPEGRAD_UNITY): its files parse the same headers and instantiate the same Eigen,
# fmt and tapegrad templates, once instead of once a file (docs/performance.md, "Build time"). GCC's
# -Wsubobject-linkage is off there for the reason the library's is (CMakeLists.txt). Off with TAPEGRAD_PCH=OFF,
# as the tests' units are, so that that build still checks that every file includes what it uses.
function(tapegrad_unity target)
  if(TAPEGRAD_UNITY AND TAPEGRAD_PCH)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
    target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-subobject-linkage>)
  endif()
endfunction()
