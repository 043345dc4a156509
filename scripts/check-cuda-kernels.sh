#!/usr/bin/env bash
# Compiles kernels/cuda for sm_80 and sm_90 with nvcc, every warning an error, and prints ptxas'
# registers, spills and shared memory per kernel (the table in kernels/README.md). No GPU is
# needed. Exits 77 (skipped) when no nvcc is found.
# Usage: scripts/check-cuda-kernels.sh [NVCC]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${1:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "no nvcc (Debian: nvidia-cuda-toolkit, in non-free)"; exit 77; }
"$nvcc" --version | tail -n 1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for arch in 80 90; do
  "$nvcc" -std=c++17 -O3 -arch=sm_$arch -Xptxas -v -Werror all-warnings \
    -I"$root/kernels/include" -c "$root/kernels/cuda/flash_attention.cu" -o "$out/sm_$arch.o" \
    2>"$out/ptxas_$arch.txt" || { cat "$out/ptxas_$arch.txt"; echo "FAIL: sm_$arch"; exit 1; }
  grep -E "Compiling entry|registers|spill" "$out/ptxas_$arch.txt" |
    sed -E "s/.*entry function '([^']*)'.*/\1/" | paste - - - |
    awk -v arch="sm_$arch" '{ print arch, $0 }'
done
echo "PASS: kernels/cuda compiles for sm_80 and sm_90 with warnings as errors"
