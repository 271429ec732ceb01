#!/usr/bin/python3
"""Writes tests/data/golden_ops.txt: outputs and gradients of op compositions, computed by PyTorch in
float64, for tests/test_golden.cpp to compare against. Run by hand (the test suite never needs torch):

    /usr/bin/python3 tests/data/make_golden.py      # Debian's python3-torch

Each case stores its inputs, a random projection R of the output's shape, the output, and the
gradient of sum(output * R) with respect to every input. Values are written with 17 significant
digits, so the C++ side reads the very same doubles.
"""
import math
import os

import torch

torch.manual_seed(20261121)
torch.set_default_dtype(torch.float64)

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def randn(*shape):
    return torch.randn(*shape)


def causal(t):
    # True = blocked, as tapegrad's Mask and PyTorch's boolean attention masks
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)


def masked_softmax(s, mask):
    # A fully blocked row gives zeros (and zero gradient), as tapegrad defines it; plain PyTorch
    # would give NaN there, so those rows are softmaxed unmasked and then zeroed.
    mask = mask.expand_as(s)
    full = mask.all(dim=-1, keepdim=True)
    y = torch.softmax(s.masked_fill(mask & ~full, float("-inf")), dim=-1)
    return y * (~full)


@case
def matmul_2d():
    a, b = randn(3, 4), randn(4, 5)
    return {"a": a, "b": b}, {}, lambda a, b: a @ b


@case
def matmul_bt_batched():
    a, b = randn(2, 3, 4), randn(2, 5, 4)
    return {"a": a, "b": b}, {}, lambda a, b: a @ b.transpose(-1, -2)


@case
def matmul_at_batched():
    a, b = randn(2, 4, 3), randn(2, 4, 5)
    return {"a": a, "b": b}, {}, lambda a, b: a.transpose(-1, -2) @ b


@case
def matmul_at_2d():
    a, b = randn(4, 3), randn(4, 5)
    return {"a": a, "b": b}, {}, lambda a, b: a.T @ b


@case
def matmul_shared_weight():
    x, w = randn(2, 3, 4), randn(4, 5)
    return {"x": x, "w": w}, {}, lambda x, w: x @ w


@case
def matmul_bt_shared_weight():
    x, w = randn(2, 3, 4), randn(5, 4)
    return {"x": x, "w": w}, {}, lambda x, w: x @ w.T


@case
def linear_bias_gelu():
    x, w, bias = randn(2, 3, 4), randn(4, 5), randn(5)
    return {"x": x, "w": w, "bias": bias}, {}, lambda x, w, bias: torch.nn.functional.gelu(x @ w + bias)


@case
def broadcast_mul_sub():
    x, p, r = randn(2, 3, 4), randn(3, 4), randn(1, 4)
    return {"x": x, "p": p, "r": r}, {}, lambda x, p, r: x * p - r


@case
def add_same_shape():
    a, b = randn(3, 4), randn(3, 4)
    return {"a": a, "b": b}, {}, lambda a, b: a + b * b


@case
def relu_scale_tanh():
    x = randn(3, 5)
    return {"x": x}, {}, lambda x: torch.tanh(0.7 * torch.relu(x))


@case
def transpose_matmul():
    x, w = randn(2, 3, 4), randn(2, 3, 5)
    return {"x": x, "w": w}, {}, lambda x, w: x.transpose(-1, -2) @ w


@case
def softmax_full_mask():
    s = randn(2, 4, 4)
    mask = causal(4).repeat(2, 1, 1)
    mask[1, 2, :] = True  # one fully blocked row
    return {"s": s}, {"mask": mask}, lambda s: masked_softmax(s, mask)


@case
def softmax_shared_mask():
    s = randn(3, 4, 4)
    mask = causal(4)
    return {"s": s}, {"mask": mask}, lambda s: masked_softmax(s, mask)


@case
def softmax_unmasked():
    s = randn(3, 5)
    return {"s": s}, {}, lambda s: torch.softmax(s, dim=-1)


@case
def attention_causal():
    x, wq, wk, wv = randn(2, 4, 3), randn(3, 3), randn(3, 3), randn(3, 3)
    mask = causal(4)

    def f(x, wq, wk, wv):
        q, k, v = x @ wq, x @ wk, x @ wv
        a = masked_softmax((q @ k.transpose(-1, -2)) * (1 / math.sqrt(3)), mask)
        return a @ v

    return {"x": x, "wq": wq, "wk": wk, "wv": wv}, {"mask": mask}, f


@case
def log_softmax():
    x = randn(3, 5)
    return {"x": x}, {}, lambda x: torch.log_softmax(x, dim=-1)


@case
def cross_entropy_ignore():
    logits = randn(2, 3, 5)
    targets = torch.tensor([[1, 4, -100], [0, -100, 2]])
    f = lambda logits: torch.nn.functional.cross_entropy(logits.reshape(-1, 5), targets.reshape(-1),
                                                          ignore_index=-100).reshape(1)
    return {"logits": logits}, {"targets": targets}, f


@case
def cross_entropy_2d():
    logits = randn(4, 3)
    targets = torch.tensor([2, 0, 1, 1])
    f = lambda logits: torch.nn.functional.cross_entropy(logits, targets).reshape(1)
    return {"logits": logits}, {"targets": targets}, f


@case
def mse():
    a, b = randn(2, 3, 4), randn(2, 3, 4)
    return {"a": a, "b": b}, {}, lambda a, b: torch.nn.functional.mse_loss(a, b).reshape(1)


@case
def sum_and_mean():
    x = randn(3, 4)
    return {"x": x}, {}, lambda x: (x.sum() + (x * x).mean()).reshape(1)


@case
def slice_concat_heads():
    x = randn(2, 3, 6)
    return {"x": x}, {}, lambda x: torch.tanh(torch.cat([x[..., 4:6], x[..., 0:3]], dim=-1))


@case
def gather_embedding():
    table = randn(6, 3)
    ids = torch.tensor([[0, 5, 5, 2], [1, 0, 3, 3]])
    return {"table": table}, {"ids": ids}, lambda table: table[ids] * 1.5


def write_tensor(out, kind, name, t):
    t = t.detach()
    dims = list(t.shape) if t.dim() > 0 else [1]
    out.write(f"{kind} {name} {len(dims)} {' '.join(map(str, dims))}\n")
    if t.dtype == torch.bool:
        vals = [str(int(v)) for v in t.reshape(-1).tolist()]
    elif t.dtype in (torch.int64, torch.int32):
        vals = [str(int(v)) for v in t.reshape(-1).tolist()]
    else:
        vals = [repr(float(v)) for v in t.reshape(-1).tolist()]
    out.write(" ".join(vals) + "\n")


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_ops.txt")
    with open(path, "w") as out:
        out.write(f"# written by tests/data/make_golden.py with torch {torch.__version__}; do not edit\n")
        for make in CASES:
            inputs, extras, f = make()
            leaves = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
            y = f(*leaves.values())
            r = torch.randn(y.shape)
            (y * r).sum().backward()
            out.write(f"case {make.__name__}\n")
            for k, v in inputs.items():
                write_tensor(out, "input", k, v)
            for k, v in extras.items():
                write_tensor(out, "mask" if v.dtype == torch.bool else "ids", k, v)
            write_tensor(out, "projection", "r", r)
            write_tensor(out, "output", "y", y)
            for k, v in leaves.items():
                write_tensor(out, "grad", k, v.grad)
            out.write("end\n")
    print(f"wrote {len(CASES)} cases to {path}")


if __name__ == "__main__":
    main()
