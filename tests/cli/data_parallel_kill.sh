#!/bin/sh
# A data-parallel job as users meet its failures (examples/train --data-parallel under mpirun):
#   - a second job on the --out folder a job holds is refused by its rank 0, and ends (no rank waits);
#   - rank 1 killed by SIGKILL mid-run: every process of the job is gone within 10 s, and the output names
#     rank 1 and the signal.
# Usage: data_parallel_kill.sh TRAIN WORK MPIRUN [MPIRUN ARGS...]   (ctest runs it with a timeout)
set -eu
train=$1
work=$2
shift 2
rm -rf "$work"
mkdir -p "$work"
fail() {
  echo "data_parallel_kill: $*" >&2
  for f in "$work"/*.log; do echo "--- $f" >&2; cat "$f" >&2; done
  exit 1
}
# Children of a process, from /proc (no procps on a minimal machine), with the shell's builtins alone: a
# sed for each of the machine's processes took seconds a scan.
children() {
  parent=$1
  for stat in /proc/[0-9]*/stat; do
    { read -r line < "$stat"; } 2>/dev/null || continue  # the process may have ended since the glob
    # shellcheck disable=SC2086
    set -- ${line##*) }  # after the name (which may hold spaces and parentheses): state, parent, ...
    if [ "${2:-}" = "$parent" ]; then
      stat=${stat%/stat}
      echo "${stat#/proc/}"
    fi
  done
  return 0
}
rank_of() { tr '\0' '\n' < "/proc/$1/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p'; }
alive() { kill -0 "$1" 2>/dev/null; }

long="--data-parallel --task cycle --steps 100000000 --eval-every 10000000 --out $work/run"
# shellcheck disable=SC2086
"$@" -np 2 "$train" $long > "$work/job.log" 2>&1 &
job=$!
rank0=""
rank1=""
i=0
while [ $i -lt 300 ]; do  # up to 30 s for both ranks to start training (the lock is taken, step 0 evaluated)
  for c in $(children $job); do
    case "$(rank_of "$c")" in
      0) rank0=$c ;;
      1) rank1=$c ;;
    esac
  done
  [ -n "$rank0" ] && [ -n "$rank1" ] && grep -q "step  *0/" "$work/job.log" && break
  alive $job || fail "the job ended before it was killed"
  sleep 0.1
  i=$((i + 1))
done
[ -n "$rank1" ] || fail "rank 1 of the job never started"

# A second job on the same folder: refused by its rank 0, the whole job ends with exit 2.
set +e
# shellcheck disable=SC2086
timeout 60 "$@" -np 2 "$train" $long > "$work/second.log" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || fail "a second job on the held folder: expected exit 2, got $rc"
grep -q "^train: rank 0: --out: another run (pid $rank0) is using the folder" "$work/second.log" ||
  fail "the second job's refusal does not name the folder's owner (pid $rank0)"

kill -9 "$rank1"
i=0
while alive $job || alive "$rank0"; do
  [ $i -lt 100 ] || fail "10 s after rank 1 was killed, mpirun (alive: $(alive $job && echo yes)) or rank 0 (alive: $(alive "$rank0" && echo yes)) still runs"
  sleep 0.1
  i=$((i + 1))
done
set +e
wait $job
rc=$?
set -e
[ $rc -ne 0 ] || fail "the job exited 0 after a rank was killed"
grep -q "process rank 1 .* exited on signal 9" "$work/job.log" || fail "the output does not name rank 1 and the signal"
echo "data_parallel_kill: killed rank 1 (pid $rank1); mpirun (exit $rc) and rank 0 were gone $((i / 10)).$((i % 10)) s later (polled every 0.1 s)"
