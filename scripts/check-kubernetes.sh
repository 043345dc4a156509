#!/usr/bin/env bash
# Validates Kubernetes manifests (default: deploy/kubernetes/*.yaml) against the Kubernetes API's
# JSON schemas and what a ddpd deployment needs (deploy/kubernetes/validate/validate.py). The
# schemas come with PyPI's kubernetes-validate in the checkout's .venv (requirements.txt,
# installed by scripts/setup.sh), so the check needs no network and no cluster.
# Usage: check-kubernetes.sh [--kubernetes-version X.Y.Z] [FILE...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$root/.venv/bin/python
if [ ! -x "$python" ]; then
  echo "check-kubernetes: $python is missing; run scripts/setup.sh first" >&2
  exit 1
fi
# No file named (at most the version option): the checked-in manifests.
case "$#:${1:-}" in
  0:* | 1:--kubernetes-version=* | 2:--kubernetes-version)
    set -- "$@" "$root"/deploy/kubernetes/*.yaml ;;
esac
exec "$python" "$root/deploy/kubernetes/validate/validate.py" "$@"
