#!/usr/bin/python3
"""Times one training step of the benchmark model in tapegrad (build/bench/step_bench) and in PyTorch
(bench/torch_step.py), in this one invocation, and prints the median ms per step of each side, the
ratios against the targets, achieved GFLOP/s against the step's matmul FLOP count and this machine's
measured GEMM peak (the fastest of Eigen's 1024^3 SGEMM and tapegrad's own 256^3, 512^3 and 1024^3
products), the step's time over the time of its own products at their shapes' rates (step_bench's
x_shape_bound), and each side's peak memory (RSS) per workload, at one thread each, and their ratio.

tapegrad runs at each thread count (OMP_NUM_THREADS). PyTorch runs in every arrangement of its own
threads (torch.set_num_threads) and its BLAS's (OPENBLAS_NUM_THREADS): 1x1, 1x2, 2x1, 2x2 with
--threads 1,2. A single knob would not be fair to it: both at 2 oversubscribes two cores (its threads
each call a BLAS that starts threads of its own), while 1 torch thread over a 2-thread BLAS is often its
fastest. Ratios are against PyTorch at 1x1 (the first round's targets, one thread each) and against
PyTorch's fastest arrangement, which is also what tapegrad's two-thread time is compared with.

Every workload runs in a process of its own, each side in a fresh one, so its peak RSS is its own (from
wait4), not the largest of several workloads'. The workloads
and the FLOP count are step_bench's (its --list-workloads, and the GFLOP/s of its timing, which the
PyTorch figure is scaled from: the same FLOPs in PyTorch's time). bench/compare.sh installs what this
needs, builds, and runs it.
"""
import argparse
import itertools
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STEP_BENCH = os.path.join(HERE, "..", "build", "bench", "step_bench")
STEP_PRODUCTS = os.path.join(HERE, "..", "build", "bench", "step_products")
TARGETS = {"W1": 0.10, "W2": 0.40, "W3": 0.70, "W4": 0.70, "W5": 0.80}  # tapegrad / PyTorch, both at 1 thread
TWO_THREAD_TARGETS = ("W3", "W4")  # tapegrad's 2-thread speed-up >= 1.7x
BEATS_BEST = ("W4", "W5")          # tapegrad at 2 threads faster than PyTorch's fastest arrangement
BOUND = ("W3", "W4")               # at 1 thread within 1.25x of 3F / GEMM peak
# W5 and W6 within 1.15x of 3F / GEMM peak (round three) was retired by issue 41: their x bound and x shape
# columns are reported, not graded (docs/performance.md, "The bound at the step's shapes").
RETIRED_BOUND = ("W5", "W6")


# Variables some machines set for old OpenBLAS builds (OPENBLAS_CORETYPE=Haswell, OPENBLAS_L2_SIZE=512):
# they force older kernels on a newer CPU, which made PyTorch's step up to 1.5x slower here. The reference
# runs without them (this command only; the tests and CI keep the machine's environment).
HANDICAPS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def run(command, env_extra=None, drop=()):
    """The JSON lines `command` prints, and its peak RSS in MB, run with `env_extra` added to the
    environment and the variables in `drop` taken out of it."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra or {})
    p = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.stdout.read(), p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"compare: {' '.join(command)} failed ({code}):\n{err}")
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return lines, usage.ru_maxrss / 1024  # ru_maxrss is in KB on Linux


def workloads(step_bench=STEP_BENCH):
    """The benchmark workloads, name -> {B, T, d, H, V, model, layers, ffn} in step_bench's order, from
    step_bench's table."""
    lines, _ = run([step_bench, "--list-workloads"])
    return {r["workload"]: r for r in lines}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tapegrad", default=STEP_BENCH)
    p.add_argument("--threads", default="1,2", help="thread counts (tapegrad) and per-knob counts (PyTorch)")
    p.add_argument("--workloads", default=None, help="comma-separated names (default: all of step_bench's)")
    p.add_argument("--seconds", default="3")
    p.add_argument("--rounds", type=int, default=1,
                   help="measure every figure this many times, the rounds alternating, and keep each one's fastest "
                        "(both sides alike; a shared machine's noise is what it takes off)")
    p.add_argument("--products", default=STEP_PRODUCTS,
                   help="bench/step_products, which times the bound workloads' products alone (left out, with a "
                        "sentence, if it is not an executable file)")
    args = p.parse_args()
    if args.workloads is None:  # W7 only when named: a many-core machine's (bench/many_cores.sh)
        args.workloads = ",".join(n for n, w in workloads(args.tapegrad).items() if w.get("by_default", True))
    names = args.workloads.split(",")
    thread_counts = [int(t) for t in args.threads.split(",")]
    arrangements = list(itertools.product(thread_counts, thread_counts))  # (torch threads, BLAS threads)
    tg, tg_rss, tg_gflops, allocations, regions, params = {}, {}, {}, {}, {}, {}  # (threads, workload) -> ...
    tg_shape, tape_mb = {}, {}  # x_shape_bound, Tape::bytes in MB
    pt, pt_rss = {}, {}                                   # (torch threads, BLAS threads, workload) -> ...
    peaks, peak_parts, blas, torch_version, kernels = {}, {}, "?", "?", "?"
    openblas_core, torch_build = "?", "?"
    for threads in thread_counts:
        print(f"GEMM peak at {threads} thread(s) ...", file=sys.stderr, flush=True)
        for r in run([args.tapegrad, "--workloads", names[0], "--seconds", "0.1"], {"OMP_NUM_THREADS": str(threads)})[0]:
            if r["kind"] == "peak":
                peaks[threads], kernels = r["gemm_gflops"], r["kernels"]
                peak_parts[threads] = ", ".join(f"{k.replace('_', ' ')}^3 {v:.0f}" for k, v in r.items()
                                                if k.startswith(("eigen_", "tapegrad_")))
    if args.rounds < 1:
        raise SystemExit(f"compare: --rounds must be at least 1, got {args.rounds}")
    for name in names:
        for rnd in range(args.rounds):
            of = f" (round {rnd + 1} of {args.rounds})" if args.rounds > 1 else ""
            for threads in thread_counts:
                print(f"{name}: tapegrad at {threads} thread(s){of} ...", file=sys.stderr, flush=True)
                lines, rss = run([args.tapegrad, "--workloads", name, "--seconds", args.seconds, "--no-peak"],
                                 {"OMP_NUM_THREADS": str(threads)})
                (r,) = [r for r in lines if r["kind"] == "step"]
                if rnd == 0 or r["median_ms"] < tg[threads, name]:
                    tg[threads, name], tg_gflops[threads, name] = r["median_ms"], r["gflops"]
                    tg_shape[threads, name] = r["x_shape_bound"]  # with the time it was measured against
                tape_mb[name] = r["tape_bytes"] / 2**20
                allocations[threads, name] = max(allocations.get((threads, name), 0), r["allocations_per_step"])
                regions[threads, name] = max(regions.get((threads, name), 0), r["regions_per_step"])
                tg_rss[threads, name] = max(tg_rss.get((threads, name), 0), rss)
                params[name] = r["params"]
            for torch_threads, blas_threads in arrangements:
                print(f"{name}: PyTorch at {torch_threads} torch x {blas_threads} BLAS thread(s){of} ...", file=sys.stderr,
                      flush=True)
                lines, rss = run([sys.executable, os.path.join(HERE, "torch_step.py"), "--workloads", name, "--seconds",
                                  args.seconds, "--tapegrad", args.tapegrad, "--torch-threads", str(torch_threads)],
                                 {"OMP_NUM_THREADS": str(torch_threads), "OPENBLAS_NUM_THREADS": str(blas_threads)},
                                 drop=HANDICAPS)
                (r,) = lines
                if r["params"] != params[name]:
                    raise SystemExit(f"compare: {name} has {params[name]} parameters in tapegrad but {r['params']} in "
                                     "PyTorch: the two models differ")
                key = (torch_threads, blas_threads, name)
                if rnd == 0 or r["median_ms"] < pt[key]:
                    pt[key] = r["median_ms"]
                pt_rss[key] = max(pt_rss.get(key, 0), rss)
                blas, torch_version = r["blas"], r["torch"]
                openblas_core, torch_build = r["openblas_core"], r["torch_build"]

    print("one training step (zero grad, forward, cross-entropy, backward, SGD), float32, median ms per step"
          + (f", the fastest of {args.rounds} alternating rounds on both sides" if args.rounds > 1 else ""))
    print("W1-W4: one attention layer; W5: 4 pre-norm transformer blocks (nn.TransformerEncoderLayer in PyTorch); "
          "the same parameter count on both sides: " + ", ".join(f"{n} {params[n]:,}" for n in names))
    print(f"PyTorch {torch_version} with BLAS {blas}; tapegrad's matrix products by {kernels}")
    print(f"PyTorch's build: {torch_build}")
    print(f"OpenBLAS kernels: {openblas_core}, run without {' and '.join(HANDICAPS)} "
          f"(here: {', '.join(f'{k}={os.environ[k]}' for k in HANDICAPS if k in os.environ) or 'not set'})")
    print("PyTorch in every arrangement of torch threads x BLAS threads; tapegrad at each thread count")
    arr_heads = " ".join(f"{f'pt {t}x{b}':>9}" for t, b in arrangements)
    print(f"{'':3} {'tg 1T':>8} {'tg 2T':>8} {'2T gain':>7} {arr_heads}  {'best':>5} {'1T/1x1':>7} {'1T/best':>7} "
          f"{'2T/best':>7}  {'GFLOP/s 1T':>10} {'of peak':>7} {'x bound':>7} {'x shape':>7} {'RSS MB tg':>9} "
          f"{'RSS MB pt':>9} {'tg/pt':>5} {'tape MB':>7} {'allocs':>6}")
    verdicts = []
    one, two = thread_counts[0], thread_counts[-1]
    for name in names:
        best = min(arrangements, key=lambda a: pt[a[0], a[1], name])
        best_ms = pt[best[0], best[1], name]
        row = " ".join(f"{pt[t, b, name]:>9.3f}" for t, b in arrangements)
        ratio_11 = tg[one, name] / pt[one, one, name]
        gain = tg[one, name] / tg[two, name]
        # The bound: the step's matmul FLOPs at the measured GEMM peak; x bound = time / bound = peak / GFLOP/s.
        over_bound = peaks[one] / tg_gflops[one, name]
        # Memory at one thread each: the same work without either side's per-thread buffers.
        rss_tg, rss_pt = tg_rss[one, name], pt_rss[one, one, name]
        print(f"{name:3} {tg[one, name]:>8.3f} {tg[two, name]:>8.3f} {gain:>6.2f}x {row}  {f'{best[0]}x{best[1]}':>5} "
              f"{ratio_11:>7.3f} {tg[one, name] / best_ms:>7.3f} {tg[two, name] / best_ms:>7.3f}  "
              f"{tg_gflops[one, name]:>10.1f} {tg_gflops[one, name] / peaks[one]:>7.1%} {over_bound:>7.2f} "
              f"{tg_shape[one, name]:>7.2f} {rss_tg:>9.0f} {rss_pt:>9.0f} {rss_tg / rss_pt:>5.2f} {tape_mb[name]:>7.1f} "
              f"{max(allocations[t, name] for t in thread_counts):>6.3g}")
        if name in TARGETS and one == 1:
            verdicts.append((f"{name} at 1 thread: ratio {ratio_11:.3f} <= {TARGETS[name]} (PyTorch at 1x1)",
                             ratio_11 <= TARGETS[name]))
        if name in TWO_THREAD_TARGETS and two != one:
            verdicts.append((f"{name}: {two}-thread speed-up {gain:.2f}x >= 1.7x", gain >= 1.7))
        if name in BOUND and one == 1:
            verdicts.append((f"{name} at 1 thread: {over_bound:.2f}x its bound (3F / GEMM peak) <= 1.25x",
                             over_bound <= 1.25))
        if name in BEATS_BEST and two != one:
            verdicts.append((f"{name} at {two} threads: tapegrad {tg[two, name]:.2f} ms vs PyTorch's fastest "
                             f"{best_ms:.2f} ms ({best[0]} torch x {best[1]} BLAS threads)", tg[two, name] < best_ms))
        if two != one:  # never slower with more threads
            # With 0 parallel regions a step (W1 on 2 cores) nothing was split: a difference is not a split's
            # cost but placement (an unpinned small step moved between CPUs; docs/performance.md, the EPYC table).
            verdicts.append((f"{name}: {two} threads {tg[two, name]:.3f} ms <= {one} thread {tg[one, name]:.3f} ms "
                             f"({regions[two, name]:.0f} parallel regions a step)", tg[two, name] <= tg[one, name]))
        verdicts.append((f"{name}: 0 heap allocations per step", max(allocations[t, name] for t in thread_counts) == 0))
    for t in thread_counts:
        print(f"GEMM peak at {t} thread(s): {peaks[t]:.0f} GFLOP/s, the fastest of ({peak_parts[t]}) GFLOP/s")
    print("x bound: the step's time over 3F / the GEMM peak above; x shape: over the time its own products take, "
          "each alone at its shape's rate on operands in cache (step_bench's x_shape_bound, measured in the same "
          "process after the step)")
    print("RSS: each side's peak resident memory for the workload's own fresh process at one thread (tapegrad 1 "
          "thread, PyTorch 1 torch x 1 BLAS thread; PyTorch's includes the interpreter and its libraries); tg/pt "
          "their ratio; tape MB: what tapegrad's tape holds after a step (Tape::bytes)")
    for text, ok in verdicts:
        print(f"  {'met ' if ok else 'MISSED'}  {text}")
    # What the bound asks of the products: each of the step's products timed alone, on operands in cache
    # and on operands from L3 or memory (where a step whose tensors outgrow L2 finds most of them).
    bound_names = [n for n in names if n in BOUND + RETIRED_BOUND] if one == 1 else []
    if bound_names and not (os.path.isfile(args.products) and os.access(args.products, os.X_OK)):
        print(f"{args.products} is not an executable file: the products timed alone are left out "
              "(build it: cmake --build build --target step_products)")
    elif bound_names:
        print("step_products at 1 thread ...", file=sys.stderr, flush=True)
        lines, _ = run([args.products], {"OMP_NUM_THREADS": "1"})
        print("the bound workloads' matrix products timed alone (bench/step_products, 1 thread, against its own GEMM "
              "peak measurement):")
        for r in lines:
            if r["workload"] in bound_names:
                print(f"  {r['workload']}: {r['warm_ms']:.2f} ms on operands in cache, {r['cold_ms']:.2f} ms on operands "
                      f"from L3 or memory; bound {r['bound_ms']:.2f} ms at {r['peak_gflops']:.0f} GFLOP/s: the products "
                      f"alone take {r['warm_ms'] / r['bound_ms']:.2f}x / {r['cold_ms'] / r['bound_ms']:.2f}x of it "
                      f"(target for the whole step: {'none, retired' if r['workload'] in RETIRED_BOUND else '1.25x'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
