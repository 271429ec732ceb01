#!/bin/bash
# How long tapegrad takes to build: a fresh build of the main job (the library, the lesson and the demo)
# and of everything, then a rebuild after touching one op's source, each with precompiled headers off
# and on (TAPEGRAD_PCH). Build folders go under ${TMPDIR:-/tmp} and are removed after; the source tree
# is only touched (its one file's time stamp). About 12 minutes on 2 cores.
#
#   bench/build_time.sh [JOBS]     (default 2)
set -eu
cd "$(dirname "$0")/.."
jobs=${1:-2}
case "$jobs" in
  '' | *[!0-9]* | 0) echo "build_time.sh: JOBS must be a positive number of parallel compile jobs, got '$jobs'" >&2; exit 2 ;;
esac
seconds() {  # runs "$@" quietly, prints its wall time
  local start end
  start=$(date +%s.%N)
  "$@" > /dev/null
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f s", e - s }'
}
for pch in OFF ON; do
  for what in main all; do
    dir=$(mktemp -d "${TMPDIR:-/tmp}/tapegrad-build-time.XXXXXX")
    target=()
    [ "$what" = main ] && target=(--target param_free_vs_learned)
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_PCH=$pch > /dev/null
    fresh=$(seconds cmake --build "$dir" -j"$jobs" "${target[@]}")
    touch autograd/ops_rowwise.cpp
    rebuild=$(seconds cmake --build "$dir" -j"$jobs" "${target[@]}")
    echo "TAPEGRAD_PCH=$pch, $what: fresh build $fresh, rebuild after touching autograd/ops_rowwise.cpp $rebuild"
    rm -rf "$dir"
  done
done
