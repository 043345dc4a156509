#!/usr/bin/env bash
# Benchmark (not a test): where a step's time goes, ours beside PyTorch 2.11 DDP's, at 1 and 2
# ranks on bench_ddp.sh's config. Ours: the phases every step reports (result JSON; default
# flags, so 2 ranks run over shared memory). The peer: torch.profiler around the peer's own
# model and loop, DDP as an expert configures it (tests/bench/torch_ddp_profile.py). Prints each
# phase at N = 1 and 2 and its growth: what the second rank costs, phase by phase.
# Usage: tests/bench/bench_breakdown.sh [STEPS]   (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-12}
source tests/bench/bench_config.sh
ours() {
  if [ "$1" = 1 ]; then "$worker" "${common[@]}"
  else bash scripts/launch-local.sh "$1" -- "$worker" "${common[@]}"; fi | "$python" tests/bench/phase_figures.py
}
theirs() {
  "$python" tests/bench/torch_ddp_profile.py "$peer" "$1" $D $FF $L $H $V $CTX $BATCH "$steps" $BUCKET 2>/dev/null |
    grep -o 'forward_ms.*'
}
echo "config: d_model $D, d_ff $FF, layers $L, context $CTX, global batch $BATCH, $steps steps (2 warm-up), $(nproc) cores"
echo "peer: PyTorch $("$python" -c 'import torch; print(torch.__version__)') DDP (gloo, gradient_as_bucket_view, static_graph, bucket_cap_mb $BUCKET), torch.profiler, 1 thread per rank"
declare -A fig
for side in ours theirs; do
  for world in 1 2; do fig[$side$world]=$($side $world); echo "$side N=$world: ${fig[$side$world]}"; done
done
"$python" - "${fig[ours1]}" "${fig[ours2]}" "${fig[theirs1]}" "${fig[theirs2]}" <<'PY'
import sys
def parse(text): return {k[:-3]: float(v) for k, v in (f.split("=") for f in text.split())}
o1, o2, t1, t2 = map(parse, sys.argv[1:])
print(f"{'phase (ms, rank 0)':22} {'ours N=1':>9} {'ours N=2':>9} {'x':>6}   {'peer N=1':>9} {'peer N=2':>9} {'x':>6}")
for k in ("forward", "backward", "optimizer", "step"):
    print(f"{k:22} {o1[k]:9.1f} {o2[k]:9.1f} {o2[k]/o1[k]:6.2f}   {t1[k]:9.1f} {t2[k]:9.1f} {t2[k]/t1[k]:6.2f}")
print(f"{'comm (all-reduce)':22} {'':9} {o2['comm']:9.1f} {'':6}   {'':9} {t2['comm']:9.1f}")
print(f"{'exposed comm':22} {'':9} {o2['exposed']:9.1f} {'':6}   {'':9} {t2['backward'] - t1['backward'] / 2:9.1f}  (peer: backward at N=2 minus half the 1-process backward)")
print(f"{'zero_grad and other':22} {o1['other']:9.1f} {o2['other']:9.1f}")
print(f"scaling efficiency: ours {o1['step'] / (2 * o2['step']):.3f}, peer {t1['step'] / (2 * t2['step']):.3f}")
PY
