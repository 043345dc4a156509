#!/usr/bin/env bash
# Benchmark (not a test): the "ddpd" torch.distributed backend (torch_backend/, ddpd_torch)
# against Gloo, Open MPI and oneCCL on one host, in one run (docs/torch-backend.md, "Figures").
#  1. all-reduce (float32, SUM, in place) at world 2 and 4, the same sizes for every peer
#     (1 KiB to 256 MiB, powers of 4), each timed the same way (median of ROUNDS rounds of about
#     64 MiB of calls, after a checked call and two warm-up calls): algbw and busbw
#     (nccl-tests' busbw = algbw * 2(W-1)/W), and the ratios ddpd/gloo and ddpd/openmpi.
#     - ddpd and Gloo: torch_backend/bench/allreduce_busbw.py, alternating in the same ranks.
#     - Open MPI: Debian's (libopenmpi-dev, openmpi-bin), tests/bench/mpi_allreduce_bench.cpp
#       built with mpicxx, run by mpirun with ob1 and the shared-memory BTL (self,vader); the
#       collectives are coll/tuned's (its default priority and fixed decision rules); ranks
#       bound to cores by mpirun's default, or unbound with --oversubscribe past the cores.
#     - oneCCL: PyPI's 2021.17.2 CPU runtime (tests/bench/fetch_oneccl.sh), through its C++ API
#       (tests/bench/ccl_allreduce_bench.cpp: the PyTorch bindings stop at torch 2.8), libfabric's
#       shm provider (CCL_ATL_SHM=1), progress on the calling thread (CCL_WORKER_OFFLOAD=0: with a
#       worker thread per rank a 1 KiB all-reduce took 19 ms on 2 cores, each rank's two spinning
#       threads time-slicing). Where it cannot start, the run says why ("oneCCL: not run: ...").
#  2. PyTorch DDP's median step on bench_config.sh's model with "ddpd" and with "gloo"
#     (torch_backend/bench/ddp_step.py: the peer's model, seed and batches), alternating.
# World 4 on a host with fewer cores oversubscribes every peer alike.
# Placement is the same for every peer: with BIND=cores (the default) each rank is bound to one
# core while the cores suffice, which is mpirun's own default (ddpd and Gloo through
# allreduce_busbw.py --bind-cores and ddp_step.py's "bind", oneCCL through taskset); BIND=none
# binds none (mpirun --bind-to none). Unbound, two spinning ranks on 2 cores share one core part
# of the time: ddpd's 64 KiB all-reduce took 20 us bound and 20-60 us unbound, by run.
# Usage: tests/bench/bench_torch_backend.sh [DDP_STEPS]
#   env: WORLDS ("2 4"), PARTS ("allreduce ddp"), ROUNDS (5), SIZES (comma-separated bytes),
#        BIND (cores | none), ROWS_OUT (a file that keeps the raw "ROW world peer bytes seconds"
#        lines)
# Needs: .venv with ddpd_torch installed (.venv/bin/pip install --no-build-isolation
# ./torch_backend), and for the peers mpicxx/mpirun and pip's access to PyPI (oneCCL, once).
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-20}
worlds=${WORLDS:-2 4}
parts=${PARTS:-allreduce ddp}
rounds=${ROUNDS:-5}
sizes=${SIZES:-1024,4096,16384,65536,262144,1048576,4194304,16777216,67108864,268435456}
bind=${BIND:-cores}
case $bind in
  cores | none) ;;
  *) echo "BIND=$bind: expected cores or none" >&2; exit 2 ;;
esac
python=$PWD/.venv/bin/python
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
[ -x "$python" ] || { echo "no $python: run scripts/setup.sh (it creates .venv with PyTorch)" >&2; exit 1; }
"$python" -c "import ddpd_torch" 2>/dev/null || {
  echo "ddpd_torch is not installed: .venv/bin/pip install --no-build-isolation ./torch_backend" >&2
  exit 1
}
work=build/bench/torch_backend
mkdir -p "$work"
rows=${ROWS_OUT:-$work/rows.txt}
: >"$rows"
notes=()

build_mpi() {  # → the Open MPI driver's path, or a note
  command -v mpicxx >/dev/null && command -v mpirun >/dev/null ||
    { echo "not run: mpicxx/mpirun not found (apt-get install -y libopenmpi-dev openmpi-bin)"; return 1; }
  mpicxx -O2 -std=c++17 tests/bench/mpi_allreduce_bench.cpp -o "$work/mpi_allreduce_bench" ||
    { echo "not run: mpicxx could not build tests/bench/mpi_allreduce_bench.cpp"; return 1; }
}
build_ccl() {  # → the oneCCL driver, or the reason it cannot run
  local why dir=build/bench/oneccl
  why=$(tests/bench/fetch_oneccl.sh "$dir" 2>&1) || { echo "not run: $why"; return 1; }
  g++ -O2 -std=c++17 -I"$dir/include" -Itests/bench tests/bench/ccl_allreduce_bench.cpp \
    -L"$dir/lib" -l:libccl.so.1 -Wl,-rpath-link,"$PWD/$dir/lib" -o "$work/ccl_allreduce_bench" \
    2>"$work/ccl_build.log" || { echo "not run: the driver did not build: $(tail -n1 "$work/ccl_build.log")"; return 1; }
}

tag() { sed -n "s/^ROW /ROW $1 /p" | tee -a "$rows"; }

bound() { [ "$bind" = cores ] && (($1 <= cores)); }  # are world $1's ranks bound to cores?
run_ddpd_gloo() {
  local flags=()
  [ "$bind" = cores ] && flags=(--bind-cores)
  timeout 1200 "$python" torch_backend/bench/allreduce_busbw.py --world "$1" --sizes "$sizes" \
    --rounds "$rounds" --rows "${flags[@]}" | tag "$1"
}
run_mpi() {
  # Open MPI's own placement: one rank per core, bound, while the cores suffice. Oversubscribed
  # it must not bind, and it yields when idle; unbound at world 2 it was bimodal here (1 KiB in
  # 1 us, or in 4-8 ms, whole scheduler ticks, when both ranks shared a core).
  local placement=()
  (($1 > cores)) && placement=(--oversubscribe --bind-to none)
  bound "$1" || placement+=(--bind-to none)
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 1200 mpirun \
    --allow-run-as-root "${placement[@]}" -np "$1" \
    --mca pml ob1 --mca btl self,vader "$work/mpi_allreduce_bench" --sizes "$sizes" \
    --rounds "$rounds" | tag "$1"
}
run_ccl() {
  local dir=build/bench/oneccl kvs=$work/ccl_kvs.$$ pids=() rc=0
  rm -f "$kvs"
  local pin=()
  for ((r = 1; r < $1; r++)); do
    bound "$1" && pin=(taskset -c "$(core_of "$r")")
    "${pin[@]}" env "${ccl_env[@]}" CCL_LOCAL_RANK=$r RANK=$r CCL_LOCAL_SIZE="$1" WORLD_SIZE="$1" \
      timeout 1200 "$work/ccl_allreduce_bench" --kvs-file "$kvs" --sizes "$sizes" \
      --rounds "$rounds" >/dev/null 2>>"$work/ccl_run.log" &
    pids+=($!)
  done
  bound "$1" && pin=(taskset -c "$(core_of 0)")
  "${pin[@]}" env "${ccl_env[@]}" CCL_LOCAL_RANK=0 RANK=0 CCL_LOCAL_SIZE="$1" WORLD_SIZE="$1" \
    timeout 1200 "$work/ccl_allreduce_bench" --kvs-file "$kvs" --sizes "$sizes" \
    --rounds "$rounds" 2>>"$work/ccl_run.log" | tag "$1" || rc=1
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  rm -f "$kvs"
  return $rc
}
ccl_env=(LD_LIBRARY_PATH="$PWD/build/bench/oneccl/lib" FI_PROVIDER_PATH="$PWD/build/bench/oneccl/lib/prov"
         CCL_ATL_TRANSPORT=ofi CCL_ATL_SHM=1 CCL_WORKER_OFFLOAD=0 CCL_LOG_LEVEL=error)

# The cores this run may use, and the r-th of them (what allreduce_busbw.py binds rank r to).
cores=$("$python" -c 'import os; print(len(os.sched_getaffinity(0)))')
core_of() { "$python" -c 'import os, sys; print(sorted(os.sched_getaffinity(0))[int(sys.argv[1])])' "$1"; }
echo "host: $cores cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "placement (BIND=$bind): $([ "$bind" = cores ] && echo "every peer's ranks bound one per core up to $cores ranks, unbound past that" || echo "no peer bound")"
echo "$("$python" -c 'import torch, ddpd_torch; print("torch", torch.__version__, "(Gloo: its bundled one), ddpd_torch", ddpd_torch.__file__)')"
if [[ " $parts " == *" allreduce "* ]]; then
  mpi_note=$(build_mpi 2>&1) && mpi_ok=1 || mpi_ok=0
  ((mpi_ok)) && echo "Open MPI: $(mpirun --version | head -n1), pml ob1, btl self,vader" \
    "(vader's single copy: $(ompi_info --param btl vader --level 9 | sed -n 's/.*single_copy_mechanism" (current value: "\([a-z]*\)".*/\1/p')), coll tuned" ||
    { notes+=("Open MPI: $mpi_note"); echo "Open MPI: $mpi_note"; }
  ccl_note=$(build_ccl 2>&1) && ccl_ok=1 || ccl_ok=0
  ((ccl_ok)) && echo "oneCCL: $(cat build/bench/oneccl/VERSION) (PyPI oneccl-cpu), ${ccl_env[*]:2}" ||
    { notes+=("oneCCL: $ccl_note"); echo "oneCCL: $ccl_note"; }
  for world in $worlds; do
    ((world > $cores)) && echo "world $world on $cores cores: every peer is oversubscribed alike"
    run_ddpd_gloo "$world"
    if ((mpi_ok)); then run_mpi "$world" || echo "Open MPI: world $world failed"; fi
    if ((ccl_ok)); then
      run_ccl "$world" || { echo "oneCCL: world $world failed: $(grep -m1 -i error "$work/ccl_run.log")"; }
    fi
  done
  echo
  "$python" torch_backend/bench/busbw_table.py <"$rows"
fi
if [[ " $parts " == *" ddp "* ]]; then
  source tests/bench/bench_config.sh  # D FF L H V CTX BATCH BUCKET, peer (needs $steps)
  echo "DDP: d_model $D, d_ff $FF, $L layers, $H heads, vocab $V, context $CTX, global batch" \
    "$BATCH, bucket $BUCKET MB, $steps steps (median after 2), 1 thread per rank; runs alternate"
  for world in $worlds; do
    declare -A step=()
    for run in 1 2; do
      for backend in gloo ddpd; do
        ms=$(timeout 900 "$python" torch_backend/bench/ddp_step.py "$peer" "$backend" "$world" \
          $D $FF $L $H $V $CTX $BATCH "$steps" $BUCKET ${bind/#cores/bind} |
          sed -n 's/^DDP [a-z]* [0-9]* //p')
        step[$backend]="${step[$backend]:+${step[$backend]}, }$ms"
      done
    done
    echo "DDP world $world median step ms (run 1, run 2): gloo ${step[gloo]}; ddpd ${step[ddpd]}"
    unset step
  done
fi
for n in "${notes[@]}"; do echo "$n"; done
