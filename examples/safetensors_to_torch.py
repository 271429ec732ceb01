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
agrees), 1 otherwise; run by a Python without PyTorch or numpy, it says so in one line, exit status 1.

Nothing is built before the file is checked: its structure (the rules of tapegrad's reader that matter here),
its dtypes (F64, F32, F16 and BF16 load; another is named), every setting the twin is built from (an integer
in range, a known flag, and the sizes and layer count the tensors have), and then the twin's names and
shapes, made on PyTorch's "meta" device, which allocates nothing, against the file's. A file that fails is
refused in one line naming what is wrong, whatever the file says: what is quoted from it is escaped and cut
short.

With the `safetensors` package, `safetensors.torch.load_file(path)` gives the same state_dict as
read_safetensors() below; torch 1.13 (Debian's python3-torch) has no such module, so this reads the format
itself, in a few lines.
"""
import argparse
import json
import math
import os
import re
import struct
import sys

try:
    import numpy
    import torch
except ImportError as missing:  # run as a program: one line, not a traceback; imported: the caller's to handle
    if __name__ != "__main__":
        raise
    sys.exit(f"safetensors_to_torch.py: this Python ({sys.executable or 'python3'}) cannot import {missing.name}; run "
             f"the script with one that has PyTorch and numpy (Debian's python3-torch: /usr/bin/python3)")

# The format's dtypes and their sizes in bytes; those this script loads, as numpy reads their bits (BF16,
# which numpy lacks, as 16-bit integers reinterpreted by torch).
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4,
         "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
LOADABLE = {"F64": (numpy.float64, None), "F32": (numpy.float32, None), "F16": (numpy.float16, None),
            "BF16": (numpy.int16, torch.bfloat16)}
MAX_HEADER = 100_000_000  # the reference reader's cap on the header's length
KINDS = ("char_lm", "gpt", "decoder_lm", "linear", "multihead_attention", "transformer_encoder_layer")


class Refusal(Exception):
    """A file this script will not load: the message is one line saying why."""


PATH_MAX = 4096  # a path is shown whole up to the longest the system opens, as tapegrad's messages do


def shown(value, limit=100):
    """Text from a file as a message quotes it: control characters and non-ASCII escaped, at most `limit`
    characters kept, so that a hostile file cannot flood the terminal or write to it."""
    text = str(value).encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def unique_keys(pairs):
    """A JSON object whose keys are unique (json keeps the last of two equal keys without a word)."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise Refusal(f"the header has the key '{shown(key)}' twice in one object")
        out[key] = value
    return out


def no_constant(name):
    raise Refusal(f"the header holds {name}, which is not JSON")


def is_size(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_tensor(name, info, buffer):
    """One entry of the header as a tensor, after every check of its dtype, shape and bytes."""
    where = f"tensor '{shown(name)}'"
    if not isinstance(info, dict) or sorted(info) != ["data_offsets", "dtype", "shape"]:
        raise Refusal(f"{where} is not an object of dtype, shape and data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in SIZES:
        raise Refusal(f"{where} has the unknown dtype '{shown(dtype)}'")
    if not isinstance(shape, list) or not all(is_size(d) for d in shape):
        raise Refusal(f"{where} has a shape that is not a list of non-negative integers: {shown(shape)}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(is_size(o) for o in offsets):
        raise Refusal(f"{where} has data_offsets that are not two non-negative integers: {shown(offsets)}")
    begin, end = offsets
    size = math.prod(shape) * SIZES[dtype]
    if not begin <= end <= len(buffer) or end - begin != size:
        raise Refusal(f"{where} is {dtype} {shown(shape)} ({size} bytes) but its data_offsets are [{begin}, {end}] "
                      f"of a {len(buffer)}-byte buffer")
    if dtype not in LOADABLE:
        raise Refusal(f"{where} is {dtype}; this script loads F64, F32, F16 and BF16")
    bits, view = LOADABLE[dtype]
    values = numpy.frombuffer(buffer[begin:end], dtype=numpy.dtype(bits).newbyteorder("<"))
    tensor = torch.from_numpy(values.astype(values.dtype.newbyteorder("=")).reshape(shape))
    return tensor.view(view) if view is not None else tensor


def read_safetensors(path):
    """The file's tensors (a state_dict) and its __metadata__, or a Refusal naming what is wrong."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise Refusal(f"cannot read the file ({shown(e.strerror)})") from None
    if len(data) < 8:
        raise Refusal(f"the file has {len(data)} bytes, fewer than the 8 of the header's length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER or n > len(data) - 8:
        raise Refusal(f"the header's length is {n} bytes, more than the limit of {MAX_HEADER} or than the file holds")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"), object_pairs_hook=unique_keys, parse_constant=no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise Refusal(f"the header is not UTF-8 JSON ({shown(e)})") from None
    if not isinstance(header, dict):
        raise Refusal("the header is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise Refusal("__metadata__ is not a map of strings to strings")
    buffer = memoryview(data)[8 + n:]
    state = {name: read_tensor(name, info, buffer) for name, info in header.items()}
    if not state:
        raise Refusal("the file holds no tensor")
    return state, metadata


def causal(t):
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)


class TiedHead(torch.nn.Module):
    """logits = h E^T + b with the embedding's table E, which stays the embedding's parameter: the head's
    only parameter is its bias, so the table is in the state_dict once, as tapegrad writes it."""

    def __init__(self, embed, vocab, bias=True, device=None):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(vocab, device=device)) if bias else None
        self._embed = [embed]  # a plain list: not registered, so not in the state_dict twice

    def forward(self, h):
        logits = h @ self._embed[0].weight.T
        return logits + self.bias if self.bias is not None else logits


def sinusoidal(max_len, d_model):
    """Vaswani et al.'s fixed positions, as layers/embedding.cpp computes them (in float64, then rounded):
    PE(t, 2i) = sin(t / 10000^(2i/D)), PE(t, 2i+1) = cos(t / 10000^(2i/D))."""
    t = torch.arange(max_len, dtype=torch.float64)[:, None]
    c = torch.arange(d_model)
    angle = t / torch.pow(10000.0, (c - c % 2).to(torch.float64) / d_model)
    return torch.where(c % 2 == 0, torch.sin(angle), torch.cos(angle))


class CharLm(torch.nn.Module):
    """The library's decoder language model (layers/decoder_lm.hpp), as examples/char_lm and examples/gpt
    build it: token embedding, positions (learned: an nn.Embedding; sinusoidal: a fixed table; or none), a
    causal nn.TransformerEncoder of pre-norm GELU layers with a final LayerNorm, and a head: tied to the
    embedding, or an nn.Linear of its own, with or without a bias."""

    def __init__(self, vocab, max_len, d_model, n_heads, n_layers, d_ff, tie, head_bias=True, device=None,
                 positions="learned"):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model, device=device)
        self.positions = positions
        if positions == "learned":
            self.pos = torch.nn.Embedding(max_len, d_model, device=device)
        elif positions == "sinusoidal":
            self.register_buffer("table", sinusoidal(max_len, d_model).to(device=device), persistent=False)
        layer = torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=True, device=device)
        self.stack = torch.nn.TransformerEncoder(layer, n_layers, norm=torch.nn.LayerNorm(d_model, device=device),
                                                 enable_nested_tensor=False)
        self.head = (TiedHead(self.embed, vocab, head_bias, device) if tie
                     else torch.nn.Linear(d_model, vocab, bias=head_bias, device=device))

    def forward(self, ids):
        t = ids.shape[1]
        h = self.embed(ids)
        if self.positions == "learned":
            h = h + self.pos.weight[:t]
        elif self.positions == "sinusoidal":
            h = h + self.table[:t].to(h.dtype)
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

    def __init__(self, d_model, n_heads, bias, causal_mask, device=None):
        super().__init__()
        self.inner = torch.nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True, device=device)
        self.causal = causal_mask

    def forward(self, x):
        mask = causal(x.shape[1]) if self.causal else None
        return self.inner(x, x, x, attn_mask=mask, need_weights=False)[0]


class EncoderLayer(Bare):
    def __init__(self, d_model, n_heads, d_ff, causal_mask, device=None):
        super().__init__()
        self.inner = torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, activation="gelu",
                                                      batch_first=True, norm_first=True, device=device)
        self.causal = causal_mask

    def forward(self, x):
        return self.inner(x, src_mask=causal(x.shape[1]) if self.causal else None)


class Settings:
    """The file's tapegrad.config.<name> settings, each read as the twin needs it or refused in one line."""

    def __init__(self, kind, metadata):
        self.kind = kind
        self.config = {k[len("tapegrad.config."):]: v for k, v in metadata.items() if k.startswith("tapegrad.config.")}

    def _refuse(self, name, what):
        raise Refusal(f"tapegrad.config.{name} is '{shown(self.config[name])}', not {what}")

    def integer(self, name, low=1, default=None):
        if name not in self.config:
            if default is not None:
                return default
            raise Refusal(f"the metadata has no tapegrad.config.{name}, which a {self.kind} is built from")
        if not re.fullmatch(r"[0-9]{1,9}", self.config[name]) or int(self.config[name]) < low:
            self._refuse(name, f"an integer of at least {low}")
        return int(self.config[name])

    def flag(self, name):
        value = self.config.get(name, "false")
        if value not in ("true", "false"):
            self._refuse(name, "true or false")
        return value == "true"

    def learnable(self):
        if self.config.get("attention", "learnable") != "learnable":
            raise Refusal(f"a {self.kind} with attention '{shown(self.config['attention'])}' has no PyTorch twin; "
                          "only learnable attention has one")

    def heads(self, d_model):
        n_heads = self.integer("n_heads")
        if d_model % n_heads:
            self._refuse("n_heads", f"a divisor of the width {d_model} the tensors have")
        return n_heads

    def size(self, name, actual, zero_means=None):
        """A setting that the tensors also say: present, it must agree with them."""
        if name in self.config and self.integer(name, 0) not in (actual, *([0] if zero_means == actual else [])):
            self._refuse(name, f"{actual}, the size the tensors have")


def matrix(state, name, kind):
    """The shape of a 2-D tensor the twin is sized from, every size at least 1."""
    if name not in state:
        raise Refusal(f"the file has no '{name}', which a {kind} has")
    shape = tuple(state[name].shape)
    if len(shape) != 2 or min(shape) < 1:
        raise Refusal(f"'{name}' is {'x'.join(map(str, shape)) or 'a scalar'}, not a matrix")
    return shape


def layer_count(state, prefix, settings):
    """The number of layers the file holds (<prefix>0., <prefix>1., ...), which n_layers must say."""
    found = {int(m.group(1)) for m in (re.match(re.escape(prefix) + r"([0-9]{1,9})\.", k) for k in state) if m}
    if found != set(range(len(found))):
        raise Refusal(f"the file's layers are not numbered from 0 without a gap: {shown(sorted(found))}")
    n_layers = settings.integer("n_layers")
    if n_layers != len(found):
        settings._refuse("n_layers", f"{len(found)}, the number of layers the file holds")
    return n_layers


def twin_builder(state, metadata):
    """The PyTorch twin the file's metadata names, as a function of the device to build it on: every setting
    it takes checked first, against the tensors' shapes where they say it too."""
    kind = metadata.get("tapegrad.model", "")
    if kind not in KINDS:
        raise Refusal(f"no PyTorch twin for the model kind '{shown(kind)}'; this script knows {', '.join(KINDS)}")
    settings = Settings(kind, metadata)
    if kind in ("char_lm", "gpt", "decoder_lm"):
        settings.learnable()
        vocab, d_model = matrix(state, "embed.weight", kind)
        positions = settings.config.get("positions", "learned")
        if positions not in ("learned", "sinusoidal", "none"):
            settings._refuse("positions", "learned, sinusoidal or none")
        if positions == "learned":
            max_len, width = matrix(state, "pos.weight", kind)
        else:
            max_len, width = settings.integer("context"), d_model
        d_ff, ff_width = matrix(state, "stack.layers.0.linear1.weight", kind)
        if width != d_model or ff_width != d_model:
            raise Refusal(f"the widths of embed.weight ({d_model}), pos.weight ({width}) and "
                          f"stack.layers.0.linear1.weight ({ff_width}) differ")
        n_heads, n_layers = settings.heads(d_model), layer_count(state, "stack.layers.", settings)
        settings.size("d_model", d_model)
        settings.size("d_ff", d_ff, zero_means=4 * d_model)
        settings.size("max_len" if kind == "char_lm" else "context", max_len)
        if kind == "decoder_lm":
            tie, head_bias = settings.flag("tie"), settings.flag("head_bias")
            settings.size("vocab", vocab)
        else:
            tie, head_bias = (settings.flag("tie"), True) if kind == "char_lm" else (True, False)  # gpt: nanoGPT's head
        return lambda device: CharLm(vocab, max_len, d_model, n_heads, n_layers, d_ff, tie, head_bias, device, positions)
    if kind == "linear":
        out_features, in_features = matrix(state, "weight", kind)
        return lambda device: torch.nn.Linear(in_features, out_features, bias="bias" in state, device=device)
    if kind == "multihead_attention":
        rows, d_model = matrix(state, "in_proj_weight", kind)
        n_heads, is_causal = settings.heads(d_model), settings.flag("causal")
        return lambda device: SelfAttention(d_model, n_heads, "in_proj_bias" in state, is_causal, device)
    d_ff, d_model = matrix(state, "linear1.weight", kind)  # transformer_encoder_layer
    n_heads, is_causal = settings.heads(d_model), settings.flag("causal")
    return lambda device: EncoderLayer(d_model, n_heads, d_ff, is_causal, device)


def listed(names, limit=3):
    quoted = [f"'{shown(n)}'" for n in names[:limit]]
    return ", ".join(quoted) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def twin_of(state, metadata):
    """The PyTorch module the file's metadata names, sized from the tensors, built only once its names and
    shapes, made on the meta device (no memory), are the file's."""
    build = twin_builder(state, metadata)
    expected = {k: tuple(v.shape) for k, v in build("meta").state_dict().items()}
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [k for k in expected if k in state and tuple(state[k].shape) != expected[k]]
    problems = ([f"the file lacks {listed(missing)}"] if missing else []) + \
               ([f"the twin has no {listed(unexpected)}"] if unexpected else []) + \
               ([f"{listed(wrong)} differ in shape from the twin's, e.g. '{shown(wrong[0])}' is "
                 f"{tuple(state[wrong[0]].shape)} in the file but {expected[wrong[0]]} in the twin"] if wrong else [])
    if problems:
        raise Refusal(f"the {metadata['tapegrad.model']} twin's tensors are not the file's: {'; '.join(problems)}")
    return build(None)


def compute_dtype(state):
    """float64 for a file with F64 tensors, else float32 (F16 and BF16 are loaded into float32 parameters)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in state.values()) else torch.float32


def load(path):
    """The PyTorch twin of the model in a tapegrad-written file, its weights loaded with strict=True."""
    return load_with_file(path)[0]


def load_with_file(path):
    """load(), and the file's tensors and metadata beside the twin."""
    state, metadata = read_safetensors(path)
    torch.set_default_dtype(compute_dtype(state))
    twin = twin_of(state, metadata)
    twin.load_state_dict(state, strict=True)  # every name and shape, or a RuntimeError naming them
    return twin, state, metadata


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
    twin, state, metadata = load_with_file(path)
    dtype = compute_dtype(state)
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
        try:
            if args.check:
                ok = check(path) and ok
            else:
                print(f"{path}: loaded into\n{load(path)}")
        except Refusal as e:
            print(f"safetensors_to_torch.py: {shown(path, PATH_MAX)}: {e}", file=sys.stderr)
            ok = False
        except Exception as e:  # noqa: BLE001 - whatever a file provokes is one line about that file, not a traceback
            print(f"safetensors_to_torch.py: {shown(path, PATH_MAX)}: {type(e).__name__}: {shown(e, 300)}",
                  file=sys.stderr)
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
