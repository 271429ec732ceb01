#!/bin/bash
# How long a contributor waits: the README's test command from a fresh clone of COMMIT (configure, build,
# the whole suite, each phase timed), then one op's change tested (touch autograd/ops_elementwise.cpp,
# rebuild, the suite again). One line of seconds per commit, with both totals; name two commits in turns
# (A B A B) to compare them on a machine whose speed moves. COMMIT is a committed state: the working tree's
# changes are not in the clone. The clone goes under ${TMPDIR:-/tmp} and is removed after, or on Ctrl-C; a
# phase that fails stops the script and keeps its clone and logs, named. Nothing is cached (CCACHE_DISABLE=1
# unless set: Debian's ccache can sit on PATH).
#
#   bench/readme_time.sh COMMIT [COMMIT...]     (about 8 minutes each on 2 cores)
set -u
[ $# -ge 1 ] || { echo "usage: bench/readme_time.sh COMMIT [COMMIT...]" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
for commit in "$@"; do  # every commit checked before the first 8 minutes are spent
  git -C "$repo" rev-parse -q --verify "$commit^{commit}" > /dev/null ||
    { printf "readme_time.sh: '%.40s' is not a commit of %s\n" "$commit" "$repo" >&2; exit 2; }
done
export CCACHE_DISABLE=${CCACHE_DISABLE-1}
dir=""
trap 'cd / && [ -n "$dir" ] && rm -rf "$dir"; exit 130' INT TERM
seconds() { awk -v s="$1" -v e="$2" 'BEGIN { printf "%.1f", e - s }'; }
phase() {  # phase NAME COMMAND...: runs it quietly into $dir/NAME.log, sets $NAME to its seconds
  local name=$1 start
  shift
  start=$(date +%s.%N)
  "$@" > "$dir/$name.log" 2>&1 || {
    echo "readme_time.sh: $commit: '$*' failed; its log: $dir/$name.log (rm -rf $dir when done)" >&2
    exit 1
  }
  printf -v "$name" "%s" "$(seconds "$start" "$(date +%s.%N)")"
}
for commit in "$@"; do
  # A short path: commits before 51dde0c fail tests where the checkout's path is longer than about 33 bytes
  # (messages cut a path there; docs/performance.md, "Build time").
  dir=$(mktemp -d "${TMPDIR:-/tmp}/rt.XXXXXX") && dir=$(cd "$dir" && pwd) || exit 1
  git clone -q "$repo" "$dir/s" && git -C "$dir/s" checkout -q "$commit" && cd "$dir/s" || exit 1
  phase configure sh -c '.ci/install-deps && cmake -S . -B build'
  phase build cmake --build build -j2
  phase suite ctest --test-dir build --output-on-failure -j2
  touch autograd/ops_elementwise.cpp
  phase rebuild cmake --build build -j2
  phase suite_again ctest --test-dir build --output-on-failure -j2
  echo "$(git rev-parse --short HEAD): configure $configure build $build suite $suite =" \
    "$(awk "BEGIN { print $configure + $build + $suite }") s; rebuild $rebuild suite $suite_again =" \
    "$(awk "BEGIN { print $rebuild + $suite_again }") s; $(grep -c 'warning:' "$dir/build.log") warnings"
  cd / && rm -rf "$dir"
  dir=""
done
