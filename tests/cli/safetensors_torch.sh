#!/bin/sh
# safetensors the other way round from tests/data/make_golden_safetensors.py: tapegrad writes its twins of
# PyTorch modules (tests/safetensors_export.cpp), and examples/safetensors_to_torch.py loads each file into
# the PyTorch module with load_state_dict(strict=True) and compares its outputs with tapegrad's.
# It needs /usr/bin/python3 with torch (Debian's python3-torch); without it, it exits 77, which ctest reports
# as skipped (SKIP_RETURN_CODE), never as passed.
# Usage: safetensors_torch.sh EXPORTER SCRIPT WORK
set -eu
exporter=$1
script=$2
work=$3
if ! /usr/bin/python3 -c "import torch" >/dev/null 2>&1; then
  echo "SKIPPED: /usr/bin/python3 cannot import torch (install Debian's python3-torch to run this test)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
"$exporter" "$work"
/usr/bin/python3 "$script" --check "$work"/*.safetensors
