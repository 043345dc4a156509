#!/usr/bin/env bash
# One command from a clean clone to the compose stack running a job:
#   bash deploy/compose-up.sh [WORKERS (2)]
# Installs and builds (scripts/setup.sh, scripts/build.sh), starts dockerd if none answers,
# builds the images (deploy/docker/build-images.sh), brings up coordinator + WORKERS workers +
# Prometheus (project "ddpd"), and runs a DDP job across the workers. The stack stays up:
#   export DDPD_TOKEN=$(cat deploy/.token); build/bin/ddpctl list
#   docker-compose -f deploy/docker-compose.yml -p ddpd down      # (-v also drops the history)
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${1:-2}
bash scripts/setup.sh
bash scripts/build.sh
if ! docker info >/dev/null 2>&1; then
  echo "starting dockerd (log: /tmp/ddpd-dockerd.log)"
  dockerd >/tmp/ddpd-dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
fi
[ -s deploy/.token ] || od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >deploy/.token
export DDPD_TOKEN=$(cat deploy/.token)
start=$(date +%s.%N)
deploy/docker/build-images.sh
docker-compose -f deploy/docker-compose.yml -p ddpd up -d --scale worker="$workers"
until [ "$(build/bin/ddpctl workers 2>/dev/null | grep -c ' IDLE ')" -ge "$workers" ]; do sleep 0.5; done
echo "stack up in $(/usr/bin/python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s: \
coordinator 127.0.0.1:50051 (/metrics 9400), $workers workers (9401+), Prometheus 127.0.0.1:9090"
build/bin/ddpctl submit ddp --world-size "$workers" --model tiny --steps 60 --lr 3e-3 \
  --data-text /usr/share/common-licenses/GPL-3 --watch
