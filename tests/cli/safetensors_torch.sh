#!/bin/sh
# safetensors the other way round from tests/data/make_golden_safetensors.py: tapegrad writes its twins of
# PyTorch modules (tests/safetensors_export.cpp), and examples/safetensors_to_torch.py loads each file into
# the PyTorch module with load_state_dict(strict=True) and compares its outputs with tapegrad's. Then the
# script is fed files made from those whose metadata lies or whose tensors are of other dtypes: each lie is
# refused in one line (exit 1, no traceback, in seconds: nothing is built before it is checked), and BF16
# and F16 tensors load.
# It needs /usr/bin/python3 with torch (Debian's python3-torch); without it, it exits 77, which ctest reports
# as skipped (SKIP_RETURN_CODE), never as passed.
# Usage: safetensors_torch.sh EXPORTER SCRIPT WORK
set -eu
exporter=$1
script=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
"$exporter" "$work"
# Importing torch takes seconds: whether it can be imported is asked only when this first run fails.
if ! out=$(/usr/bin/python3 "$script" --check "$work"/*.safetensors 2>&1); then
  if ! /usr/bin/python3 -c "import torch" >/dev/null 2>&1; then
    echo "SKIPPED: /usr/bin/python3 cannot import torch (install Debian's python3-torch to run this test)"
    exit 77
  fi
  printf '%s\n' "$out"
  exit 1
fi
printf '%s\n' "$out"

# The hostile files, each a valid export with one thing changed.
mkdir "$work/hostile"
/usr/bin/python3 - "$work" <<'PY'
import json, struct, sys

work = sys.argv[1]

def read(name):
    with open(f"{work}/{name}", "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]

def write(name, header, buffer):
    text = json.dumps(header).encode()
    with open(f"{work}/hostile/{name}.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + buffer)

def with_metadata(name, **changes):
    header, buffer = read("char_model.f32.safetensors")
    header["__metadata__"].update(changes)
    write(name, header, buffer)

with_metadata("n_layers_huge", **{"tapegrad.config.n_layers": "100000"})
with_metadata("n_layers_word", **{"tapegrad.config.n_layers": "2.5"})
with_metadata("n_heads_3", **{"tapegrad.config.n_heads": "3"})
with_metadata("tie_maybe", **{"tapegrad.config.tie": "maybe"})
with_metadata("kind_escape", **{"tapegrad.model": "\x1b[2J" + "x" * 100000})

# The linear twin in 16-bit floats (loads), and with a U8 tensor beside its F32 ones (refused, named).
header, buffer = read("linear.f32.safetensors")
floats = struct.unpack(f"<{len(buffer) // 4}f", buffer)
for dtype, pack in (("BF16", lambda v: struct.pack("<f", v)[2:]), ("F16", lambda v: struct.pack("<e", v))):
    converted = {k: dict(v, dtype=dtype, data_offsets=[v["data_offsets"][0] // 2, v["data_offsets"][1] // 2])
                 for k, v in header.items() if k != "__metadata__"}
    write(dtype.lower(), dict(converted, __metadata__=header["__metadata__"]), b"".join(pack(v) for v in floats))
extra = dict(header, extra={"dtype": "U8", "shape": [4], "data_offsets": [len(buffer), len(buffer) + 4]})
write("u8", extra, buffer + b"PK\x05\x06")
PY

# Each lie is refused in one line that names its file and says what is wrong (no traceback), and the 16-bit
# files load: one run of the script for the lies and one for those (each run imports torch, seconds). The
# script reads its files one by one and refuses each in a line of its own, exit 1 if any is refused, 0 if
# every one loads.
cases=$(cat <<'EOF'
n_layers_huge|tapegrad.config.n_layers is '100000', not 2, the number of layers the file holds
n_layers_word|tapegrad.config.n_layers is '2.5', not an integer of at least 1
n_heads_3|tapegrad.config.n_heads is '3', not a divisor of the width 8 the tensors have
tie_maybe|tapegrad.config.tie is 'maybe', not true or false
kind_escape|no PyTorch twin for the model kind '\x1b[2Jxxx
u8|tensor 'extra' is U8; this script loads F64, F32, F16 and BF16
EOF
)
# shellcheck disable=SC2046
if out=$(/usr/bin/python3 "$script" $(printf '%s\n' "$cases" | sed "s#|.*##; s#^#$work/hostile/#; s#\$#.safetensors#") 2>&1); then
  echo "FAIL: the hostile files loaded: $out"
  exit 1
fi
if [ "$(printf '%s\n' "$out" | wc -l)" -ne "$(printf '%s\n' "$cases" | wc -l)" ] || printf '%s' "$out" | grep -q Traceback; then
  echo "FAIL: expected one line for each hostile file and no traceback, got:"
  printf '%s\n' "$out" | head -c 4000
  exit 1
fi
line=0
while IFS='|' read -r name text; do
  line=$((line + 1))
  got=$(printf '%s\n' "$out" | sed -n "${line}p")
  # At most 400 bytes besides the file's path, which the script shows whole (up to PATH_MAX).
  if [ "${#got}" -gt $((400 + ${#work})) ] || ! printf '%s' "$got" | grep -qF -- "/hostile/$name.safetensors: " ||
     ! printf '%s' "$got" | grep -qF -- "$text"; then
    echo "FAIL: $name: expected one line with '$text', got:"
    printf '%s\n' "$got" | head -c 2000
    exit 1
  fi
  echo "ok refused $name: $got"
done <<EOF
$cases
EOF
/usr/bin/python3 "$script" "$work/hostile/bf16.safetensors" "$work/hostile/f16.safetensors" >/dev/null
echo "ok loaded bf16 and f16"
