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
# core/ is the training core; worker/ (ddpd-worker) the daemon above it. torch_backend/ (the
# "ddpd" torch.distributed backend) compiles core's shm transport: it may include core's
# src/shm/ and src/comm/ headers and nothing else of core (checked below), and nothing includes it.
allowed="proto>common  service>common  core>common core>kernels
worker>common worker>proto worker>service worker>core
coordinator>common coordinator>proto coordinator>service
client>common client>proto client>service
torch_backend>core"
sources=(common proto service kernels core worker coordinator client torch_backend)
# The only folders of core torch_backend/ may include from.
torch_backend_may_include="core/src/shm/ core/src/comm/"

files=$(git ls-files --cached --others --exclude-standard -- '*.h' '*.cuh' '*.hpp')
path_of() {  # the tracked header a quoted include names
  local include=$1
  case "$include" in
    ddpd/v1/*.pb.h) echo "proto/$include"; return 0 ;;
  esac
  grep -E "(^|/)${include//./\\.}$" <<<"$files" | head -n 1 || true
}

declare -A edges=()
private=()  # torch_backend's includes of core outside $torch_backend_may_include
for from in "${sources[@]}"; do
  [ -d "$from" ] || continue
  while IFS= read -r include; do
    path=$(path_of "$include")
    to=${path%%/*}
    [ -n "$to" ] && [ "$to" != "$from" ] || continue
    edges["$from>$to"]=$((${edges["$from>$to"]:-0} + 1))
    if [ "$from" = torch_backend ] && [ "$to" = core ]; then
      ok=""
      for prefix in $torch_backend_may_include; do [[ $path == "$prefix"* ]] && ok=1; done
      [ -n "$ok" ] || private+=("$path")
    fi
  done < <(git grep --untracked -h -o -E '^#include "[^"]+"' -- "$from" |
    sed -E 's/^#include "(.*)"/\1/')
done

status=0
for edge in $(printf '%s\n' "${!edges[@]}" | sort); do
  verdict=ok
  if ! grep -qw -- "$edge" <<<"$allowed"; then verdict="POINTS UP"; status=1; fi
  printf '%-12s -> %-12s %4d includes  %s\n' "${edge%%>*}" "${edge##*>}" "${edges[$edge]}" "$verdict"
done
for path in $(printf '%s\n' "${private[@]}" | sort -u); do
  echo "torch_backend includes $path: only $torch_backend_may_include of core  POINTS IN"
  status=1
done
exit $status
