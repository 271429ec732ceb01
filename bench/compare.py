#!/usr/bin/python3
"""Times one training step of the benchmark model in tapegrad (build/bench/step_bench) and in PyTorch
(bench/torch_step.py), one after the other in this one invocation, at each thread count, and prints
the median ms per step of each side, their ratio against the targets, and achieved GFLOP/s against
the step's matmul FLOP count and this machine's measured Eigen GEMM peak. The workloads and the FLOP
count are step_bench's (its --list-workloads, and the GFLOP/s of its timing, which the PyTorch figure is
scaled from: the same FLOPs in PyTorch's time); bench/torch_step.py reads the workloads here, through
workloads(). Both sides get the same
thread count through OMP_NUM_THREADS and OPENBLAS_NUM_THREADS (PyTorch also through
torch.set_num_threads). bench/compare.sh installs what this needs, builds, and runs it.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STEP_BENCH = os.path.join(HERE, "..", "build", "bench", "step_bench")
TARGETS = {"W1": 0.10, "W2": 0.50, "W3": 0.80, "W4": 0.80}  # tapegrad / PyTorch at 1 thread


def run(command, threads=None):
    """The JSON lines `command` prints, run with `threads` threads (or the inherited environment)."""
    env = dict(os.environ)
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def workloads(step_bench=STEP_BENCH):
    """The benchmark workloads, name -> (B, T, d, H, V) in step_bench's order, from step_bench's table."""
    return {r["workload"]: (r["B"], r["T"], r["d"], r["H"], r["V"]) for r in run([step_bench, "--list-workloads"])}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tapegrad", default=STEP_BENCH)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--workloads", default=None, help="comma-separated names (default: all of step_bench's)")
    p.add_argument("--seconds", default="3")
    args = p.parse_args()
    if args.workloads is None:
        args.workloads = ",".join(workloads(args.tapegrad))
    thread_counts = [int(t) for t in args.threads.split(",")]
    results = {}  # (side, threads, workload) -> ms, or allocations or GFLOP/s
    peaks, blas, torch_version, small = {}, "?", "?", "?"
    for threads in thread_counts:
        print(f"running {args.workloads} at {threads} thread(s): tapegrad, then PyTorch ...", file=sys.stderr, flush=True)
        for r in run([args.tapegrad, "--workloads", args.workloads, "--seconds", args.seconds], threads):
            if r["kind"] == "peak":
                peaks[threads] = r["gemm_gflops"]
                small = r["small_products"]
            else:
                results[("tapegrad", threads, r["workload"])] = r["median_ms"]
                results[("allocations", threads, r["workload"])] = r["allocations_per_step"]
                results[("gflops", threads, r["workload"])] = r["gflops"]
        for r in run([sys.executable, os.path.join(HERE, "torch_step.py"), "--workloads", args.workloads,
                      "--seconds", args.seconds, "--tapegrad", args.tapegrad], threads):
            results[("torch", threads, r["workload"])] = r["median_ms"]
            blas, torch_version = r["blas"], r["torch"]

    print(f"one training step (zero grad, forward, cross-entropy, backward, SGD), float32, median ms per step")
    print(f"PyTorch {torch_version} with BLAS {blas}; tapegrad with Eigen, small products by {small}; "
          f"OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = threads")
    print(f"{'':3} {'thr':>3} {'tapegrad ms':>12} {'PyTorch ms':>11} {'ratio':>7} {'target':>7}  "
          f"{'tapegrad GFLOP/s':>16} {'of GEMM peak':>12} {'PyTorch GFLOP/s':>15} {'allocs/step':>11}")
    verdicts = []
    names = args.workloads.split(",")
    for name in names:
        for threads in thread_counts:
            tg, pt = results[("tapegrad", threads, name)], results[("torch", threads, name)]
            ratio = tg / pt
            target = TARGETS[name] if threads == 1 else None
            tg_gflops = results[("gflops", threads, name)]
            pt_gflops = tg_gflops * tg / pt  # the same FLOPs in PyTorch's time
            print(f"{name:3} {threads:>3} {tg:>12.4f} {pt:>11.4f} {ratio:>7.3f} {target if target else '':>7}  "
                  f"{tg_gflops:>16.1f} {tg_gflops / peaks[threads]:>12.1%} {pt_gflops:>15.1f} "
                  f"{results[('allocations', threads, name)]:>11.3g}")
            if target is not None:
                verdicts.append((f"{name} at 1 thread: ratio {ratio:.3f} <= {target}", ratio <= target))
    if "W4" in names and 2 in thread_counts:
        best = min(results[("torch", t, "W4")] for t in thread_counts)
        tg = results[("tapegrad", 2, "W4")]
        verdicts.append((f"W4 at 2 threads: tapegrad {tg:.2f} ms vs PyTorch's fastest {best:.2f} ms", tg < best))
    print("Eigen GEMM peak (1024^3 sgemm): " + ", ".join(f"{peaks[t]:.0f} GFLOP/s at {t} thread(s)" for t in thread_counts))
    for text, ok in verdicts:
        print(f"  {'met ' if ok else 'MISSED'}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
