#!/usr/bin/python3
"""Writes tests/data/golden_transformer.txt: PyTorch's own transformer layers (float64) for
tests/test_layers.cpp to compare tapegrad's TransformerBlock, TransformerStack and LmHead against:
outputs, and gradients of sum(out * R) with respect to the input and every parameter. Run by hand with
Debian's python3-torch (the suite never needs torch):

    /usr/bin/python3 tests/data/make_golden_transformer.py

Cases:
  encoder_layer    nn.TransformerEncoderLayer(norm_first=True, activation="gelu", dropout=0,
                   batch_first=True) with a causal mask: tapegrad's learnable TransformerBlock "block".
  free_block       the same block with parameter-free attention, softmax(h h^T / sqrt(dh)) h per head
                   with h = LN1(x), written out here (PyTorch has no such layer): tapegrad's "block".
  tied_lm          token embedding E, nn.TransformerEncoder of 2 such layers with a final LayerNorm,
                   logits = h E^T + b: tapegrad's Embedding "embed", TransformerStack "stack" and tied
                   LmHead "head"; the gradient of E sums the lookup's and the head's.
Every parameter (LayerNorm weights and biases included) is drawn at random, so each gradient is checked
at a generic point. PyTorch stores projections transposed (y = x W^T); they are written as tapegrad's
(in, out) matrices: attn.wq = in_proj_weight[0:D].T, ..., attn.wo = out_proj.weight.T,
ff.linear1.weight = linear1.weight.T.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import write_tensor  # noqa: E402  (same file format)

torch.manual_seed(20261124)
torch.set_default_dtype(torch.float64)

B, T, D, H, F, V = 2, 5, 8, 2, 16, 7


def causal(t):
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)


def encoder_layer():
    layer = torch.nn.TransformerEncoderLayer(D, H, dim_feedforward=F, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=True)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape) * (0.5 if p.dim() == 2 else 0.3))
        layer.norm1.weight.add_(1.0)
        layer.norm2.weight.add_(1.0)
    return layer


def write_case(out, name, x_name, x, params, y, ids=None):
    r = torch.randn(y.shape)
    (y * r).sum().backward()
    out.write(f"case {name}\n")
    if x is not None:
        write_tensor(out, "input", x_name, x)
    for pname, get in params:
        write_tensor(out, "input", pname, get())
    if ids is not None:
        write_tensor(out, "ids", "ids", ids)
    write_tensor(out, "mask", "causal", causal(T))
    write_tensor(out, "projection", "r", r)
    write_tensor(out, "output", "y", y)
    if x is not None:
        write_tensor(out, "grad", x_name, x.grad)
    for pname, get in params:
        write_tensor(out, "grad", pname, get.grad_getter())


class P:
    """A parameter view: value getter and the same view of the parameter's .grad."""

    def __init__(self, tensor, view):
        self.tensor, self.view = tensor, view

    def __call__(self):
        return self.view(self.tensor)

    def grad_getter(self):
        return self.view(self.tensor.grad)


def views(prefix, layer):
    a = layer.self_attn
    t = lambda m: m.T  # noqa: E731
    return [
        (prefix + "attn.wq", P(a.in_proj_weight, lambda w: w[0:D].T)),
        (prefix + "attn.wk", P(a.in_proj_weight, lambda w: w[D:2 * D].T)),
        (prefix + "attn.wv", P(a.in_proj_weight, lambda w: w[2 * D:3 * D].T)),
        (prefix + "attn.bq", P(a.in_proj_bias, lambda b: b[0:D])),
        (prefix + "attn.bk", P(a.in_proj_bias, lambda b: b[D:2 * D])),
        (prefix + "attn.bv", P(a.in_proj_bias, lambda b: b[2 * D:3 * D])),
        (prefix + "attn.wo", P(a.out_proj.weight, t)),
        (prefix + "attn.bo", P(a.out_proj.bias, lambda b: b)),
        (prefix + "ff.linear1.weight", P(layer.linear1.weight, t)),
        (prefix + "ff.linear1.bias", P(layer.linear1.bias, lambda b: b)),
        (prefix + "ff.linear2.weight", P(layer.linear2.weight, t)),
        (prefix + "ff.linear2.bias", P(layer.linear2.bias, lambda b: b)),
        (prefix + "norm1.weight", P(layer.norm1.weight, lambda b: b)),
        (prefix + "norm1.bias", P(layer.norm1.bias, lambda b: b)),
        (prefix + "norm2.weight", P(layer.norm2.weight, lambda b: b)),
        (prefix + "norm2.bias", P(layer.norm2.bias, lambda b: b)),
    ]


def free_views(prefix, layer):
    """The parameter-free block has no attention parameters: the FFN's and the norms' only."""
    return [v for v in views(prefix, layer) if ".attn." not in v[0]]


def free_block(layer, x):
    h = layer.norm1(x)
    dh = D // H
    heads = []
    for k in range(H):
        hk = h[..., k * dh:(k + 1) * dh]
        s = (hk @ hk.transpose(-1, -2)) / math.sqrt(dh)
        a = torch.softmax(s.masked_fill(causal(T), float("-inf")), dim=-1)
        heads.append(a @ hk)
    x = x + torch.cat(heads, dim=-1)
    return x + layer.linear2(torch.nn.functional.gelu(layer.linear1(layer.norm2(x))))


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_transformer.txt")
    with open(path, "w") as out:
        out.write(f"# written by tests/data/make_golden_transformer.py with torch {torch.__version__}; do not edit\n")

        layer = encoder_layer()
        x = torch.randn(B, T, D, requires_grad=True)
        y = layer(x, src_mask=causal(T))
        write_case(out, "encoder_layer", "x", x, views("block.", layer), y)

        layer = encoder_layer()
        x = torch.randn(B, T, D, requires_grad=True)
        y = free_block(layer, x)
        write_case(out, "free_block", "x", x, free_views("block.", layer), y)

        layers = [encoder_layer(), encoder_layer()]
        norm = torch.nn.LayerNorm(D)
        embed = torch.randn(V, D, requires_grad=True)
        bias = torch.randn(V, requires_grad=True)
        with torch.no_grad():
            norm.weight.copy_(1 + 0.3 * torch.randn(D))
            norm.bias.copy_(0.3 * torch.randn(D))
        ids = torch.randint(0, V, (B, T))
        h = embed[ids]
        for lay in layers:
            h = lay(h, src_mask=causal(T))
        logits = norm(h) @ embed.T + bias
        params = [("embed.table", P(embed, lambda e: e))]
        for k, lay in enumerate(layers):
            params += views(f"stack.blocks.{k}.", lay)
        params += [("stack.norm.weight", P(norm.weight, lambda w: w)), ("stack.norm.bias", P(norm.bias, lambda b: b)),
                   ("head.bias", P(bias, lambda b: b))]
        write_case(out, "tied_lm", "x", None, params, logits, ids=ids)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
