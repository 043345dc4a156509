#!/usr/bin/env bash
# Benchmark (not a test): the shm all-reduce of several builds of ddpd_torch in one run, beside
# Gloo and Open MPI (docs/torch-backend.md, "Figures": issue 63's one-phase small all-reduce and
# blocking calls on the caller's thread). The timing loop is tests/bench/bench_torch_backend.sh's
# (float32 SUM in place; per size a checked call, two warm-ups, the median of ROUNDS rounds of
# about 64 MiB or 0.25 s of calls): torch_backend/bench/allreduce_busbw.py for ddpd and Gloo
# (torch.distributed's blocking all_reduce), tests/bench/mpi_allreduce_bench.cpp under mpirun
# (ob1, self,vader, bound to cores up to their count) for Open MPI. Each build is ddpd_torch
# installed with `pip install --no-build-isolation --no-deps --target DIR ./torch_backend` from
# the sources to compare. PASSES passes each run every build, then Open MPI, in turn; a figure is
# the median of its passes' medians (this host's load moves between passes: one pass is noise).
# Usage: BUILDS="before=DIR after=DIR ..." tests/bench/bench_shm_one_phase.sh
#   env: WORLD (2), ROUNDS (5), PASSES (5), SIZES (comma-separated bytes, 4 KiB..16 MiB),
#        LOCK (a file each pass holds with flock: /tmp/ddpd-build.lock keeps builds off the
#        cores for a pass at a time, not for the whole run)
# The table's ratios: each build's busbw over Open MPI's, and the last build's over the first's.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${BUILDS:?name=dir pairs, the baseline first}"
world=${WORLD:-2}
rounds=${ROUNDS:-5}
passes=${PASSES:-5}
sizes=${SIZES:-4096,16384,65536,262144,524288,1048576,2097152,4194304,16777216}
python=$PWD/.venv/bin/python
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
work=build/bench/shm_one_phase
mkdir -p "$work"
rows=$work/rows.txt
: >"$rows"
mpicxx -O2 -std=c++17 tests/bench/mpi_allreduce_bench.cpp -o "$work/mpi_allreduce_bench"
# As bench_torch_backend.sh: bound to cores while they suffice, else oversubscribed and unbound.
placement=()
((world > $(nproc --all))) && placement=(--oversubscribe --bind-to none)
echo "host: $(nproc --all) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "Open MPI: $(mpirun --version | head -n1), pml ob1, btl self,vader, ${placement[*]:-bound to cores}"
for pass in $(seq "$passes"); do
  [ -n "${LOCK:-}" ] && { exec 8>"$LOCK"; flock 8; }
  for build in $BUILDS; do
    name=${build%%=*}
    PYTHONPATH=${build#*=} timeout 600 "$python" torch_backend/bench/allreduce_busbw.py \
      --world "$world" --sizes "$sizes" --rounds "$rounds" --rows |
      sed -n "s/^ROW ddpd /ROW $pass ddpd-$name /p; s/^ROW gloo /ROW $pass gloo /p" >>"$rows"
  done
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 600 mpirun --allow-run-as-root \
    "${placement[@]}" -np "$world" --mca pml ob1 --mca btl self,vader \
    "$work/mpi_allreduce_bench" --sizes "$sizes" --rounds "$rounds" |
    sed -n "s/^ROW openmpi /ROW $pass openmpi /p" >>"$rows"
  echo "pass $pass done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  [ -n "${LOCK:-}" ] && exec 8>&-
done
"$python" - "$world" "$rows" $BUILDS <<'PY'
import statistics, sys
from collections import defaultdict
world, rows, builds = int(sys.argv[1]), sys.argv[2], [b.split("=")[0] for b in sys.argv[3:]]
t = defaultdict(lambda: defaultdict(list))  # bytes -> peer -> seconds, one per pass
for line in open(rows):
    _, _, peer, nbytes, seconds = line.split()
    t[int(nbytes)][peer].append(float(seconds))
factor = 2 * (world - 1) / world
def text(n): return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
peers = [f"ddpd-{b}" for b in builds] + ["gloo", "openmpi"]
print(f"world {world}: busbw GB/s (us per call), median of passes")
print("| size | " + " | ".join(peers) + " | " +
      " | ".join(f"{b}/Open MPI" for b in builds) + f" | {builds[-1]}/{builds[0]} |")
print("| ---: |" + " ---: |" * (2 * len(builds) + 3))
for n in sorted(t):
    m = {p: statistics.median(v) for p, v in t[n].items()}
    cells = [f"{n / m[p] * factor / 1e9:.2f} ({m[p] * 1e6:.0f})" if p in m else "–" for p in peers]
    mpi = m.get("openmpi")
    ratios = [f"{mpi / m[f'ddpd-{b}']:.2f}x" if mpi else "–" for b in builds]
    last = f"{m[f'ddpd-{builds[0]}'] / m[f'ddpd-{builds[-1]}']:.2f}x"
    print(f"| {text(n)} | " + " | ".join(cells + ratios + [last]) + " |")
PY
