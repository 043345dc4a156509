#!/usr/bin/env bash
# Prints which top-level folder includes headers of which other folder (the layering of
# docs/architecture.md), with a count of #include lines, and fails when an arrow points up.
#   scripts/include-graph.sh [REPO]      (default: this checkout; works on any revision's tree)
# A quoted include resolves to the tracked file whose path ends with it; generated API headers
# (ddpd/v1/*.pb.h) belong to proto/. Includes within one folder are not edges.
set -euo pipefail
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$repo"

# Allowed arrows, from the folder that includes to the folder it may include.
# worker/daemon (ddpd-worker) is a node of its own: the daemon above the training core.
allowed="proto>common  service>common  worker>common worker>kernels
worker/daemon>common worker/daemon>proto worker/daemon>service worker/daemon>worker
coordinator>common coordinator>proto coordinator>service
client>common client>proto client>service"
sources=(common proto service kernels worker worker/daemon coordinator client)

files=$(git ls-files --cached --others --exclude-standard -- '*.h' '*.cuh' '*.hpp')
owner_of() {  # folder that holds the header a quoted include names
  local include=$1
  case "$include" in
    ddpd/v1/*.pb.h) echo proto; return 0 ;;
  esac
  local match
  match=$(grep -E "(^|/)${include//./\\.}$" <<<"$files" | head -n 1 || true)
  case "$match" in
    worker/daemon/*) echo worker/daemon ;;
    ?*) echo "${match%%/*}" ;;
  esac
}

declare -A edges=()
for from in "${sources[@]}"; do
  [ -d "$from" ] || continue
  exclude=()
  if [ "$from" = worker ]; then exclude=(':!worker/daemon'); fi
  while IFS= read -r include; do
    to=$(owner_of "$include")
    [ -n "$to" ] && [ "$to" != "$from" ] || continue
    edges["$from>$to"]=$((${edges["$from>$to"]:-0} + 1))
  done < <(git grep --untracked -h -o -E '^#include "[^"]+"' -- "$from" "${exclude[@]}" |
    sed -E 's/^#include "(.*)"/\1/')
done

status=0
for edge in $(printf '%s\n' "${!edges[@]}" | sort); do
  verdict=ok
  if ! grep -qw -- "$edge" <<<"$allowed"; then verdict="POINTS UP"; status=1; fi
  printf '%-12s -> %-12s %4d includes  %s\n' "${edge%%>*}" "${edge##*>}" "${edges[$edge]}" "$verdict"
done
exit $status
