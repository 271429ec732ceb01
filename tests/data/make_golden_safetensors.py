#!/usr/bin/python3
"""Writes tests/data/safetensors/: PyTorch modules with fixed random weights, as safetensors files in
PyTorch's own names and layouts (each module's state_dict), and their outputs on fixed inputs
(outputs.txt), for tests/test_safetensors_pytorch.cpp to load into tapegrad's twins and reproduce. Run by
hand with Debian's python3-torch (the suite never needs torch):

    /usr/bin/python3 tests/data/make_golden_safetensors.py

torch 1.13 has no safetensors module: write_safetensors() below writes the format in a few lines.

Cases, each a file <case>.<dtype>.safetensors and a case "<case>.<dtype>" in outputs.txt:
  linear      nn.Linear(5, 3), on x (2, 4, 5)                                 F64, F32, F16, BF16
  attention   nn.MultiheadAttention(8, 2, batch_first=True), causal mask       F64, F32
  block       nn.TransformerEncoderLayer(8, 2, 16, dropout=0, activation="gelu", batch_first=True,
              norm_first=True), causal mask                                    F64, F32
  char_model  token nn.Embedding(11, 8) "embed", learned positions nn.Embedding(6, 8) "pos", "stack":
              nn.TransformerEncoder of 2 such layers with a final nn.LayerNorm, and "head": logits =
              h E^T + b tied to the embedding (its only parameter is the bias, so the table is in the
              file once), on ids (2, 5)                                        F64, F32
Each case's outputs are computed in float64 from the weights as its file holds them (rounded to F32, F16
or BF16 first), so a loader that converts exactly reproduces them to rounding.
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import write_tensor  # noqa: E402  (the golden files' format)

torch.manual_seed(20261201)
torch.set_default_dtype(torch.float64)

B, T, D, H, F = 2, 4, 8, 2, 16
V, MAX_LEN = 11, 6
STORED = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def tensor_bytes(t, dtype):
    """Little-endian, row-major bytes of t stored as `dtype`."""
    t = t.detach().to(STORED[dtype]).contiguous()
    if dtype == "BF16":  # numpy has no bfloat16: its bits, as 16-bit integers
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, tensors, dtype, metadata):
    """The safetensors format: u64 header length, JSON header (padded with spaces), the tensors' bytes."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        data = tensor_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def causal(t):
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)


def randomize(module):
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn(p.shape) * (0.5 if p.dim() == 2 else 0.3))
            if "norm" in name and name.endswith("weight"):
                p.add_(1.0)
    return module


def encoder_layer():
    return torch.nn.TransformerEncoderLayer(D, H, dim_feedforward=F, dropout=0.0, activation="gelu",
                                            batch_first=True, norm_first=True)


class TiedHead(torch.nn.Module):
    """logits = h E^T + b with the embedding's table E, which stays the embedding's parameter."""

    def __init__(self, embed, vocab):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(vocab))
        self._embed = [embed]  # a plain list, so the table is not registered (and written) twice

    def forward(self, h):
        return h @ self._embed[0].weight.T + self.bias


class CharModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(V, D)
        self.pos = torch.nn.Embedding(MAX_LEN, D)
        self.stack = torch.nn.TransformerEncoder(encoder_layer(), 2, norm=torch.nn.LayerNorm(D),
                                                 enable_nested_tensor=False)
        self.head = TiedHead(self.embed, V)

    def forward(self, ids):
        t = ids.shape[1]
        h = self.embed(ids) + self.pos.weight[:t]
        return self.head(self.stack(h, mask=causal(t)))


class Bare(torch.nn.Module):
    """A module around one PyTorch layer (`inner`) whose state_dict is that layer's own, without a prefix."""

    def state_dict(self, *args, **kwargs):
        return self.inner.state_dict(*args, **kwargs)

    def load_state_dict(self, state, strict=True):
        return self.inner.load_state_dict(state, strict=strict)


class Attention(Bare):
    """nn.MultiheadAttention as self-attention with a causal mask."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.MultiheadAttention(D, H, batch_first=True)

    def forward(self, x):
        return self.inner(x, x, x, attn_mask=causal(x.shape[1]), need_weights=False)[0]


class Block(Bare):
    """nn.TransformerEncoderLayer with a causal mask."""

    def __init__(self):
        super().__init__()
        self.inner = encoder_layer()

    def forward(self, x):
        return self.inner(x, src_mask=causal(x.shape[1]))


def main():
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors")
    os.makedirs(folder, exist_ok=True)
    cases = [
        ("linear", randomize(torch.nn.Linear(5, 3)), "x", torch.randn(B, T, 5), ["F64", "F32", "F16", "BF16"]),
        ("attention", randomize(Attention()), "x", torch.randn(B, T, D), ["F64", "F32"]),
        ("block", randomize(Block()), "x", torch.randn(B, T, D), ["F64", "F32"]),
        ("char_model", randomize(CharModel()), "ids", torch.randint(0, V, (B, T + 1)), ["F64", "F32"]),
    ]
    metadata = {"producer": f"tests/data/make_golden_safetensors.py, torch {torch.__version__}", "format": "pt"}
    with open(os.path.join(folder, "outputs.txt"), "w") as out:
        out.write(f"# written by tests/data/make_golden_safetensors.py with torch {torch.__version__}; do not edit\n")
        for name, module, input_name, x, dtypes in cases:
            state = {k: v.detach().clone() for k, v in module.state_dict().items()}
            for dtype in dtypes:
                stem = f"{name}.{dtype.lower()}"
                write_safetensors(os.path.join(folder, stem + ".safetensors"), state, dtype, metadata)
                # The outputs of the weights as the file holds them.
                module.load_state_dict({k: v.to(STORED[dtype]).to(torch.float64) for k, v in state.items()})
                with torch.no_grad():
                    y = module(x)
                out.write(f"case {stem}\n")
                write_tensor(out, "ids" if input_name == "ids" else "input", input_name, x)
                write_tensor(out, "output", "y", y)
    print(f"wrote {folder}")


if __name__ == "__main__":
    main()
