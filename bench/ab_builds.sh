#!/bin/sh
# Two builds of tapegrad timed against each other in one run: each round runs step_bench's workloads and
# gpt_step at each thread count in both builds, one right after the other (BEFORE first in odd rounds,
# AFTER first in even ones), so the machine's changes of speed fall on both; the table gives each build's
# median over the rounds and the median of the rounds' ratios (after / before: below 1 is faster). What a
# change that must not cost speed is measured with.
#
#   bench/ab_builds.sh BEFORE AFTER       # build folders holding bench/step_bench and bench/gpt_step
#   ROUNDS=5 THREADS="1 2" WORKLOADS="W1 W2 W3 W4 W5 W6" SECONDS_PER=1 GPT_STEPS=100 bench/ab_builds.sh ...
#   GPT_STEPS=0: no gpt_step rows. DATA=DIR: the fortunes gpt_step reads (default Debian's).
#
# Each cell of a round is one process: step_bench's median step over SECONDS_PER seconds (--no-peak
# --no-shape-bound), gpt_step's median of 3 repeats of GPT_STEPS steps. Peak RSS is step_bench's own
# (peak_rss_mb), the largest over the rounds.
set -eu
refuse() { printf "ab_builds.sh: %s must be %s, got '%.40s'\n" "$1" "$2" "$3" >&2; exit 2; }
[ $# -eq 2 ] || { echo "usage: bench/ab_builds.sh BEFORE_BUILD AFTER_BUILD" >&2; exit 2; }
for v in ROUNDS; do
  eval "value=\${$v:-5}"
  case "$value" in '' | *[!0-9]* | 0*) refuse "$v" "a whole number from 1" "$value" ;; esac
done
case "${GPT_STEPS:-100}" in '' | *[!0-9]*) refuse GPT_STEPS "a whole number" "$GPT_STEPS" ;; esac
for t in ${THREADS:-1 2}; do case "$t" in *[!0-9]* | 0*) refuse THREADS "whole numbers from 1" "$THREADS" ;; esac; done
case "${SECONDS_PER:-1}" in *[!0-9.]* | *.*.* | .) refuse SECONDS_PER "a number of seconds above 0" "$SECONDS_PER" ;; esac
for b in "$1" "$2"; do
  for p in step_bench gpt_step; do
    [ -x "$b/bench/$p" ] || { echo "ab_builds.sh: $b/bench/$p is not a program (build it first)" >&2; exit 2; }
  done
done
before=$1 after=$2
rounds=${ROUNDS:-5} threads=${THREADS:-1 2} workloads=${WORKLOADS:-W1 W2 W3 W4 W5 W6}
seconds=${SECONDS_PER:-1} gpt_steps=${GPT_STEPS:-100} data=${DATA:-/usr/share/games/fortunes}
out=$(mktemp)
trap 'rm -f "$out"' EXIT INT TERM

# One cell: "<name> <threads> <build> <ms> <rss>" appended to $out.
cell() {
  name=$1 n=$2 which=$3 build=$4
  if [ "$name" = gpt ]; then
    line=$(OMP_NUM_THREADS=$n "$build/bench/gpt_step" --data "$data" --steps "$gpt_steps" --repeats 3 --warmup 10 2>/dev/null | tail -n 1)
  else
    line=$(OMP_NUM_THREADS=$n "$build/bench/step_bench" --workloads "$name" --seconds "$seconds" --no-peak --no-shape-bound 2>/dev/null | tail -n 1)
  fi
  ms=$(printf '%s\n' "$line" | sed -n 's/.*"\(median\|step\)_ms": \([0-9.e+-]*\).*/\2/p')
  rss=$(printf '%s\n' "$line" | sed -n 's/.*"peak_rss_mb": \([0-9.e+-]*\).*/\1/p')
  echo "$name $n $which ${ms:-nan} ${rss:--}" >> "$out"
}

names=$workloads
[ "$gpt_steps" -gt 0 ] && names="$names gpt"
r=0
while [ $r -lt "$rounds" ]; do
  r=$((r + 1))
  for name in $names; do
    for n in $threads; do
      # The builds' order alternates from round to round: the second process of a pair can be the slower
      # for being second (W6 at two threads, a build against itself in either order: 6-8%), so with an even
      # number of rounds neither build always pays it.
      if [ $((r % 2)) -eq 1 ]; then
        cell "$name" "$n" before "$before"
        cell "$name" "$n" after "$after"
      else
        cell "$name" "$n" after "$after"
        cell "$name" "$n" before "$before"
      fi
    done
  done
done

echo "before: $before  after: $after  ($rounds rounds; $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores)"
awk '
  { key = $1 " " $2; ms[key, $3, ++count[key, $3]] = $4; if ($5 != "-" && $5 + 0 > rss[key, $3]) rss[key, $3] = $5 + 0
    if (!(key in seen)) { seen[key] = 1; order[++keys] = key } }
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  END {
    printf "%-4s %7s %12s %12s %14s %14s %9s %9s\n", "work", "threads", "before ms", "after ms", "after/before", "ratio range", "rss MB b", "rss MB a"
    for (k = 1; k <= keys; k++) {
      key = order[k]; n = count[key, "before"]
      for (i = 1; i <= n; i++) { b[i] = ms[key, "before", i]; a[i] = ms[key, "after", i]; q[i] = a[i] / b[i] }
      lo = q[1]; hi = q[1]; for (i = 2; i <= n; i++) { if (q[i] < lo) lo = q[i]; if (q[i] > hi) hi = q[i] }
      split(key, part, " ")
      printf "%-4s %7s %12.4f %12.4f %14.3f %6.3f-%-7.3f %9s %9s\n", part[1], part[2], median(b, n), median(a, n), median(q, n), lo, hi,
             (rss[key, "before"] ? rss[key, "before"] : "-"), (rss[key, "after"] ? rss[key, "after"] : "-")
    }
  }' "$out"
