#!/usr/bin/python3
"""Loads safetensors files that tapegrad wrote in PyTorch's layout into their PyTorch twins, with
load_state_dict(strict=True): every tensor the twin has, with its shape, and no other.

    /usr/bin/python3 examples/safetensors_to_torch.py model.safetensors            # load, print the twin
    /usr/bin/python3 examples/safetensors_to_torch.py --check a.safetensors ...    # and reproduce tapegrad

The twin is built from the file's metadata, which tapegrad writes from the model's record
(Module::model_record): "tapegrad.model" names the kind, "tapegrad.config.<setting>" its settings; sizes come
from the tensors' shapes. Kinds:
  char_lm                    examples/char_lm's model (learnable attention): CharLm below
  linear                     nn.Linear
  multihead_attention        nn.MultiheadAttention (batch_first) as self-attention; settings n_heads, causal
  transformer_encoder_layer  nn.TransformerEncoderLayer(norm_first=True, activation="gelu", batch_first=True);
                             settings n_heads, causal
With --check, the inputs and tapegrad's outputs are read from the .txt beside each file (ctest's
safetensors_to_torch writes both with tests/safetensors_export.cpp), and the twin's outputs must agree
within 1e-12 (F64 files) or 1e-5 (F32), absolute plus relative. Exit status 0 when every file loads (and
agrees), 1 otherwise.

With the `safetensors` package, `safetensors.torch.load_file(path)` gives the same state_dict as
read_safetensors() below; torch 1.13 (Debian's python3-torch) has no such module, so this reads the format
itself, in a few lines.
"""
import argparse
import json
import os
import struct
import sys

import numpy
import torch

DTYPES = {"F64": numpy.float64, "F32": numpy.float32, "F16": numpy.float16}


def read_safetensors(path):
    """The file's tensors (a state_dict) and its __metadata__."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    buffer = data[8 + n:]
    state = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        values = numpy.frombuffer(buffer[begin:end], dtype=numpy.dtype(DTYPES[info["dtype"]]).newbyteorder("<"))
        state[name] = torch.from_numpy(values.astype(values.dtype.newbyteorder("=")).reshape(info["shape"]))
    return state, metadata


def causal(t):
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)


class TiedHead(torch.nn.Module):
    """logits = h E^T + b with the embedding's table E, which stays the embedding's parameter: the head's
    only parameter is its bias, so the table is in the state_dict once, as tapegrad writes it."""

    def __init__(self, embed, vocab, bias=True):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(vocab)) if bias else None
        self._embed = [embed]  # a plain list: not registered, so not in the state_dict twice

    def forward(self, h):
        logits = h @ self._embed[0].weight.T
        return logits + self.bias if self.bias is not None else logits


class CharLm(torch.nn.Module):
    """examples/char_lm's model (and examples/gpt's, whose tied head has no bias): token embedding, learned positions (an nn.Embedding), a causal
    nn.TransformerEncoder of pre-norm GELU layers with a final LayerNorm, and a head: tied to the
    embedding, or an nn.Linear of its own."""

    def __init__(self, vocab, max_len, d_model, n_heads, n_layers, d_ff, tie, head_bias=True):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model)
        self.pos = torch.nn.Embedding(max_len, d_model)
        layer = torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=True)
        self.stack = torch.nn.TransformerEncoder(layer, n_layers, norm=torch.nn.LayerNorm(d_model),
                                                 enable_nested_tensor=False)
        self.head = TiedHead(self.embed, vocab, head_bias) if tie else torch.nn.Linear(d_model, vocab, bias=head_bias)

    def forward(self, ids):
        t = ids.shape[1]
        h = self.embed(ids) + self.pos.weight[:t]
        return self.head(self.stack(h, mask=causal(t)))


class Bare(torch.nn.Module):
    """A module around one PyTorch layer (`inner`) whose state_dict is that layer's own, without a prefix,
    as a file of the layer alone holds it."""

    def state_dict(self, *args, **kwargs):
        return self.inner.state_dict(*args, **kwargs)

    def load_state_dict(self, state, strict=True):
        return self.inner.load_state_dict(state, strict=strict)


class SelfAttention(Bare):
    """nn.MultiheadAttention as self-attention."""

    def __init__(self, d_model, n_heads, bias, causal_mask):
        super().__init__()
        self.inner = torch.nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True)
        self.causal = causal_mask

    def forward(self, x):
        mask = causal(x.shape[1]) if self.causal else None
        return self.inner(x, x, x, attn_mask=mask, need_weights=False)[0]


class EncoderLayer(Bare):
    def __init__(self, d_model, n_heads, d_ff, causal_mask):
        super().__init__()
        self.inner = torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, activation="gelu",
                                                      batch_first=True, norm_first=True)
        self.causal = causal_mask

    def forward(self, x):
        return self.inner(x, src_mask=causal(x.shape[1]) if self.causal else None)


def twin_of(state, metadata):
    """The PyTorch module the file's metadata names, sized from the tensors."""
    kind = metadata.get("tapegrad.model", "")
    config = {k[len("tapegrad.config."):]: v for k, v in metadata.items() if k.startswith("tapegrad.config.")}
    flag = lambda name: config.get(name, "false") == "true"  # noqa: E731
    if kind == "char_lm":
        if config.get("attention", "learnable") != "learnable":
            raise SystemExit("a char_lm with parameter-free attention has no PyTorch twin")
        vocab, d_model = state["embed.weight"].shape
        return CharLm(vocab, state["pos.weight"].shape[0], d_model, int(config["n_heads"]), int(config["n_layers"]),
                      state["stack.layers.0.linear1.weight"].shape[0], flag("tie"))
    if kind == "gpt":  # examples/gpt: the same stack, nanoGPT's tied head without a bias
        if config.get("attention", "learnable") != "learnable":
            raise SystemExit("a gpt with parameter-free attention has no PyTorch twin")
        vocab, d_model = state["embed.weight"].shape
        return CharLm(vocab, state["pos.weight"].shape[0], d_model, int(config["n_heads"]), int(config["n_layers"]),
                      state["stack.layers.0.linear1.weight"].shape[0], True, head_bias=False)
    if kind == "linear":
        out_features, in_features = state["weight"].shape
        return torch.nn.Linear(in_features, out_features, bias="bias" in state)
    if kind == "multihead_attention":
        return SelfAttention(state["in_proj_weight"].shape[1], int(config["n_heads"]), "in_proj_bias" in state,
                             flag("causal"))
    if kind == "transformer_encoder_layer":
        return EncoderLayer(state["linear1.weight"].shape[1], int(config["n_heads"]), state["linear1.weight"].shape[0],
                            flag("causal"))
    raise SystemExit(f"no PyTorch twin for the model kind '{kind}' (metadata: {metadata})")


def load(path):
    """The PyTorch twin of the model in a tapegrad-written file, its weights loaded with strict=True."""
    state, metadata = read_safetensors(path)
    torch.set_default_dtype(next(iter(state.values())).dtype)
    twin = twin_of(state, metadata)
    twin.load_state_dict(state, strict=True)  # every name and shape, or a RuntimeError naming them
    return twin


def read_case(path):
    """The input ("x" or "ids") and tapegrad's output of a .txt beside a file (tests/golden_file.hpp's format)."""
    tensors = {}
    with open(path) as f:
        lines = [line for line in f if line.strip() and not line.startswith("#") and not line.startswith("case ")]
    for head, values in zip(lines[0::2], lines[1::2]):
        kind, name, rank, *dims = head.split()
        dims = [int(d) for d in dims[:int(rank)]]
        numbers = [float(v) for v in values.split()]
        t = torch.tensor(numbers, dtype=torch.float64).reshape(dims)
        tensors[kind] = t.long() if kind == "ids" else t
    return tensors


def check(path):
    state, metadata = read_safetensors(path)
    dtype = next(iter(state.values())).dtype
    torch.set_default_dtype(dtype)
    twin = twin_of(state, metadata)
    twin.load_state_dict(state, strict=True)  # every name and shape, or a RuntimeError naming them
    case = read_case(os.path.splitext(path)[0] + ".txt")
    with torch.no_grad():
        y = twin(case["ids"] if "ids" in case else case["input"].to(dtype))
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    expected = case["output"]
    error = ((y.double() - expected).abs() - tolerance * expected.abs()).max().item()
    ok = error <= tolerance
    print(f"{'ok' if ok else 'MISMATCH'} {os.path.basename(path)}: {metadata.get('tapegrad.model')}, {len(state)} tensors "
          f"{str(dtype).replace('torch.', '')}, outputs {tuple(y.shape)} within {tolerance:g} "
          f"(worst |diff| - tol |y|: {error:.3g})")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--check", action="store_true", help="reproduce the outputs in the .txt beside each file")
    args = parser.parse_args()
    ok = True
    for path in args.files:
        if args.check:
            ok = check(path) and ok
        else:
            print(f"{path}: loaded into\n{load(path)}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
