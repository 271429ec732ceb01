#!/bin/sh
# The programs' exports load in PyTorch: a tiny char_lm run and a tiny gpt run write their learnable models
# as safetensors in PyTorch's layout, and the README's three lines (examples/safetensors_to_torch.py's
# load(): the twin, load_state_dict(strict=True)) load each and run it on a few tokens.
# Needs /usr/bin/python3 with torch; without it, exit 77 (ctest: skipped, never passed).
# Usage: program_exports_torch.sh CHAR_LM WORDS GPT FORTUNES EXAMPLES_DIR WORK
set -eu
char_lm=$1 words=$2 gpt=$3 fortunes=$4 examples=$5 work=$6
if ! /usr/bin/python3 -c "import torch" >/dev/null 2>&1; then
  echo "SKIPPED: /usr/bin/python3 cannot import torch (install Debian's python3-torch to run this test)"
  exit 77
fi
rm -rf "$work"
"$char_lm" --data "$words" --steps 3 --d-model 16 --heads 2 --layers 1 --seeds 1 --count 2 --out "$work/char_lm" > /dev/null
"$gpt" --data "$fortunes" --steps 3 --d-model 16 --heads 2 --layers 1 --context 16 --batch 2 --length 8 \
  --attention learnable --out "$work/gpt" > /dev/null
cd "$examples"
for f in "$work/char_lm/learnable_seed0.safetensors" "$work/gpt/learnable.safetensors"; do
  /usr/bin/python3 - "$f" <<'PY'
import sys
import torch, safetensors_to_torch
model = safetensors_to_torch.load(sys.argv[1])
with torch.no_grad():
    y = model(torch.tensor([[0, 1, 2]]))
assert torch.isfinite(y).all(), "non-finite outputs"
print(f"ok {sys.argv[1]}: {type(model).__name__}, outputs {tuple(y.shape)}")
PY
done
