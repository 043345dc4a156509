#!/usr/bin/env bash
# Benchmark (not a test): how well `ddpctl whatif` predicts. One base job (bucketed 25 MB, 2
# ranks, the bench config of bench_ddp.sh with a global batch of 12) is measured through
# `ddpctl local`; 18 configurations, its own among them, are predicted from it and then run for
# real: every strategy whatif models, bucket sizes 1 to 1000 MB, 1 to 3 ranks, shm and gloo
# (gloo's link from comm jobs at 2 and 3 ranks), ZeRO-1 on and off, accumulation. Prints
# predicted, measured and the error of each, the median and worst error, and the bucket
# advisor's (`plan bucket --job`, the same replay) at 1, 10, 100 and 1000 MB (docs/whatif.md).
# Usage: tests/bench/bench_whatif.sh [STEPS] [OUTDIR]   (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-12}
out=${2:-$(mktemp -d /tmp/ddpd-whatif.XXXXXX)}
python=$PWD/.venv/bin/python
[ -x "$python" ] || python=python3
[ -x build/bin/ddpctl ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
export OPENBLAS_NUM_THREADS=1
echo "host: $(nproc) cores; results under $out"
exec "$python" tests/bench/whatif_validate.py build/bin/ddpctl "$steps" "$out"
