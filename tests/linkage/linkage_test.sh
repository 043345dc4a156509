#!/usr/bin/env bash
# What the built binaries load (docs/building.md):
#   cpu BIN_DIR: every executable in BIN_DIR (the CPU build) names no CUDA or NCCL library among
#     its NEEDED (readelf -d), every library it loads resolves (ldd), libtorch_cpu.so comes from
#     the project's .venv, and no CUDA driver, NCCL, cuDNN, cuBLAS or torch_cuda is loaded at all.
#     The only CUDA libraries in the closure are the two that PyPI's libtorch_cpu.so itself needs
#     (libcudart, libcupti: its profiler), which load without a driver or a GPU. Also: the symbols
#     that the wheel's libtorch_cpu.so and Debian's protobuf and gRPC both define are std::
#     template instantiations only (same code under the same name), so the wheel's internal
#     protobuf cannot take the place of Debian's in the daemons.
#   cuda BIN_DIR: ddpd-train, ddpd-worker and the CUDA tests NEED libtorch_cuda.so and
#     libc10_cuda.so, load NCCL, and every library resolves without LD_LIBRARY_PATH; ddpd-train
#     calls ProcessGroupNCCL's constructor and holds the FlashAttention-2 CUDA kernels.
# Usage: linkage_test.sh cpu|cuda BIN_DIR SOURCE_DIR
set -uo pipefail
mode=${1:?usage: linkage_test.sh cpu|cuda BIN_DIR SOURCE_DIR}
bin=$(cd "${2:?}" && pwd)
src=$(cd "${3:?}" && pwd)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cuda_libraries='lib(cuda|cudart|nccl|torch_cuda|c10_cuda|cublas|cublasLt|cudnn[a-z_]*|cupti|nvrtc|cusparse|cufft|curand|cusolver|nvJitLink|nvshmem|cufile)\.so'

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
# "name => path" for every library the loader maps, as ldd resolves them (no LD_LIBRARY_PATH).
closure() { env -u LD_LIBRARY_PATH ldd "$1" | awk '/=>/ {print $1, $3}'; }
executables() {
  for f in "$bin"/*; do
    [ -f "$f" ] && [ -x "$f" ] && head -c 4 "$f" | grep -q ELF && echo "$f"
  done
}

check_resolves() {  # executable
  local missing
  missing=$(env -u LD_LIBRARY_PATH ldd "$1" | grep 'not found')
  [ -z "$missing" ] || fail "$(basename "$1"): unresolved: $(tr -s ' \t\n' ' ' <<<"$missing")"
}

check_cpu() {
  local exe name direct loaded torch_cpu count=0
  local venv_torch
  venv_torch=$(readlink -f "$src/.venv/lib/python3"*/site-packages/torch/lib)
  for exe in $(executables); do
    name=$(basename "$exe")
    count=$((count + 1))
    check_resolves "$exe"
    direct=$(needed "$exe" | grep -E "$cuda_libraries")
    [ -z "$direct" ] || fail "$name NEEDS $(tr '\n' ' ' <<<"$direct")"
    loaded=$(closure "$exe")
    # Beyond libtorch_cpu's own two, nothing CUDA: no driver, NCCL, cuDNN, cuBLAS, torch_cuda.
    local extra
    extra=$(awk '{print $1}' <<<"$loaded" | grep -E "$cuda_libraries" | grep -vE '^lib(cudart|cupti)\.so')
    [ -z "$extra" ] || fail "$name loads $(tr '\n' ' ' <<<"$extra")"
    torch_cpu=$(awk '$1 == "libtorch_cpu.so" {print $2}' <<<"$loaded")
    if [ -n "$torch_cpu" ]; then
      [ "$(dirname "$(readlink -f "$torch_cpu")")" = "$venv_torch" ] ||
        fail "$name loads libtorch_cpu.so from $torch_cpu, not from .venv ($venv_torch)"
      echo "$name: NEEDED $(needed "$exe" | grep -E 'torch|c10' | tr '\n' ' ')-> $torch_cpu"
    else
      echo "$name: no LibTorch (NEEDED: $(needed "$exe" | tr '\n' ' '))"
    fi
  done
  [ "$count" -gt 0 ] || fail "no executables in $bin"
  [ -x "$bin/ddpd-worker" ] || fail "no ddpd-worker in $bin"
  echo "checked $count executables"
}

# The symbols both libtorch_cpu.so and Debian's protobuf/gRPC libraries define.
check_protobuf_apart() {
  local torch_cpu lib common
  torch_cpu=$(closure "$bin/ddpd-worker" | awk '$1 == "libtorch_cpu.so" {print $2}')
  [ -n "$torch_cpu" ] || { fail "ddpd-worker does not load libtorch_cpu.so"; return; }
  local libs=()
  for lib in $(closure "$bin/ddpd-worker" | awk '$1 ~ /^lib(protobuf|grpc|grpc\+\+|gpr|absl_)/ {print $2}'); do
    libs+=("$lib")
  done
  [ ${#libs[@]} -gt 0 ] || { fail "ddpd-worker loads no Debian protobuf/gRPC"; return; }
  common=$(comm -12 <(nm -D --defined-only "$torch_cpu" | awk '{print $3}' | sort -u) \
                    <(for lib in "${libs[@]}"; do nm -D --defined-only "$lib" | awk '{print $3}'; done | sort -u) |
           c++filt | grep -vE '^(void |bool |unsigned long |[a-z_:<>]+ )?std::')
  [ -z "$common" ] || fail "libtorch_cpu.so and Debian's protobuf/gRPC both define: $(head -n 5 <<<"$common")"
  echo "libtorch_cpu.so and ${#libs[@]} protobuf/gRPC libraries share no symbol but std:: templates"
}

check_cuda() {
  local exe name
  for name in ddpd-train ddpd-worker ddpd_cuda_core_tests ddpd_cuda_kernel_tests; do
    exe=$bin/$name
    [ -x "$exe" ] || { fail "no $name in $bin"; continue; }
    check_resolves "$exe"
    echo "$name: NEEDED $(needed "$exe" | grep -E "$cuda_libraries|torch|c10" | tr '\n' ' ')"
  done
  for name in ddpd-train ddpd-worker ddpd_cuda_core_tests; do
    exe=$bin/$name
    [ -x "$exe" ] || continue
    # Outputs are read whole before matching: `grep -q` ending a pipe early would fail it
    # under pipefail.
    local direct loaded
    direct=$(needed "$exe")
    loaded=$(closure "$exe")
    for lib in libtorch_cuda.so libc10_cuda.so; do
      grep -qx "$lib" <<<"$direct" || fail "$name does not NEED $lib"
    done
    grep -q '^libnccl\.so' <<<"$loaded" || fail "$name does not load NCCL"
  done
  exe=$bin/ddpd-train
  [ -x "$exe" ] || return
  echo "ddpd-train loads: $(closure "$exe" | grep -E "$cuda_libraries" | awk '{print $1 " (" $2 ")"}' | tr '\n' ' ')"
  local imports symbols kernels
  imports=$(nm -DC --undefined-only "$exe")
  symbols=$(nm -C "$exe")
  grep -q 'c10d::ProcessGroupNCCL::ProcessGroupNCCL(' <<<"$imports" ||
    fail "ddpd-train does not call ProcessGroupNCCL's constructor"
  # The FlashAttention-2 kernels' launch stubs (nvcc's __device_stub__ for each __global__
  # instantiation), and the autograd op that launches them.
  kernels=$(grep -E '__device_stub__.*ddpd7kernels4cuda.*(14forward|15backward)_kernel' <<<"$symbols" |
            grep -v '\[clone')
  [ -n "$kernels" ] || fail "ddpd-train holds no FlashAttention-2 CUDA kernel"
  grep -q 'ddpd::kernels::flash_attention_cuda(' <<<"$symbols" ||
    fail "ddpd-train holds no FlashAttention-2 CUDA op"
  echo "ddpd-train: ProcessGroupNCCL's constructor imported from libtorch_cuda.so;" \
    "$(wc -l <<<"$kernels") FlashAttention-2 kernel entry points"
}

case $mode in
  cpu) check_cpu; check_protobuf_apart ;;
  cuda) check_cuda ;;
  *) echo "usage: linkage_test.sh cpu|cuda BIN_DIR SOURCE_DIR"; exit 2 ;;
esac
[ "$failures" = 0 ] || { echo "$failures failure(s)"; exit 1; }
echo PASS
