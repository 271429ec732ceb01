#!/bin/sh
# The programs' exports load in PyTorch as the documentation says, its lines run as written: README.md's
# Python block and docs/safetensors.md's (each page's only one) and safetensors.md's one-command load, taken
# from the pages, run in `PYTHONPATH=examples /usr/bin/python3` from a folder laid out as the repository
# root after `build/examples/char_lm` (examples/ beside char_lm_out/; char_lm with its defaults but for
# a few steps). The README's lines run again on a tiny gpt run's gpt_out/learnable.safetensors. Each must
# build the twin with load_state_dict(strict=True); the README's must give finite logits (1, 3, vocabulary).
# Needs /usr/bin/python3 with torch; without it, exit 77 (ctest: skipped, never passed).
# Usage: program_exports_torch.sh CHAR_LM GPT FORTUNES EXAMPLES_DIR WORK
set -eu
char_lm=$1 gpt=$2 fortunes=$3 examples=$4 work=$5
root=$(cd "$examples/.." && pwd)
exported=char_lm_out/learnable_seed0.safetensors

# The one Python block of a page (relative to the root), which must load "$exported".
python_block() {
  blocks=$(grep -c '^```python$' "$root/$1" || true)
  if [ "$blocks" -ne 1 ]; then
    echo "$1 has $blocks Python blocks; this test runs the one that loads $exported" >&2
    exit 1
  fi
  block=$(awk '/^```python$/ {inside = 1; next} /^```$/ {inside = 0} inside' "$root/$1")
  case $block in
    *"\"$exported\""*) printf '%s\n' "$block" ;;
    *) printf "%s's Python block does not load \"%s\", the file char_lm writes by default:\n%s\n" "$1" "$exported" "$block" >&2
       exit 1 ;;
  esac
}
readme_block=$(python_block README.md)
safetensors_block=$(python_block docs/safetensors.md)
command=$(sed -n 's|^    \(/usr/bin/python3 examples/safetensors_to_torch.py .*\)$|\1|p' "$root/docs/safetensors.md")
case $command in
  *" $exported") ;;
  *) echo "docs/safetensors.md names no '/usr/bin/python3 examples/safetensors_to_torch.py $exported' command: '$command'"
     exit 1 ;;
esac

rm -rf "$work"
mkdir -p "$work/root"
ln -s "$root/examples" "$work/root/examples"
"$char_lm" --steps 3 --seeds 1 --count 2 --out "$work/root/char_lm_out" > /dev/null
"$gpt" --data "$fortunes" --steps 3 --d-model 16 --heads 2 --layers 1 --context 16 --batch 2 --length 8 \
  --attention learnable --prepared "$work/gpt_data" --out "$work/root/gpt_out" > /dev/null
cd "$work/root"
# Each page's lines as a script of their own, run one after the other in one Python (importing torch takes
# seconds), each as __main__ in a fresh namespace, as `python3 script.py` runs it from this folder.
scripts=""
for file in "$exported" gpt_out/learnable.safetensors; do
  # The README's lines, the file's name changed for gpt's; then what they must have given.
  script=readme_$(basename "$(dirname "$file")").py
  printf '%s\n' "$readme_block" | sed "s|\"$exported\"|\"$file\"|" > "$script"
  cat >> "$script" <<'PY'
vocab = model.head.out_features if hasattr(model.head, "out_features") else model.embed.num_embeddings
assert tuple(logits.shape) == (1, 3, vocab), f"logits are {tuple(logits.shape)}, not (1, 3, {vocab})"
assert torch.isfinite(logits).all(), "non-finite logits"
print(f"README.md: ok {type(model).__name__}, {len(model.state_dict())} tensors, logits {tuple(logits.shape)}")
PY
  scripts="$scripts $script"
done
printf '%s\nprint(f"docs/safetensors.md: ok {type(model).__name__}, {len(model.state_dict())} tensors")\n' "$safetensors_block" > safetensors.py
# shellcheck disable=SC2086
if ! PYTHONPATH=examples /usr/bin/python3 -c 'import runpy, sys
for script in sys.argv[1:]:
    runpy.run_path(script, run_name="__main__")' $scripts safetensors.py; then
  if ! /usr/bin/python3 -c "import torch" >/dev/null 2>&1; then
    echo "SKIPPED: /usr/bin/python3 cannot import torch (install Debian's python3-torch to run this test)"
    exit 77
  fi
  exit 1
fi
sh -c "$command" > command.txt
echo "docs/safetensors.md: ok $command: $(head -n 1 command.txt)"
