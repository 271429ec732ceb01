#!/bin/sh
# The char GPT (examples/gpt) as its data grows (issue 52): Debian's fortunes 1x, 100x, to 1 GB and to
# 10 GB, each one text file of the fortunes concatenated N times (each fortune file followed by a "%"
# line). For each size, each step its own process under /usr/bin/time -v:
#
#   prepare    gpt --prepare-only: the text streamed once into token files; MB/s and peak RSS
#   again      the same command: found prepared, its ids checked in one pass; seconds
#   train      STEPS steps of the default model (learnable attention only), a checkpoint halfway, the
#              final evaluation and 400 sampled characters: peak RSS, ms per step, checkpoint size
#   resume     from the halfway checkpoint to STEPS: its weights' CRC-32 against the straight run's
#   changed    a fortune appended to the text, the same resume: refused in one line (gpt prepares the
#              changed text, whose fingerprint differs)
#
#   bench/data_scale.sh [OUT]     # OUT: default build/data_scale (in the source tree)
#   SCALES="1x 100x 1GB 10GB" STEPS=200 THREADS=1 TIMEOUT=3600 DATA=/tmp/tapegrad_data_scale BUILD=build JOBS=2 bench/data_scale.sh
#
# Builds BUILD/examples/gpt first (configuring BUILD if it has no CMakeCache.txt). ms per step is the
# program's own training time over its steps (its line "after N steps (S s, ...)": the loop with its two
# curve points and the halfway checkpoint, not the final evaluation, the sampling or the final save, which
# the wall time includes). Prepare s and MB/s are gpt's own (its --prepare-only line: listing, reading,
# splitting and writing, not the process's start).
#
# The runs' files (gpt's --out, logs, the table) go to OUT, which the script owns: it makes OUT with a
# marker file and replaces an earlier OUT's contents only when that marker is there (anything else is
# refused). The text and its token files (up to twice the largest size, three times while the changed
# text is prepared) go to DATA, also marked as the script's, and are removed after each size and on exit
# or interruption; a size that would not fit on DATA's file system is refused before it is made.
set -eu
out=${1:-}
case "$out" in '' | /*) ;; *) out=$PWD/$out ;; esac  # as the caller named it, before the cd
cd "$(dirname "$0")/.."
out=${out:-build/data_scale}
data_dir=${DATA:-/tmp/tapegrad_data_scale}
build=${BUILD:-build}
scales=${SCALES:-1x 100x 1GB 10GB}
steps=${STEPS:-200}
threads=${THREADS:-1}
limit=${TIMEOUT:-3600}
fortunes=/usr/share/games/fortunes
marker=.data_scale.sh-owns-this-folder

# The folders first: nothing is built or run for a folder that is not the script's to write in.
for dir in "$out" "$data_dir"; do
  if [ -L "$dir" ]; then
    echo "data_scale.sh: $dir is a symbolic link; give a folder of the script's own" >&2
    exit 2
  elif [ -e "$dir" ] && [ ! -f "$dir/$marker" ] && [ -n "$(ls -A "$dir" 2> /dev/null)" ]; then
    echo "data_scale.sh: $dir holds files this script did not make (no $marker); give an empty or new folder" >&2
    exit 2
  fi
done
[ -x /usr/bin/time ] || { echo "data_scale.sh: needs /usr/bin/time (Debian's package time)" >&2; exit 2; }
[ -d "$fortunes" ] || { echo "data_scale.sh: no $fortunes (Debian's package fortunes-min or fortunes)" >&2; exit 2; }
case "$steps" in '' | *[!0-9]* | 0 | 1 | *[13579]) echo "data_scale.sh: STEPS must be an even number of 2 or more, got '$steps'" >&2; exit 2 ;; esac
case "$threads" in '' | *[!0-9]* | 0) echo "data_scale.sh: THREADS must be a whole number of 1 or more, got '$threads'" >&2; exit 2 ;; esac
for s in $scales; do
  case "$s" in *[0-9]x | *[0-9]GB) ;; *) echo "data_scale.sh: SCALES are copies (100x) or sizes (1GB), got '$s'" >&2; exit 2 ;; esac
done

[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$build" -j "${JOBS:-2}" --target gpt > /dev/null
gpt=$PWD/$build/examples/gpt

# Only what an earlier run of this script made goes.
mkdir -p "$out" "$data_dir"
: > "$out/$marker"
: > "$data_dir/$marker"
rm -rf "$out/runs" "$out/table.md" "$data_dir/text" "$data_dir/prepared"
mkdir "$out/runs"
trap 'rm -rf "$data_dir"' EXIT
trap 'rm -rf "$data_dir"; exit 130' INT TERM

# One copy of the fortunes: the files gpt reads from a folder (names without a '.', in byte order), each
# followed by a "%" line, so that one file's last fortune does not run into the next file's first.
one=$data_dir/one
for f in $(cd "$fortunes" && LC_ALL=C ls | grep -v '\.'); do
  cat "$fortunes/$f"
  echo "%"
done > "$one"
one_bytes=$(wc -c < "$one")

# peak_mb LOG, wall_s LOG: from a time -v log.
peak_mb() { sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$1" | awk '{ printf "%.0f", $1 / 1024 }'; }
wall_s() {
  sed -n 's/^[[:space:]]*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$1" |
    awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.2f", s }'
}
# run NAME COMMAND...: the command under time -v and the limit, its output in $run/NAME.*; its exit code in rc.
run() {
  name=$1
  shift
  rc=0
  /usr/bin/time -v -o "$run/$name.time" timeout "$limit" "$@" > "$run/$name.out" 2> "$run/$name.err" || rc=$?
}
crc_of() { sed -n 's/.*learnable .* weights crc32 \([0-9a-f]*\);.*/\1/p' "$1"; }

half=$((steps / 2))
table=$out/table.md
{
  echo "gpt, learnable attention only, $steps steps, $threads thread(s), $(git describe --always --dirty 2> /dev/null || echo '?');" \
    "$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1); $(uptime | sed 's/.*load/load/')"
  echo
  echo "| data | text MB | prepare s | prepare MB/s | prepare peak MB | found prepared s | train peak MB | ms per step | checkpoint bytes | resumed bits | changed data | wall s |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
} > "$table"
for s in $scales; do
  case "$s" in
    *x) copies=${s%x} ;;
    *GB) copies=$(awk -v g="${s%GB}" -v b="$one_bytes" 'BEGIN { printf "%d", (g * 1e9 + b - 1) / b }') ;;
  esac
  need_kb=$((copies * one_bytes / 1024 * 3 + 1024))
  free_kb=$(df -Pk "$data_dir" | awk 'NR == 2 { print $4 }')
  if [ "$need_kb" -gt "$free_kb" ]; then
    echo "| $s | - | needs $((need_kb / 1048576)) GB free on $data_dir, has $((free_kb / 1048576)) GB | | | | | | | | | |" >> "$table"
    continue
  fi
  text=$data_dir/text
  prepared=$data_dir/prepared
  i=0
  while [ "$i" -lt "$copies" ]; do
    cat "$one"
    i=$((i + 1))
  done > "$text"
  bytes=$(wc -c < "$text")
  run=$out/runs/$s
  mkdir "$run"
  echo "data_scale.sh: $s, $bytes bytes ..." >&2

  run prepare "$gpt" --prepare-only --data "$text" --prepared "$prepared"
  prep_rc=$rc
  # gpt's own line: "... from X MB of text in S s (R MB/s)"
  prep_s=$(sed -n 's/.* of text in \([0-9.]*\) s (\([0-9]*\) MB\/s)$/\1/p' "$run/prepare.out")
  prep_rate=$(sed -n 's/.* of text in \([0-9.]*\) s (\([0-9]*\) MB\/s)$/\2/p' "$run/prepare.out")
  run again "$gpt" --prepare-only --data "$text" --prepared "$prepared"
  again_s=$(sed -n 's/.* of text in \([0-9.]*\) s .*/\1/p' "$run/again.out")
  grep -q "found prepared" "$run/again.out" || again_s="prepared again!"

  run train "$gpt" --data "$text" --prepared "$prepared" --attention learnable --steps "$steps" \
    --checkpoint-every "$half" --keep 1 --threads "$threads" --out "$run/straight"
  train_rc=$rc
  ckpt=$run/straight/checkpoints/learnable/$(printf 'checkpoint-%08d.tgck' "$half")
  ckpt_bytes=-
  [ -f "$ckpt" ] && ckpt_bytes=$(wc -c < "$ckpt")
  ms=$(sed -n 's/.* after \([0-9][0-9]*\) steps (\([0-9.][0-9.]*\) s,.*/\1 \2/p' "$run/train.out" |
    awk 'NR == 1 { printf "%.1f", $2 * 1000 / $1 }')
  [ "$train_rc" = 0 ] || ms="failed (exit $train_rc: $run/train.err)"

  run resume "$gpt" --resume "$ckpt" --threads "$threads" --out "$run/resumed"
  if [ "$rc" = 0 ] && [ -n "$(crc_of "$run/train.out")" ] && [ "$(crc_of "$run/train.out")" = "$(crc_of "$run/resume.out")" ]; then
    resumed="same ($(crc_of "$run/resume.out"))"
  else
    resumed="DIFFER (exit $rc: $(crc_of "$run/train.out") vs $(crc_of "$run/resume.out"))"
  fi

  printf '%%\nA fortune that was not in the text the model was trained on.\n' >> "$text"
  run changed "$gpt" --resume "$ckpt" --threads "$threads" --out "$run/changed"
  if [ "$rc" = 2 ] && [ "$(wc -l < "$run/changed.err")" = 1 ] && grep -q "training data differs" "$run/changed.err"; then
    changed="refused"
  else
    changed="NOT REFUSED (exit $rc: $run/changed.err)"
  fi
  rm -rf "$text" "$prepared"

  [ "$prep_rc" = 0 ] || prep_rate="failed (exit $prep_rc)"
  echo "| $s | $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }') | $prep_s | $prep_rate | $(peak_mb "$run/prepare.time") | $again_s | $(peak_mb "$run/train.time") | $ms | $ckpt_bytes | $resumed | $changed | $(wall_s "$run/train.time") |" >> "$table"
done
cat "$table"
