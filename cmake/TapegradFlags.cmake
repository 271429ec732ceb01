# Flags for tapegrad's own targets. All PRIVATE: nothing here leaks into a project that links
# tapegrad::tapegrad (no global compiler flags).
function(tapegrad_target_flags target)
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
  endif()
  if(TAPEGRAD_FUZZ)
    # Coverage for libFuzzer in every target; only the fuzz executables link the fuzzer's main.
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
  if(TAPEGRAD_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-sanitize-recover=all
      -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()
