#!/usr/bin/env bash
# Compiles kernels/cuda for sm_80 and sm_90 with nvcc, every warning an error, and checks what
# can be checked without a GPU:
#   - ptxas' registers, spills and static shared memory per kernel (printed: the table in
#     kernels/README.md);
#   - the tensor-core kernels (*_tc_kernel: forward, dK/dV, dQ) spill nothing and have no stack
#     frame (an array indexed at run time would live in local memory without counting as a
#     spill);
#   - their SASS (cuobjdump -sass) holds HMMA instructions for both architectures, i.e. the
#     mma.sync PTX became tensor-core code.
# Exits 1 on a failed check, 77 (skipped) when no nvcc is found.
# Usage: scripts/check-cuda-kernels.sh [NVCC]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${1:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "no nvcc (Debian: nvidia-cuda-toolkit, in non-free)"; exit 77; }
# cuobjdump: beside nvcc, on PATH, or the one Triton bundles in the checkout's .venv.
cuobjdump=
for c in "$(dirname "$nvcc")/cuobjdump" "$(command -v cuobjdump || true)" \
  "$root"/.venv/lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump; do
  if [ -n "$c" ] && [ -x "$c" ]; then cuobjdump=$c; break; fi
done
command -v c++filt >/dev/null || { echo "FAIL: c++filt (binutils) is needed"; exit 1; }
"$nvcc" --version | tail -n 1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0

# "kernel<args>" from a mangled name.
short_names() { c++filt | sed -E 's/, /,/g; s/^.*::([A-Za-z_0-9]+<[^>]*>)\(.*$/\1/'; }

# ptxas -v's report as rows: kernel registers spill_stores spill_loads static_smem stack_frame.
ptxas_rows() {
  awk '/Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2) }
       /spill stores/ { frame = $1; stores = $5; loads = $9 }
       /Used [0-9]+ registers/ { regs = $5; smem = 0
         for (i = 1; i <= NF; ++i) if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem = $i
         print name, regs, stores, loads, smem, frame }' "$1"
}

for arch in 80 90; do
  "$nvcc" -std=c++17 -O3 -arch=sm_$arch -Xptxas -v -Werror all-warnings \
    -I"$root/kernels/include" -c "$root/kernels/cuda/flash_attention.cu" -o "$out/sm_$arch.o" \
    2>"$out/ptxas_$arch.txt" || { cat "$out/ptxas_$arch.txt"; echo "FAIL: sm_$arch"; exit 1; }
  ptxas_rows "$out/ptxas_$arch.txt" >"$out/rows_$arch.txt"
  paste -d' ' <(cut -d' ' -f1 "$out/rows_$arch.txt" | short_names) \
    <(cut -d' ' -f2- "$out/rows_$arch.txt") | sort |
    awk -v arch="sm_$arch" '{ printf "%s %-42s registers %3d  spills %4d / %4d  stack %4d  static smem %6d\n",
                                      arch, $1, $2, $3, $4, $6, $5 }'
  # The tensor-core kernels: no spills, no stack frame.
  while read -r name regs stores loads smem frame; do
    if [ "$stores" != 0 ] || [ "$loads" != 0 ] || [ "$frame" != 0 ]; then
      echo "FAIL: sm_$arch $(echo "$name" | short_names) spills ($stores / $loads bytes," \
        "stack frame $frame bytes)"
      failed=1
    fi
  done < <(grep '_tc_kernel' "$out/rows_$arch.txt")
  # ...and HMMA in each one's SASS.
  [ -n "$cuobjdump" ] || { echo "FAIL: no cuobjdump (beside nvcc, on PATH or in .venv)"; exit 1; }
  "$cuobjdump" -sass "$out/sm_$arch.o" 2>/dev/null |
    awk '/Function :/ { name = $3 } /HMMA/ { hmma[name]++ }
         END { for (n in hmma) print n, hmma[n] }' >"$out/hmma_$arch.txt"
  tc_kernels=$(grep -c '_tc_kernel' "$out/rows_$arch.txt" || true)
  [ "$tc_kernels" -ge 12 ] || { echo "FAIL: sm_$arch has $tc_kernels tensor-core kernels, want 12"; failed=1; }
  while read -r name _; do
    count=$(awk -v n="$name" '$1 == n { print $2 }' "$out/hmma_$arch.txt")
    if [ -z "$count" ]; then
      echo "FAIL: sm_$arch $(echo "$name" | short_names) has no HMMA in its SASS"
      failed=1
    else
      echo "sm_$arch $(echo "$name" | short_names): $count HMMA"
    fi
  done < <(grep '_tc_kernel' "$out/rows_$arch.txt")
done
[ "$failed" = 0 ] || exit 1
echo "PASS: kernels/cuda compiles for sm_80 and sm_90 with warnings as errors; the tensor-core" \
  "kernels spill nothing, have no stack frame and hold HMMA"
