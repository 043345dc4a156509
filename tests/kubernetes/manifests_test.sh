#!/usr/bin/env bash
# The Kubernetes manifests against the Kubernetes API's JSON schemas and ddpd's requirements
# (deploy/kubernetes/validate/validate.py, kubernetes-validate in the checkout's .venv): the real
# manifests pass, and broken copies are refused naming the field (a validator that accepted
# anything would pass the first half alone).
# Usage: manifests_test.sh SOURCE_DIR
set -euo pipefail
src=$1
check=$src/scripts/check-kubernetes.sh
python=$src/.venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bash "$check" "$src"/deploy/kubernetes/*.yaml

expect_refused() {  # file, text the refusal must contain
  local out
  if out=$(bash "$check" "$1" 2>&1); then
    echo "FAIL: $1 was accepted"; exit 1
  fi
  grep -qF -- "$2" <<<"$out" || { echo "FAIL: refusal of $1 does not say '$2':"; echo "$out"; exit 1; }
  echo "refused as expected: $(grep -F -- "$2" <<<"$out" | head -n1)"
}
# A schema error: replicas must be an integer.
sed 's/  replicas: 4/  replicas: four/' "$src/deploy/kubernetes/ddpd.yaml" >"$work/replicas.yaml"
expect_refused "$work/replicas.yaml" "data/spec/replicas must be an integer"
# A required field missing: a Service port without its port number.
sed 's/    - {name: metrics, port: 9401}/    - {name: metrics}/' "$src/deploy/kubernetes/ddpd.yaml" \
  >"$work/port.yaml"
expect_refused "$work/port.yaml" "data/spec/ports/0 must have required property port"
# ddpd's own requirement: every container has a liveness probe.
"$python" - "$src/deploy/kubernetes/ddpd.yaml" "$work/probe.yaml" <<'PY'
import sys
text = open(sys.argv[1]).read()
start = text.index("          livenessProbe:\n            httpGet")
end = text.index("          # Requests size a rank")
open(sys.argv[2], "w").write(text[:start] + text[end:])
PY
expect_refused "$work/probe.yaml" "container worker: no livenessProbe"
# Strict schemas: a misspelt field, which the API server would drop, is refused by name.
sed 's/^  replicas: 4/  replica: 4/' "$src/deploy/kubernetes/ddpd.yaml" >"$work/unknown.yaml"
expect_refused "$work/unknown.yaml" "data/spec/replica is an unknown field"
echo "PASS"
