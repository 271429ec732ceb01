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
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_rng_golden import Rng  # tapegrad's generator, reimplemented independently (core/rng.hpp)

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


# ---- cases added after the first release: appended, so that the draws of the cases above (one seeded
# stream, drawn in case order) and so their stored values stay as they were.


@case
def reshape_3d_to_2d():
    x, w = randn(2, 3, 4), randn(4, 2)
    return {"x": x, "w": w}, {}, lambda x, w: x.reshape(6, 4) @ w


@case
def reshape_2d_to_3d():
    x, w = randn(6, 4), randn(2, 4, 3)
    return {"x": x, "w": w}, {}, lambda x, w: x.reshape(2, 3, 4) @ w


@case
def pick_positions():
    x = randn(3, 4, 5)
    positions = torch.tensor([3, 0, 2])
    return {"x": x}, {"positions": positions}, lambda x: torch.tanh(x[torch.arange(3), positions])


@case
def row_reductions():
    x = randn(2, 3, 4)
    f = lambda x: x.sum(dim=-1, keepdim=True) * x.max(dim=-1, keepdim=True).values - (x * x).mean(dim=-1, keepdim=True)
    return {"x": x}, {}, f


@case
def row_max_shifted_exp():
    x = randn(4, 5)
    return {"x": x}, {}, lambda x: torch.exp(x - x.max(dim=-1, keepdim=True).values)


@case
def layer_norm_composed():
    # layer normalisation from the primitives, against the fused op's maths
    x = randn(2, 3, 5)

    def f(x):
        centred = x - x.mean(dim=-1, keepdim=True)
        return centred / torch.sqrt((centred * centred).mean(dim=-1, keepdim=True) + 1e-5)

    return {"x": x}, {}, f


@case
def layer_norm_3d():
    x, gamma, beta = randn(2, 3, 6), randn(6), randn(6)
    f = lambda x, gamma, beta: torch.nn.functional.layer_norm(x, (6,), gamma, beta, eps=1e-5)
    return {"x": x, "gamma": gamma, "beta": beta}, {}, f


@case
def layer_norm_2d_row_params():
    x, gamma, beta = randn(4, 6) * 3 + 2, randn(1, 6), randn(1, 6)
    f = lambda x, gamma, beta: torch.nn.functional.layer_norm(x, (6,), gamma.reshape(6), beta.reshape(6), eps=0.01)
    return {"x": x, "gamma": gamma, "beta": beta}, {}, f


@case
def column_broadcast():
    x, c, d = randn(2, 3, 4), randn(2, 3, 1), randn(2, 3, 1)
    return {"x": x, "c": c, "d": d}, {}, lambda x, c, d: (x + c) * d - c


@case
def column_broadcast_2d():
    x, c = randn(4, 3), randn(4, 1)
    return {"x": x, "c": c}, {}, lambda x, c: x * c + c


@case
def div_column():
    a, b = randn(2, 3, 4), randn(2, 3, 1)
    return {"a": a, "b": b}, {}, lambda a, b: a / torch.exp(b)


@case
def div_same_and_row():
    a, b, r = randn(3, 4), randn(3, 4), randn(4)
    return {"a": a, "b": b, "r": r}, {}, lambda a, b, r: a / torch.exp(b) / torch.sigmoid(r)


@case
def exp_log_sqrt_sigmoid():
    x = randn(3, 4)
    return {"x": x}, {}, lambda x: torch.log(torch.sigmoid(x)) + torch.sqrt(torch.exp(x))


@case
def log_sqrt_of_squares():
    x, y = randn(2, 3, 4), randn(2, 3, 4)
    return {"x": x, "y": y}, {}, lambda x, y: torch.log(x * x) * torch.sqrt(y * y)


def dropout_mask(shape, p, seed, stream):
    # As autograd/ops_norm.cpp draws it: one uniform per element in row-major order, dropped when < p.
    rng = Rng(seed, stream)
    keep = [0.0 if rng.uniform() < p else 1.0 for _ in range(math.prod(shape))]
    return torch.tensor(keep).reshape(shape)


@case
def dropout():
    x = randn(3, 8)
    seed, stream, percent = 1234, 5, 30  # p = 0.3
    mask = dropout_mask(x.shape, percent / 100, seed, stream)
    rng_spec = torch.tensor([seed, stream, percent])
    return {"x": x}, {"rng": rng_spec}, lambda x: x * mask / (1 - percent / 100)


@case
def dropout_3d_tanh():
    x = randn(2, 3, 4)
    seed, stream, percent = 99, 0, 50  # p = 0.5
    mask = dropout_mask(x.shape, percent / 100, seed, stream)
    rng_spec = torch.tensor([seed, stream, percent])
    return {"x": x}, {"rng": rng_spec}, lambda x: torch.tanh(x * mask / (1 - percent / 100))


def multi_head_attention(q, k, v, heads, mask, scale):
    # Per head h: softmax(scale Q_h K_h^T, mask) V_h, heads side by side (tapegrad's attention op).
    b, tq, width = q.shape
    tk, dv = k.shape[1], v.shape[2] // heads
    qh = q.reshape(b, tq, heads, width // heads).transpose(1, 2)  # (B, H, Tq, dk)
    kh = k.reshape(b, tk, heads, width // heads).transpose(1, 2)
    vh = v.reshape(b, tk, heads, dv).transpose(1, 2)
    scores = scale * (qh @ kh.transpose(-1, -2))  # (B, H, Tq, Tk)
    m = mask if mask.dim() == 2 else mask.unsqueeze(1)  # (Tq, Tk) or (B, 1, Tq, Tk)
    weights = masked_softmax(scores, m)
    return (weights @ vh).transpose(1, 2).reshape(b, tq, heads * dv)


@case
def attention_heads_causal():
    q, k, v = randn(2, 4, 6), randn(2, 4, 6), randn(2, 4, 4)
    mask = causal(4)
    return {"q": q, "k": k, "v": v}, {"mask": mask}, lambda q, k, v: multi_head_attention(q, k, v, 2, mask, 0.6)


@case
def attention_cross_padding():
    q, k, v = randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 6)
    mask = torch.zeros(2, 3, 5, dtype=torch.bool)
    mask[0, :, 4] = True  # item 0: key 4 is padding
    mask[1, 1, :] = True  # item 1: query 1 sees no key
    mask[1, 2, 0] = True
    return {"q": q, "k": k, "v": v}, {"mask": mask}, lambda q, k, v: multi_head_attention(q, k, v, 2, mask, 0.5)


@case
def attention_shared_qkv():
    x = randn(2, 5, 6)
    none = torch.zeros(5, 5, dtype=torch.bool)
    return {"x": x}, {}, lambda x: multi_head_attention(x, x, x, 3, none, 1 / math.sqrt(2))


# Appended after the others, so that every earlier case draws the same numbers as before.
@case
def affine_2d_row_bias():
    x, w, bias = randn(4, 3), randn(3, 6), randn(1, 6)
    return {"x": x, "w": w, "bias": bias}, {}, lambda x, w, bias: x @ w + bias


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
