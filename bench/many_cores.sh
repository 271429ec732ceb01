#!/bin/sh
# The step benchmark on a machine with many cores, which may have no compiler and none of tapegrad's
# packages: build a portable bundle here, copy it there, run it there.
#
#   bench/many_cores.sh bundle DIR     # here: a portable step_bench (-DTAPEGRAD_NATIVE=OFF) and the shared
#                                      # libraries it needs (from ldd), torch_step.py, compare.py, this script
#                                      # and bf16_kernels (LD_LIBRARY_PATH=DIR/lib DIR/bf16_kernels there)
#   DIR/many_cores.sh run [THREADS...] # there: W1-W7 at 1, 2, 4, 8, 16 threads (default: up to the CPUs there;
#                                      # W7 from 4 threads), each beside torch_step.py on that machine's PyTorch
#                                      # (python3 with torch, whatever version: named in the output), one table
#
# The run takes a few minutes on 16 cores: each cell times for 2 s after warm-up steps (SECONDS_PER=1: 1 s, for a
# machine lent for minutes). The PyTorch side runs
# with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (as bench/compare.py) and torch.set_num_threads(T).
# BIND=1 DIR/many_cores.sh run binds both sides' threads to cores (OMP_PROC_BIND=close, OMP_PLACES=cores).
# TORCH=0: tapegrad's columns only (two builds compared on a machine lent for minutes).
set -eu
mode=${1:-}
case "$mode" in
bundle)
  dir=${2:?usage: many_cores.sh bundle DIR}
  cd "$(dirname "$0")/.."
  cmake -S . -B build-portable -DTAPEGRAD_NATIVE=OFF -DTAPEGRAD_BUILD_TESTS=OFF -DTAPEGRAD_BUILD_EXAMPLES=OFF -DTAPEGRAD_BUILD_BENCH=ON \
    -DTAPEGRAD_MPI=OFF > /dev/null
  cmake --build build-portable -j2 --target step_bench bf16_kernels
  mkdir -p "$dir/lib"
  cp build-portable/bench/step_bench build-portable/bench/bf16_kernels bench/torch_step.py bench/compare.py \
    bench/many_cores.sh "$dir/"
  # Every shared library step_bench loads but the C library's own (ld-linux, libc, libm: the machine's).
  ldd build-portable/bench/step_bench | awk '/=> \// { print $3 }' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|ld-linux*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
      *) cp -L "$lib" "$dir/lib/" ;;
    esac
  done
  echo "bundle in $dir ($(du -sh "$dir" | cut -f1)): copy it to the machine and run $dir/many_cores.sh run"
  ;;
run)
  here=$(cd "$(dirname "$0")" && pwd)
  export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cores=$(nproc)
  threads=${2:-}
  if [ -z "$threads" ]; then
    threads=""
    for t in 1 2 4 8 16 32 64; do [ "$t" -le "$cores" ] && threads="$threads $t"; done
  fi
  case "${TORCH:-1}" in 0 | 1) ;; *) printf "many_cores.sh: TORCH must be 0 or 1, got '%.40s'\n" "$TORCH" >&2; exit 2 ;; esac
  python=""
  if [ "${TORCH:-1}" = 1 ]; then  # TORCH=0: tapegrad's columns alone
    for p in python3 /usr/bin/python3; do
      if "$p" -c "import torch" > /dev/null 2>&1; then python=$p; break; fi
    done
  fi
  exec "${python:-python3}" - "$here" "$python" $threads <<'PY'
import json, os, subprocess, sys
here, python, threads = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3:]]
if os.environ.get("BIND", "0") not in ("0", "1"):
    print(f"many_cores.sh: BIND must be 0 or 1, got {os.environ['BIND'][:40]!r}", file=sys.stderr)
    sys.exit(2)
bench = os.path.join(here, "step_bench")
seconds = os.environ.get("SECONDS_PER", "2")
if not seconds.replace(".", "", 1).isdigit() or not 0 < float(seconds) <= 60:
    print(f"many_cores.sh: SECONDS_PER must be a number of seconds in (0, 60], got {seconds[:40]!r}", file=sys.stderr)
    sys.exit(2)
def lines(cmd, env):
    out = subprocess.run(cmd, env={**{k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}, **env},
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]
names = [w["workload"] for w in lines([bench, "--list-workloads"], {})]
if os.environ.get("WORKLOADS"):  # a subset, e.g. WORKLOADS=W1,W5 (a quick check of the bundle)
    names = [n for n in names if n in os.environ["WORKLOADS"].split(",")]
tg, pt, info = {}, {}, {}
# BIND=1: both sides' OpenMP threads bound to cores. Unbound, a small step that the kernel moves between CPUs
# loses its caches: on the 2-core EPYC, W1 took 0.037 or 0.051 ms at either thread count, and 0.037-0.039 ms
# bound (docs/performance.md); run it both ways to see what a count's figure owes to placement.
bind = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"} if os.environ.get("BIND") == "1" else {}
for t in threads:
    env = {"OMP_NUM_THREADS": str(t), "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **bind}
    for name in names:
        if name == "W7" and t < 4:
            continue
        print(f"{name} at {t} thread(s) ...", file=sys.stderr, flush=True)
        (r,) = [r for r in lines([bench, "--workloads", name, "--no-peak", "--seconds", seconds, "--max-steps", "200"], env)
                if r["kind"] == "step"]
        tg[name, t] = r["median_ms"]
        if python:
            (p,) = lines([python, os.path.join(here, "torch_step.py"), "--workloads", name, "--seconds", seconds,
                          "--tapegrad", bench, "--torch-threads", str(t)], env)
            pt[name, t] = p["median_ms"]
            info["torch"], info["build"], info["blas"] = p["torch"], p.get("torch_build", "?"), p.get("openblas_core", "?")
with open("/proc/cpuinfo") as f:
    model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
print(f"one training step, float32, median ms; {os.cpu_count()} CPUs: {model}; "
      f"{'threads bound (OMP_PROC_BIND=close, OMP_PLACES=cores), both sides' if bind else 'threads unbound'}")
print(f"tapegrad: portable step_bench (bench/many_cores.sh bundle); PyTorch: {info.get('build', 'not run (no torch, or TORCH=0)')}; "
      f"OpenBLAS: {info.get('blas', '?')}")
head = " | ".join(f"tg {t}T" for t in threads) + (" | " + " | ".join(f"pt {t}T" for t in threads) if python else "")
print(f"| wl | {head} |")
print("|---|" + "---|" * (len(threads) * (2 if python else 1)))
for name in names:
    cells = [f"{tg[name, t]:.3f}" if (name, t) in tg else "-" for t in threads]
    if python:
        cells += [f"{pt[name, t]:.3f}" if (name, t) in pt else "-" for t in threads]
    print(f"| {name} | " + " | ".join(cells) + " |")
PY
  ;;
*)
  echo "usage: many_cores.sh bundle DIR | many_cores.sh run [THREADS...]" >&2
  exit 2
  ;;
esac
