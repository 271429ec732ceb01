#!/usr/bin/python3
"""The benchmark step in PyTorch (Debian's python3-torch), for bench/compare.py: the same models and the
same step as bench/step_bench.cpp. W1-W4: token embedding + learned positions -> self-attention (Wq, Wk,
Wv, Wo, no bias, H heads, no mask) + residual -> linear readout with bias. W5: token embedding + learned
positions -> L x nn.TransformerEncoderLayer(norm_first=True, activation="gelu", dropout 0, causal mask)
-> LayerNorm -> linear head. Then cross-entropy on every position; float32; one step = zero_grad,
forward, loss, backward, SGD update (--autocast bf16: the forward inside torch.autocast("cpu",
dtype=torch.bfloat16) and the loss in float32, PyTorch's mixed precision on the CPU). Prints one JSON
line per workload, with the parameter count (which must equal step_bench's) and the process's peak RSS
so far (ru_maxrss: it never goes down, so with several workloads in one process it is the largest so
far; compare.py runs each workload in a fresh process).

The workloads (B, T, d, H, V) are step_bench's: it asks the built build/bench/step_bench (or --tapegrad)
for them, through compare.workloads().

Threads: PyTorch's own (intra-op) threads are --torch-threads (torch.set_num_threads; default
OMP_NUM_THREADS); the BLAS's are its environment's, OPENBLAS_NUM_THREADS, which compare.py sets per
arrangement before starting this.
"""
import argparse
import json
import math
import os
import resource
import time

import torch

import compare


class Model(torch.nn.Module):
    def __init__(self, V, T, d, H):
        super().__init__()
        self.H = H
        self.embed = torch.nn.Embedding(V, d)
        self.pos = torch.nn.Parameter(0.02 * torch.randn(T, d))
        self.wq = torch.nn.Linear(d, d, bias=False)
        self.wk = torch.nn.Linear(d, d, bias=False)
        self.wv = torch.nn.Linear(d, d, bias=False)
        self.wo = torch.nn.Linear(d, d, bias=False)
        self.readout = torch.nn.Linear(d, V)

    def forward(self, tokens):  # (B, T)
        x = self.embed(tokens) + self.pos  # (B, T, d)
        B, T, d = x.shape
        dh = d // self.H

        def heads(t):  # (B, T, d) -> (B, H, T, dh)
            return t.view(B, T, self.H, dh).transpose(1, 2)

        q, k, v = heads(self.wq(x)), heads(self.wk(x)), heads(self.wv(x))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)  # (B, H, T, T)
        o = (a @ v).transpose(1, 2).reshape(B, T, d)
        return self.readout(x + self.wo(o))  # (B, T, V)


class Stack(torch.nn.Module):
    def __init__(self, V, T, d, H, layers, ffn):
        super().__init__()
        self.embed = torch.nn.Embedding(V, d)
        self.pos = torch.nn.Parameter(0.02 * torch.randn(T, d))
        layer = torch.nn.TransformerEncoderLayer(d, H, dim_feedforward=ffn, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, V)
        self.register_buffer("causal", torch.nn.Transformer.generate_square_subsequent_mask(T))

    def forward(self, tokens):  # (B, T)
        x = self.embed(tokens) + self.pos  # (B, T, d)
        return self.head(self.norm(self.blocks(x, mask=self.causal)))  # (B, T, V)


def blas_library():
    """The BLAS this process loaded, from its memory map (Debian picks it through update-alternatives)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "blas" in path and path.endswith(tuple(".so.%d" % v for v in range(10))) or "openblas" in path:
                    return os.path.realpath(path)
    except OSError:
        pass
    return "unknown"


def openblas_core():
    """OpenBLAS's own account of the kernels it runs ("Cooperlake", "Haswell", ...) and its build, when the
    BLAS this process loaded is OpenBLAS: what OPENBLAS_CORETYPE would have forced."""
    import ctypes
    path = blas_library()
    try:
        lib = ctypes.CDLL(path)
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        return f"{lib.openblas_get_corename().decode()} ({lib.openblas_get_config().decode().strip()})"
    except (OSError, AttributeError):
        return "not OpenBLAS"


def torch_build():
    """PyTorch's version and the first lines of its build configuration (compiler, CPU capability)."""
    lines = [line.strip() for line in torch.__config__.show().splitlines() if line.strip()]
    keep = [line for line in lines if line.startswith(("- GCC", "- C++ Version", "- CPU capability", "- OpenMP",
                                                          "- LAPACK", "- MKL", "- Intel"))]
    return f"torch {torch.__version__}: " + "; ".join(line.lstrip("- ") for line in keep[:6])


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workloads", default=None, help="comma-separated names (default: all of step_bench's)")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--tapegrad", default=compare.STEP_BENCH, help="the step_bench whose workloads to run")
    p.add_argument("--torch-threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")),
                   help="torch.set_num_threads (default: OMP_NUM_THREADS)")
    p.add_argument("--autocast", choices=["off", "bf16"], default="off",
                   help="bf16: the forward under torch.autocast (products in bfloat16), the loss in float32")
    args = p.parse_args()
    table = compare.workloads(args.tapegrad)
    names = args.workloads.split(",") if args.workloads else list(table)
    unknown = [name for name in names if name not in table]
    if unknown:
        p.error(f"unknown workload(s) {','.join(unknown)}; step_bench has {','.join(table)}")
    threads = args.torch_threads
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    for name in names:
        w = table[name]
        B, T, d, H, V = w["B"], w["T"], w["d"], w["H"], w["V"]
        model = Stack(V, T, d, H, w["layers"], w["ffn"]) if w["model"] == "stack" else Model(V, T, d, H)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        tokens = torch.randint(0, V, (B, T))
        targets = torch.randint(0, V, (B, T))

        def step():
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
                logits = model(tokens)
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, V), targets.view(-1))
            loss.backward()
            opt.step()

        for _ in range(5):
            step()
        times = []
        start = time.perf_counter()
        while len(times) < 10 or (time.perf_counter() - start < args.seconds and len(times) < 5000):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
        print(json.dumps({"kind": "step", "workload": name, "threads": threads, "autocast": args.autocast,
                          "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "?"), "median_ms": median(times),
                          "steps": len(times), "torch": torch.__version__, "blas": blas_library(),
                          "openblas_core": openblas_core(), "torch_build": torch_build(),
                          "params": sum(p.numel() for p in model.parameters()),
                          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)


if __name__ == "__main__":
    main()
