#!/bin/sh
# examples/safetensors_to_torch.py run by a Python that cannot import numpy or torch stops with one line
# naming the module (exit 1), not a traceback: under the first python3 on PATH when it lacks either (as
# on the project's machines), and under that python3 with numpy, then torch, hidden from it (so the check
# runs whatever it has installed).
# Usage: safetensors_no_torch.sh SCRIPT
set -eu
script=$1
command -v python3 > /dev/null 2>&1 || { echo "SKIPPED: no python3 on PATH"; exit 77; }
# refused COMMAND...: exit 1 and one line "safetensors_to_torch.py: ... cannot import numpy|torch; ...".
refused() {
  rc=0
  out=$("$@" no_such_file.safetensors 2>&1) || rc=$?
  if [ "$rc" -ne 1 ] || [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ] ||
     ! printf '%s' "$out" | grep -Eq '^safetensors_to_torch\.py: this Python \(.*\) cannot import (numpy|torch); '; then
    echo "FAIL: $*: expected exit 1 and one line naming numpy or torch, got exit $rc:"
    printf '%s\n' "$out" | head -c 2000
    exit 1
  fi
  echo "ok: $out"
}
hide='import runpy, sys; sys.modules[sys.argv[1]] = None; sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name="__main__")'
if python3 -c "import numpy, torch" > /dev/null 2>&1; then
  echo "python3 on PATH ($(command -v python3)) has numpy and torch: only the hidden modules are checked"
else
  refused python3 "$script"
fi
refused python3 -c "$hide" numpy "$script"
refused python3 -c "$hide" torch "$script"
