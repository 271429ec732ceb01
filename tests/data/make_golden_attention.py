#!/usr/bin/python3
"""Writes tests/data/golden_attention.txt: PyTorch's own nn.MultiheadAttention (float64) on a
multi-head causal case with key padding, for tests/test_layers.cpp to compare SelfAttention against:
outputs, per-head attention weights, and gradients of sum(out * R) with respect to x and every
parameter. Run by hand with Debian's python3-torch (the suite never needs torch):

    /usr/bin/python3 tests/data/make_golden_attention.py

PyTorch stores projections transposed (y = x W^T); they are written here as tapegrad's (in, out)
matrices: wq = in_proj_weight[0:D].T, ..., wo = out_proj.weight.T.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import write_tensor  # noqa: E402  (same file format)

torch.manual_seed(2026)
torch.set_default_dtype(torch.float64)

B, T, D, H = 2, 5, 6, 3


def main():
    mha = torch.nn.MultiheadAttention(D, H, bias=True, batch_first=True)
    with torch.no_grad():  # non-zero biases, so their gradients are exercised at a generic point
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    x = torch.randn(B, T, D, requires_grad=True)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[1, 3:] = True  # item 1: its last two positions are padding
    out, weights = mha(x, x, x, attn_mask=causal, key_padding_mask=padding, need_weights=True,
                       average_attn_weights=False)
    r = torch.randn(out.shape)
    (out * r).sum().backward()

    w, b = mha.in_proj_weight, mha.in_proj_bias
    params = {
        "attn.wq": (w[0:D].T, w.grad[0:D].T), "attn.wk": (w[D:2 * D].T, w.grad[D:2 * D].T),
        "attn.wv": (w[2 * D:].T, w.grad[2 * D:].T), "attn.bq": (b[0:D], b.grad[0:D]),
        "attn.bk": (b[D:2 * D], b.grad[D:2 * D]), "attn.bv": (b[2 * D:], b.grad[2 * D:]),
        "attn.wo": (mha.out_proj.weight.T, mha.out_proj.weight.grad.T),
        "attn.bo": (mha.out_proj.bias, mha.out_proj.bias.grad),
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_attention.txt")
    with open(path, "w") as f:
        f.write(f"# written by tests/data/make_golden_attention.py with torch {torch.__version__}; do not edit\n")
        f.write("case mha_causal_padding\n")
        write_tensor(f, "input", "x", x)
        for name, (value, _) in params.items():
            write_tensor(f, "input", name, value)
        write_tensor(f, "mask", "padding", padding)
        write_tensor(f, "projection", "r", r)
        write_tensor(f, "output", "y", out)
        for h in range(H):
            write_tensor(f, "weights", f"head{h}", weights[:, h])
        write_tensor(f, "grad", "x", x.grad)
        for name, (_, grad) in params.items():
            write_tensor(f, "grad", name, grad)
        f.write("end\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
