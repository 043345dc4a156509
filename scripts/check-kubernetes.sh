#!/usr/bin/env bash
# Validates Kubernetes manifests (default: deploy/kubernetes/*.yaml) against the Kubernetes API's
# JSON schemas and what a ddpd deployment needs (deploy/kubernetes/validate/validate.mjs).
# Installs the validator's pinned npm packages on first use (node and npm: scripts/setup.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/deploy/kubernetes/validate
if [ ! -d "$dir/node_modules/kubernetes-models" ]; then
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
[ $# -gt 0 ] || set -- "$root"/deploy/kubernetes/*.yaml
exec node "$dir/validate.mjs" "$@"
