#!/bin/sh
# A program built against the installed package runs under valgrind: the library is built for the
# x86-64-v3 level by default (TAPEGRAD_NATIVE=OFF, TAPEGRAD_ARCH), AVX2 and FMA without AVX-512, so no
# instruction valgrind cannot decode (AVX-512 in Rng::Rng stopped it when -march=native was the default). Memcheck's errors fail the test. Needs
# valgrind; without it, exit 77 (ctest: skipped). CI installs it.
# Usage: valgrind.sh WORK (downstream_find_package's work folder, which built the programs)
set -eu
work=$1
if ! command -v valgrind >/dev/null 2>&1; then
  echo "SKIPPED: valgrind is not installed (apt-get install valgrind)"
  exit 77
fi
vg="valgrind --error-exitcode=3 --quiet --smc-check=all"  # libxsmm writes its kernels at run time
$vg "$work/build/downstream"
$vg "$work/build/custom_model" predict "$work/custom_model/straight/model.tgck"
echo "valgrind: the downstream programs ran clean"
