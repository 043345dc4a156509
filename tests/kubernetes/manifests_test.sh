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

# The coordinator restarts in place: a restarted one adopts the running jobs from the same --db,
# so the shipped manifest runs one replica, replaced with Recreate, its --db on the ReadWriteOnce
# claim the manifest declares.
"$python" - "$src/deploy/kubernetes/ddpd.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
deployment = next(d for d in docs if d["kind"] == "Deployment"
                  and d["metadata"]["name"] == "ddpd-coordinator")
spec = deployment["spec"]
assert spec["replicas"] == 1, spec["replicas"]
assert spec["strategy"] == {"type": "Recreate"}, spec["strategy"]
container = spec["template"]["spec"]["containers"][0]
db = container["command"][container["command"].index("--db") + 1]
mount = next(m for m in container["volumeMounts"] if db.startswith(m["mountPath"] + "/"))
volume = next(v for v in spec["template"]["spec"]["volumes"] if v["name"] == mount["name"])
claim = volume["persistentVolumeClaim"]["claimName"]
pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim"
           and d["metadata"]["name"] == claim)
assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"], pvc["spec"]["accessModes"]
print(f"coordinator: replicas 1, strategy Recreate, --db {db} on PersistentVolumeClaim {claim} "
      f"(ReadWriteOnce, {pvc['spec']['resources']['requests']['storage']})")
PY
# Broken copies of those facts are refused, each naming what is wrong.
broken() {  # name, sed script: a copy of the manifest under $work/NAME.yaml
  sed "$2" "$src/deploy/kubernetes/ddpd.yaml" >"$work/$1.yaml"
  if cmp -s "$src/deploy/kubernetes/ddpd.yaml" "$work/$1.yaml"; then
    echo "FAIL: sed '$2' changed nothing"; exit 1
  fi
}
broken two-coordinators 's/^  replicas: 1 .*/  replicas: 2/'
expect_refused "$work/two-coordinators.yaml" \
  "Deployment ddpd-coordinator: spec/replicas must be 1, not 2"
broken rolling 's/strategy: {type: Recreate}/strategy: {type: RollingUpdate}/'
expect_refused "$work/rolling.yaml" \
  "Deployment ddpd-coordinator: spec/strategy/type must be Recreate, not RollingUpdate"
broken no-strategy '/strategy: {type: Recreate}/d'
expect_refused "$work/no-strategy.yaml" \
  "spec/strategy/type must be Recreate, not RollingUpdate (the default)"
broken empty-dir 's/persistentVolumeClaim: {claimName: ddpd-db}/emptyDir: {}/'
expect_refused "$work/empty-dir.yaml" \
  "--db /var/lib/ddpd/ddpd.db is on volume db, which is no PersistentVolumeClaim"
broken off-volume 's|--db, /var/lib/ddpd/ddpd.db|--db, /tmp/ddpd.db|'
expect_refused "$work/off-volume.yaml" "container coordinator: --db /tmp/ddpd.db is on no volume"
broken no-db 's|, --db, /var/lib/ddpd/ddpd.db,|,|'
expect_refused "$work/no-db.yaml" "container coordinator: --db must be an absolute path"
broken shared-db 's/accessModes: \[ReadWriteOnce\]/accessModes: [ReadWriteMany]/'
expect_refused "$work/shared-db.yaml" \
  "ddpd-db: spec/accessModes must be ReadWriteOnce (or ReadWriteOncePod), not ReadWriteMany"
"$python" - "$src/deploy/kubernetes/ddpd.yaml" "$work/no-claim.yaml" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
kept = [d for d in docs if "kind: PersistentVolumeClaim\nmetadata:\n  name: ddpd-db\n" not in d]
assert len(kept) == len(docs) - 1
open(sys.argv[2], "w").write("\n---\n".join(kept))
PY
expect_refused "$work/no-claim.yaml" "volume db claims ddpd-db, not in these manifests"
echo "PASS"
