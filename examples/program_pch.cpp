// Compiles nothing: the object libraries around it build the precompiled header every program reuses
// (examples/CMakeLists.txt, tapegrad_program_pch, at the programs' -Og) and the benchmarks' (bench/CMakeLists.txt,
// tapegrad_bench_pch, at the library's -O3).
