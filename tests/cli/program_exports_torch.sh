#!/bin/sh
# The programs' exports load in PyTorch with the README's three lines, as written: its Python block, taken
# from README.md, runs in `PYTHONPATH=examples /usr/bin/python3` from a folder laid out as the repository
# root after `build/examples/char_lm` (examples/ beside char_lm_out/), on a tiny char_lm run's
# char_lm_out/learnable_seed0.safetensors; then the same lines on a tiny gpt run's gpt_out/learnable.safetensors.
# Each must build the twin (examples/safetensors_to_torch.py's load(): load_state_dict(strict=True)) and
# give finite logits of shape (1, 3, vocabulary).
# Needs /usr/bin/python3 with torch; without it, exit 77 (ctest: skipped, never passed).
# Usage: program_exports_torch.sh CHAR_LM WORDS GPT FORTUNES EXAMPLES_DIR WORK
set -eu
char_lm=$1 words=$2 gpt=$3 fortunes=$4 examples=$5 work=$6
readme=$examples/../README.md
if ! /usr/bin/python3 -c "import torch" >/dev/null 2>&1; then
  echo "SKIPPED: /usr/bin/python3 cannot import torch (install Debian's python3-torch to run this test)"
  exit 77
fi
blocks=$(grep -c '^```python$' "$readme" || true)
if [ "$blocks" -ne 1 ]; then
  echo "README.md has $blocks Python blocks; this test runs the one that loads a program's export"
  exit 1
fi
block=$(awk '/^```python$/ {inside = 1; next} /^```$/ {inside = 0} inside' "$readme")
exported=char_lm_out/learnable_seed0.safetensors
case $block in
  *"\"$exported\""*) ;;
  *) echo "README.md's Python block does not load \"$exported\", the file char_lm writes by default:"
     echo "$block"
     exit 1 ;;
esac
rm -rf "$work"
mkdir -p "$work/root"
ln -s "$examples" "$work/root/examples"
"$char_lm" --data "$words" --steps 3 --d-model 16 --heads 2 --layers 1 --seeds 1 --count 2 \
  --out "$work/root/char_lm_out" > /dev/null
"$gpt" --data "$fortunes" --steps 3 --d-model 16 --heads 2 --layers 1 --context 16 --batch 2 --length 8 \
  --attention learnable --out "$work/root/gpt_out" > /dev/null
cd "$work/root"
for file in "$exported" gpt_out/learnable.safetensors; do
  # The README's lines, the file's name changed for gpt's; then what they must have given.
  printf '%s\n' "$block" | sed "s|\"$exported\"|\"$file\"|" > run.py
  cat >> run.py <<'PY'
vocab = model.head.out_features if hasattr(model.head, "out_features") else model.embed.num_embeddings
assert tuple(logits.shape) == (1, 3, vocab), f"logits are {tuple(logits.shape)}, not (1, 3, {vocab})"
assert torch.isfinite(logits).all(), "non-finite logits"
print(f"ok {metadata.get('tapegrad.model')}: {type(model).__name__}, {len(state)} tensors, logits {tuple(logits.shape)}")
PY
  PYTHONPATH=examples /usr/bin/python3 run.py
done
