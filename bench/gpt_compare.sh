#!/bin/sh
# The character GPT's training step in tapegrad and in PyTorch, on the same machine, in one command
# (docs/gpt.md): installs what the PyTorch side needs (Debian's python3-torch, and OpenBLAS with OpenMP
# threads, which PyTorch then uses instead of the slow reference BLAS), builds build/bench/gpt_step, and
# prints one JSON line per run: tapegrad at 1 and 2 threads, then PyTorch in every arrangement of its own threads
# and its BLAS's, 1x1, 1x2, 2x1 and 2x2, as bench/compare.py does (one knob for both is not fair to it:
# two torch threads that each call a two-thread BLAS oversubscribe two cores). OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE, which some environments set, are removed from PyTorch's: they handicap OpenBLAS.
#
#   bench/gpt_compare.sh            # about 3 minutes on 2 cores; arguments go to both programs (--steps N)
set -eu
cd "$(dirname "$0")/.."
.ci/install-deps python3-torch libopenblas0-openmp
cmake -S . -B build -DTAPEGRAD_BUILD_BENCH=ON > /dev/null && cmake --build build -j2 --target gpt_step > /dev/null
for threads in 1 2; do build/bench/gpt_step --threads $threads "$@"; done
for torch_threads in 1 2; do
  for blas_threads in 1 2; do
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=$blas_threads \
      /usr/bin/python3 bench/gpt_step.py --threads $torch_threads "$@" | sed "s/^{/{\"blas_threads\": $blas_threads, /"
  done
done
