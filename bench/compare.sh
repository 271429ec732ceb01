#!/bin/sh
# The benchmark against PyTorch, in one command: installs what the reference side needs (Debian's
# python3-torch, and OpenBLAS with OpenMP threads, which PyTorch then uses instead of the slow
# reference BLAS), builds build/bench/step_bench and step_products, and runs bench/compare.py.
set -eu
cd "$(dirname "$0")/.."
.ci/install-deps python3-torch libopenblas0-openmp
cmake -S . -B build > /dev/null && cmake --build build -j2 --target step_bench step_products
exec /usr/bin/python3 bench/compare.py "$@"
