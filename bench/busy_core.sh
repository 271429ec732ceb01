#!/bin/sh
# Steps on a machine that is not ours alone: the char GPT's step (bench/gpt_step) and step_bench's W3 and
# W5, at 1 and 2 threads (1 .. nproc on a bigger machine), alone and with BUSY cores (default 1) kept busy
# by spinning processes of this script's own, beside the same steps in PyTorch (bench/gpt_step.py,
# bench/torch_step.py, the first of python3 and /usr/bin/python3 that has torch; skipped with a note without
# it). Prints one table:
# median ms per step and each count's time over the 1-thread time, alone and busy. Issue 41: a parked
# thread should cost its share of a step, not the whole step.
#
#   bench/busy_core.sh [BUILD ...]      # each BUILD a build folder with bench/gpt_step and bench/step_bench
#                                       # (default: build); several compare builds in the same run
#   BUSY=1 THREADS="1 2" STEPS=40 REPEATS=3 SECONDS_PER=1.5 TIMEOUT=120 bench/busy_core.sh build ../base/build
#   WORKLOADS="W3 W5" (step_bench's workloads beside gpt_step); ROUNDS=1 (rounds of every cell; with more,
#   each cell is the median over the rounds and each ratio "median (lowest-highest)")
#   TORCH=0 (no PyTorch columns); TORCH_WORKLOADS="gpt W3 W5" TORCH_STEPS=5 (PyTorch's side, see below)
#   DATA=DIR: the fortunes both gpt steps read (default: Debian's /usr/share/games/fortunes; a machine
#   without fortunes-min gets a copy of that folder)
#
# Each cell is one run of the program (gpt_step: the median of REPEATS repeats of STEPS steps; step_bench and
# torch_step.py: the median step over SECONDS_PER seconds, at least 10 steps); the runs alone and busy
# alternate, so a change in the machine's other load falls on both. tapegrad's counts above 1 run with
# --against-threads 1: the same process times its steps at that count and at 1 thread in turns, and its
# ratio is taken from that run (its 1-thread time fills the 1T cell when the count is 2), since this
# shared host's speed can change by a third between two runs a minute apart (docs/performance.md,
# "Threads"); PyTorch's ratios are of separate runs. A run longer than TIMEOUT seconds is
# stopped and its cell says so. PyTorch from Debian without an optimised BLAS takes seconds a step here
# (gpt.py 1.4 s, W5 10 s at one thread on the 2-core EPYC), so by default its side runs gpt (TORCH_STEPS
# steps, one repeat) and W3 only. The spinners are `sh` busy loops, each bounded by `timeout` and killed
# by pid when the script ends, fails or is interrupted.
set -eu
# Settings from the environment: a malformed one is refused in one line, before anything runs.
refuse() { printf "busy_core.sh: %s must be %s, got '%.40s'\n" "$1" "$2" "$3" >&2; exit 2; }
for v in BUSY STEPS REPEATS TIMEOUT TORCH_STEPS ROUNDS; do
  eval "value=\${$v:-1}"
  case "$value" in '' | *[!0-9]* | 0*) refuse "$v" "a whole number from 1" "$value" ;; esac
done
for t in ${THREADS:-1}; do case "$t" in *[!0-9]* | 0*) refuse THREADS "whole numbers from 1" "$THREADS" ;; esac; done
for w in ${WORKLOADS:-W3}; do case "$w" in W[1-7]) ;; *) refuse WORKLOADS "step_bench's workloads, W1 to W7" "$WORKLOADS" ;; esac; done
case "${TORCH:-1}" in 0 | 1) ;; *) refuse TORCH "0 or 1" "$TORCH" ;; esac
case "${SECONDS_PER:-1}" in *[!0-9.]* | *.*.* | .) refuse SECONDS_PER "a number of seconds above 0" "$SECONDS_PER" ;; esac
awk -v s="${SECONDS_PER:-1}" 'BEGIN { exit !(s + 0 > 0) }' || refuse SECONDS_PER "a number of seconds above 0" "$SECONDS_PER"
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- build
for b in "$@"; do
  for p in gpt_step step_bench; do
    [ -x "$b/bench/$p" ] || { echo "busy_core.sh: no $b/bench/$p (cmake --build $b --target gpt_step step_bench)" >&2; exit 2; }
  done
done
cores=$(nproc)
busy=${BUSY:-1}
if [ -z "${THREADS:-}" ]; then
  THREADS=""
  t=1
  while [ "$t" -le "$cores" ]; do THREADS="$THREADS $t"; t=$((t * 2)); done
  case " $THREADS " in *" $cores "*) ;; *) THREADS="$THREADS $cores" ;; esac
fi
# PyTorch's side: the first Python that imports torch (a GPU host's python3 is its own PyTorch's; here
# python3 lacks it and /usr/bin/python3 is Debian's). The table is written by whichever Python there is.
python=""
if [ "${TORCH:-1}" = 1 ]; then
  for p in python3 /usr/bin/python3; do
    if "$p" -c "import torch" > /dev/null 2>&1; then python=$p; break; fi
  done
fi
py=${python:-python3}
data=${DATA:-/usr/share/games/fortunes}

spinners=""
stop_spinners() {
  for pid in $spinners; do kill "$pid" 2> /dev/null || true; done
  for pid in $spinners; do wait "$pid" 2> /dev/null || true; done
  spinners=""
}
trap 'stop_spinners' EXIT
trap 'stop_spinners; exit 130' INT TERM
start_spinners() {  # $1: seconds at most
  i=0
  while [ "$i" -lt "$busy" ]; do
    timeout "$1" sh -c 'while :; do :; done' &
    spinners="$spinners $!"
    i=$((i + 1))
  done
  sleep 0.2  # the spinners are running before the timing starts
}

results=$(mktemp)
trap 'stop_spinners; rm -f "$results"' EXIT
steps=${STEPS:-40}
repeats=${REPEATS:-3}
seconds=${SECONDS_PER:-1.5}
limit=${TIMEOUT:-120}
torch_steps=${TORCH_STEPS:-5}
torch_workloads=${TORCH_WORKLOADS:-gpt W3}
workloads=${WORKLOADS:-W3 W5}
rounds=${ROUNDS:-1}
round=1
# One measurement: $1 label, $2 program, $3 workload, $4 threads, $5 alone|busy, then the command; appends
# "round label program workload threads mode ms" to the results, and, for a run --against-threads 1, the
# same for 1 thread and "round label program workload threads mode x RATIO".
measure() {
  label=$1 program=$2 workload=$3 threads=$4 mode=$5
  shift 5
  [ "$mode" = busy ] && start_spinners $((limit + 10))
  rc=0
  out=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS=1 \
    timeout "$limit" "$@") || rc=$?
  [ "$mode" = busy ] && stop_spinners
  if [ "$rc" = 124 ]; then
    echo "$round $label $program $workload $threads $mode timeout" >> "$results"
    echo "  $label $program $workload ${threads}T $mode: stopped after $limit s" >&2
    return 0
  elif [ "$rc" != 0 ]; then
    echo "busy_core.sh: failed ($rc): $*" >&2
    exit 1
  fi
  printf '%s\n' "$out" | "$py" -c '
import json, sys
head = " ".join(sys.argv[1:])
round_, label, program, workload, threads, mode = sys.argv[1:]
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line)
        if r.get("kind", "step") == "step":
            print(head, r.get("step_ms", r.get("median_ms")))
            if "x_against" in r:
                print(round_, label, program, workload, 1, mode, r.get("against_step_ms", r.get("against_ms")))
                print(head, "x", r["x_against"])
            break' "$round" "$label" "$program" "$workload" "$threads" "$mode" | tee -a "$results" | sed 's/^/  /' >&2
}

echo "busy_core.sh: $cores CPUs, $busy kept busy; threads: $THREADS; load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
while [ "$round" -le "$rounds" ]; do
  for threads in $THREADS; do
    for mode in alone busy; do
      for b in "$@"; do
        # 1 thread: timed in turns with 2 threads by the 2-thread run, unless 2 is not among the counts
        if [ "$threads" = 1 ]; then
          case " $THREADS " in *" 2 "*) continue ;; esac
          against=""
        else
          against="--against-threads 1"
        fi
        # shellcheck disable=SC2086 # $against: no option or two words
        measure "$b" tapegrad gpt "$threads" "$mode" "$b/bench/gpt_step" --data "$data" --threads "$threads" --steps "$steps" \
          --repeats "$repeats" --warmup 10 $against
        for w in $workloads; do
          # shellcheck disable=SC2086
          measure "$b" tapegrad "$w" "$threads" "$mode" "$b/bench/step_bench" --workloads "$w" --no-peak --no-shape-bound \
            --seconds "$seconds" $against
        done
      done
      if [ -n "$python" ]; then
        for w in $torch_workloads; do
          if [ "$w" = gpt ]; then
            measure pytorch pytorch gpt "$threads" "$mode" "$python" bench/gpt_step.py --data "$data" --threads "$threads" \
              --steps "$torch_steps" --repeats 1 --warmup 2
          else
            measure pytorch pytorch "$w" "$threads" "$mode" "$python" bench/torch_step.py --workloads "$w" \
              --seconds "$seconds" --tapegrad "$1/bench/step_bench" --torch-threads "$threads"
          fi
        done
      fi
    done
  done
  round=$((round + 1))
done

"$py" - "$results" "$busy" "$cores" "$THREADS" "$python" "$rounds" <<'PY'
import sys
path, busy, cores, threads, python = sys.argv[1], sys.argv[2], sys.argv[3], [int(t) for t in sys.argv[4].split()], sys.argv[5]
rounds = int(sys.argv[6])
from statistics import median
ms = {}  # (label, workload, threads, mode) -> each round's ms (None: stopped)
x = {}  # ... each round's ratio timed in turns in one run (--against-threads 1)
rows = []
for line in open(path):
    _round, label, program, workload, t, mode, *value = line.split()
    if value[0] == "x":
        x.setdefault((label, workload, int(t), mode), []).append(float(value[1]))
        continue
    ms.setdefault((label, workload, int(t), mode), []).append(None if value[0] == "timeout" else float(value[0]))
    if (label, workload) not in rows:
        rows.append((label, workload))
# A cell: the median over the rounds (stopped if any round was).
ms = {k: None if None in v else median(v) for k, v in ms.items()}
def ratio(values):
    return f"{median(values):.3f}" + (f" ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else "")
with open("/proc/cpuinfo") as f:
    model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
with open("/proc/loadavg") as f:
    load = " ".join(f.read().split()[:3])
print(f"ms per step (median{f' over {rounds} rounds' if rounds > 1 else ''}); {cores} CPUs: {model}; busy: {busy} core(s) spinning; load average after: {load}")
print(f"stopped: a run that took longer than TIMEOUT; ratios: each count's time over the 1-thread time, same mode "
      f"(tapegrad's from one run that timed both in turns; PyTorch's from two runs)")
if not python:
    print("PyTorch columns skipped: neither python3 nor /usr/bin/python3 has torch (or TORCH=0)")
else:
    import torch
    print(f"PyTorch {torch.__version__} ({python}), CPU, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset")
cols = [(mode, t) for mode in ("alone", "busy") for t in threads]
head = " | ".join(f"{m} {t}T" for m, t in cols)
ratios = [(mode, t) for mode in ("alone", "busy") for t in threads if t > 1]
head += "".join(f" | {m} {t}T/1T" for m, t in ratios)
print(f"| build | step | {head} |")
print("|---|---|" + "---|" * (len(cols) + len(ratios)))
for label, workload in rows:
    cells = [("-" if (label, workload, t, m) not in ms else "stopped" if ms[label, workload, t, m] is None
              else f"{ms[label, workload, t, m]:.2f}") for m, t in cols]
    for m, t in ratios:
        a, b = ms.get((label, workload, t, m)), ms.get((label, workload, 1, m))
        turns = x.get((label, workload, t, m))
        cells.append(ratio(turns) if turns else f"{a / b:.2f}" if a and b else "-")
    print(f"| {label} | {workload} | " + " | ".join(cells) + " |")
PY
