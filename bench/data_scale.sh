#!/bin/sh
# The char GPT (examples/gpt) as its data grows (issue 40, item 5): Debian's fortunes 1x, 10x and 100x,
# each copy one file of the fortunes concatenated N times, trained for STEPS steps (learnable attention
# only, a checkpoint halfway) under /usr/bin/time -v. Prints one table: data size, peak RSS, checkpoint
# size, ms per training step, wall time. Memory and checkpoints should not grow with the data; the table
# shows whether they do in the gpt binary it runs.
#
#   bench/data_scale.sh [OUT]          # OUT: default build/data_scale (in the source tree)
#   SCALES="1 10 100" STEPS=50 THREADS=1 TIMEOUT=1800 BUILD=build JOBS=2 bench/data_scale.sh
#   (BUILD is a folder of the source tree, as in the other scripts here)
#
# Builds BUILD/examples/gpt first (configuring BUILD if it has no CMakeCache.txt). ms per step is the
# program's own training time over its steps (its line "after N steps (S s, ...)": the training loop with
# its one curve point and the halfway checkpoint, without the final evaluation on every validation window,
# the sampling or the final save, which the wall time includes). 100x is 258 MB of text, inside gpt's
# 256 MiB limit; at 75c16d4 gpt took 11.3 GB and 74 s a step on 268 MB (issue 40): a run past TIMEOUT
# seconds is stopped and its row says so.
#
# Everything is written inside OUT, which the script owns: it makes OUT with a marker file and replaces an
# earlier OUT's contents only when that marker is there (anything else is refused). The copies of the
# data are made in OUT/data and removed after each run, and on exit or interruption; each run's own
# files (gpt's --out, the time -v log, gpt's output) stay in OUT/runs/<N>x.
set -eu
out=${1:-}
case "$out" in '' | /*) ;; *) out=$PWD/$out ;; esac  # as the caller named it, before the cd
cd "$(dirname "$0")/.."
out=${out:-build/data_scale}
build=${BUILD:-build}
scales=${SCALES:-1 10 100}
steps=${STEPS:-50}
threads=${THREADS:-1}
limit=${TIMEOUT:-1800}
fortunes=/usr/share/games/fortunes
marker=.data_scale.sh-owns-this-folder

# The folder first: nothing is built or run for a folder that is not the script's to write in.
if [ -L "$out" ]; then
  echo "data_scale.sh: $out is a symbolic link; give a folder of the script's own" >&2
  exit 2
elif [ -e "$out" ] && [ ! -f "$out/$marker" ] && [ -n "$(ls -A "$out" 2> /dev/null)" ]; then
  echo "data_scale.sh: $out holds files this script did not make (no $marker); give an empty or new folder" >&2
  exit 2
fi
[ -x /usr/bin/time ] || { echo "data_scale.sh: needs /usr/bin/time (Debian's package time)" >&2; exit 2; }
[ -d "$fortunes" ] || { echo "data_scale.sh: no $fortunes (Debian's package fortunes-min or fortunes)" >&2; exit 2; }
case "$steps" in '' | *[!0-9]* | 0 | 1) echo "data_scale.sh: STEPS must be a whole number of 2 or more, got '$steps'" >&2; exit 2 ;; esac

[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$build" -j "${JOBS:-2}" --target gpt > /dev/null
gpt=$build/examples/gpt

# Only what an earlier run of this script made goes: its data copies, runs and table.
mkdir -p "$out"
: > "$out/$marker"
rm -rf "$out/data" "$out/runs" "$out/table.md"
mkdir "$out/data" "$out/runs"
trap 'rm -rf "$out/data"' EXIT
trap 'rm -rf "$out/data"; exit 130' INT TERM

# The fortune files gpt reads from a folder (names without a '.', in byte order), each followed by a "%"
# line, so that one file's last fortune does not run into the next file's first.
files=$(cd "$fortunes" && LC_ALL=C ls | grep -v '\.')

table=$out/table.md
{
  echo "gpt, $steps steps, learnable attention only, $threads thread(s), $(git describe --always --dirty 2> /dev/null || echo '?'); $(uptime | sed 's/.*load/load/')"
  echo
  echo "| data | text MB | peak RSS MB | checkpoint KB | ms per step | wall s |"
  echo "|---|---|---|---|---|---|"
} > "$table"
for n in $scales; do
  data=$out/data/fortunes_${n}x
  i=0
  while [ "$i" -lt "$n" ]; do
    for f in $files; do
      cat "$fortunes/$f"
      echo "%"
    done
    i=$((i + 1))
  done > "$data"
  bytes=$(wc -c < "$data")
  run=$out/runs/${n}x
  mkdir "$run"
  echo "data_scale.sh: ${n}x, $bytes bytes ..." >&2
  rc=0
  /usr/bin/time -v -o "$run/time.txt" timeout "$limit" "$gpt" --data "$data" --out "$run/gpt" --attention learnable \
    --steps "$steps" --eval-every "$steps" --curve-windows 16 --checkpoint-every $((steps / 2)) --keep 1 \
    --threads "$threads" --length 20 > "$run/stdout.txt" 2> "$run/stderr.txt" || rc=$?
  rm -f "$data"
  rss_kb=$(sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$run/time.txt")
  wall=$(sed -n 's/^[[:space:]]*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$run/time.txt" |
    awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.1f", s }')
  # The halfway checkpoint (what --resume reads); gpt keeps it in its --out under checkpoints/.
  ckpt=$(find "$run/gpt" -path '*checkpoints*' -type f -name '*.tgck' 2> /dev/null | head -n 1)
  ckpt_kb=-
  [ -n "$ckpt" ] && ckpt_kb=$(( $(wc -c < "$ckpt") / 1024 ))
  ms=$(sed -n 's/.* after \([0-9][0-9]*\) steps (\([0-9.][0-9.]*\) s,.*/\1 \2/p' "$run/stdout.txt" |
    awk 'NR == 1 { printf "%.1f", $2 * 1000 / $1 }')
  if [ "$rc" = 124 ]; then
    ms="stopped after $limit s"
  elif [ "$rc" != 0 ]; then
    ms="failed (exit $rc: $run/stderr.txt)"
  fi
  echo "| ${n}x | $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }') | $(awk -v k="${rss_kb:-0}" 'BEGIN { printf "%.0f", k / 1024 }') | $ckpt_kb | ${ms:-?} | ${wall:-?} |" >> "$table"
done
cat "$table"
