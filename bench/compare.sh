#!/bin/sh
# The benchmark against PyTorch, in one command: installs what the reference side needs (Debian's
# python3-torch, and OpenBLAS with OpenMP threads, which PyTorch then uses instead of the slow
# reference BLAS), builds step_bench and step_products for this machine's CPU (-DTAPEGRAD_NATIVE=ON, in
# build-native/: the library's default build is portable, docs/performance.md says what that costs), and runs
# bench/compare.py.
set -eu
cd "$(dirname "$0")/.."
.ci/install-deps python3-torch libopenblas0-openmp
cmake -S . -B build-native -DTAPEGRAD_NATIVE=ON -DTAPEGRAD_BUILD_TESTS=OFF -DTAPEGRAD_BUILD_EXAMPLES=OFF -DTAPEGRAD_BUILD_BENCH=ON > /dev/null
cmake --build build-native -j2 --target step_bench step_products
exec /usr/bin/python3 bench/compare.py --tapegrad build-native/bench/step_bench --products build-native/bench/step_products "$@"
