#!/bin/bash
# How long a contributor waits: the README's test command from a fresh clone of COMMIT (configure, build,
# the whole suite, each phase timed), then one op's change tested (touch autograd/ops_elementwise.cpp,
# rebuild, the suite again). One line of seconds per run; run it for two commits in turns to compare them.
# The clone goes under ${TMPDIR:-/tmp} and is removed after; the logs of a phase that failed are kept and
# named. Set CMAKE_CXX_COMPILER_LAUNCHER yourself if you want ccache; unset, nothing is cached.
#
#   bench/readme_time.sh COMMIT [COMMIT...]     (about 8 minutes each on 2 cores)
set -u
[ $# -ge 1 ] || { echo "usage: bench/readme_time.sh COMMIT [COMMIT...]" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
for commit in "$@"; do
  dir=$(mktemp -d "${TMPDIR:-/tmp}/tapegrad-readme-time.XXXXXX")
  git clone -q "$repo" "$dir/src" && git -C "$dir/src" checkout -q "$commit" || { rm -rf "$dir"; exit 1; }
  cd "$dir/src" || exit 1
  line="$(git rev-parse --short HEAD)"
  phase() {  # phase NAME COMMAND...: runs it quietly into $dir/NAME.log, appends "NAME seconds" to $line
    local name=$1 start end
    shift
    start=$(date +%s.%N)
    "$@" > "$dir/$name.log" 2>&1 || { echo "readme_time.sh: $commit: '$*' failed; its log: $dir/$name.log" >&2; exit 1; }
    end=$(date +%s.%N)
    line="$line $name $(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }')"
  }
  phase configure sh -c '.ci/install-deps && cmake -S . -B build'
  phase build cmake --build build -j2
  phase suite ctest --test-dir build --output-on-failure -j2
  touch autograd/ops_elementwise.cpp
  phase rebuild cmake --build build -j2
  phase suite_again ctest --test-dir build --output-on-failure -j2
  echo "$line warnings $(grep -c 'warning:' "$dir/build.log")"
  cd "$repo" && rm -rf "$dir"
done
