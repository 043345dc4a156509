#!/usr/bin/env bash
# GPU benchmark (not a test), for a machine with a CUDA GPU, after scripts/device-build.sh:
#  1. the CUDA tests (kernels against a host reference; the core's CUDA path);
#  2. attention forward+backward time and peak memory against sequence length and head dim:
#     ddpd naive vs ddpd flash (CUDA kernels) vs PyTorch SDPA and PyTorch naive on the same GPU;
#  3. model step time on one GPU for the presets: ddpd-train (naive and flash attention, fp32
#     and bf16) beside the peer's model in plain PyTorch on the same GPU.
# The PyTorch peers run on $PYTHON when set; else on the checkout's .venv/bin/python
# (scripts/setup.sh) when there is one; else on python3 (a GPU machine's system Python, which
# holds its CUDA PyTorch, as for scripts/device-build.sh).
# Usage: [PYTHON=...] tests/bench/bench_gpu.sh [BUILD_DIR (build-cuda)] [OUT_DIR (.)]
set -uo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build-cuda}
out=${2:-.}
if [ -n "${PYTHON:-}" ]; then python=$PYTHON
elif [ -x .venv/bin/python ]; then python=$PWD/.venv/bin/python
else python=python3; fi
command -v "$python" >/dev/null ||
  { echo "no Python at $python: set PYTHON, or run scripts/setup.sh (it creates .venv)" >&2; exit 1; }
peer=${DDPD_PEER:-../shared/peers/torch_ddp_ref.py}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
echo "peer: $python, PyTorch $("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -n1)" |
  tee "$out/peer.txt"

echo "== CUDA tests"
(cd "$dir" && ctest -R "Cuda|FlashCuda" --output-on-failure) 2>&1 | tee "$out/cuda_tests.txt" | tail -20

echo "== attention (batch 4, 16 heads, causal, fwd+bwd)"
for dtype in fp32 bf16; do
  "$dir/bin/ddpd-bench-attention" --device cuda --dtype "$dtype" --batch 4 --heads 16 \
    --head-dims 64,128 --max-seq 16384 --json > "$out/attention_ddpd_$dtype.jsonl"
  "$python" tests/bench/attention_sdpa_ref.py --dtype "$dtype" --batch 4 --heads 16 \
    --head-dims 64,128 --max-seq 16384 > "$out/attention_torch_$dtype.jsonl"
  "$python" - "$out/attention_ddpd_$dtype.jsonl" "$out/attention_torch_$dtype.jsonl" <<'PY'
import json, sys
ours = {(r["seq"], r["head_dim"]): r for r in map(json.loads, open(sys.argv[1]))}
theirs = {(r["seq"], r["head_dim"]): r for r in map(json.loads, open(sys.argv[2]))}
f = lambda x, k: "OOM" if "oom" in x else f"{x[k]:.2f}"
print(f"{'seq':>6} {'d':>4} | {'naive ms':>9} {'flash ms':>9} {'sdpa ms':>9} {'flash/sdpa':>10} "
      f"| {'naive MB':>9} {'flash MB':>9} {'sdpa MB':>9} {'torch naive ms':>14}")
for key in sorted(ours):
    o, t = ours[key], theirs.get(key, {"sdpa": {"oom": True}, "torch_naive": {"oom": True}})
    ratio = ("-" if "oom" in o["flash"] or "oom" in t["sdpa"]
             else f"{o['flash']['ms'] / t['sdpa']['ms']:.2f}")
    print(f"{key[0]:>6} {key[1]:>4} | {f(o['naive'],'ms'):>9} {f(o['flash'],'ms'):>9} "
          f"{f(t['sdpa'],'ms'):>9} {ratio:>10} | {f(o['naive'],'extra_mb'):>9} "
          f"{f(o['flash'],'extra_mb'):>9} {f(t['sdpa'],'extra_mb'):>9} {f(t['torch_naive'],'ms'):>14}")
PY
done 2>&1 | tee "$out/attention.txt"

echo "== model step time, one GPU (context 1024, batch 8, 20 steps, 5 warm-up)"
printf "%-8s %-6s %-6s %10s %10s %10s %10s\n" preset prec attn "ddpd ms" "peer ms" ratio "ddpd MB"
for preset in small medium; do
  case $preset in
    small) shape="768 3072 12 12" ;;
    medium) shape="1024 4096 24 16" ;;
  esac
  for precision in fp32 bf16; do
    peer_out=$("$python" tests/bench/step_ref_cuda.py "$peer" $shape 10000 1024 8 20 5 \
               $([ $precision = bf16 ] && echo bf16) 2>&1 | tail -1)
    peer_ms=$(sed -n 's/.*median_step_ms=\([0-9.]*\).*/\1/p' <<<"$peer_out")
    for attention in naive flash; do
      json=$("$dir/bin/ddpd-train" --model $preset --context 1024 --batch 8 --steps 20 \
             --warmup-steps 5 --spread-every 0 --device cuda --precision $precision \
             --attention $attention 2>&1 | tail -1)
      read -r ms mb < <("$python" -c '
import json, sys
try:
    r = json.loads(sys.argv[1])
    print(r["summary"]["median_step_seconds"] * 1e3, r["memory"]["after_step"]["peak_bytes"] / 2**20)
except Exception:
    print("FAILED -")' "$json")
      ratio=$("$python" -c "print(f'{$ms/$peer_ms:.3f}')" 2>/dev/null || echo -)
      printf "%-8s %-6s %-6s %10s %10s %10s %10s\n" $preset $precision $attention "$ms" "${peer_ms:-?}" "$ratio" "$mb"
    done
    echo "   peer: $peer_out"
  done
done 2>&1 | tee "$out/step.txt"
