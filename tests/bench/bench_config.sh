# Sourced by bench_ddp.sh and bench_breakdown.sh: the one bench config (d_model 256, 4 layers,
# context 128, global batch 8, bucket 25 MB), the binaries they compare, and their checks.
# Needs `steps` set by the caller.
D=256 FF=1024 L=4 H=4 V=10000 CTX=128 BATCH=8 BUCKET=25
peer=../shared/peers/torch_ddp_ref.py
worker=build/bin/ddpd-worker
python=$PWD/.venv/bin/python  # PyTorch 2.11 for the peer, installed by scripts/setup.sh
export OPENBLAS_NUM_THREADS=1
[ -x "$python" ] || { echo "no $python: run scripts/setup.sh (it creates .venv with PyTorch)" >&2; exit 1; }
[ -x "$worker" ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
[ -f "$peer" ] || { echo "peer script not found at $peer" >&2; exit 1; }
common=(run ddp --d-model $D --d-ff $FF --layers $L --heads $H --vocab $V --context $CTX
        --batch $BATCH --steps "$steps" --warmup-steps 2 --threads 1 --spread-every 0 --json)
