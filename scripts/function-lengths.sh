#!/usr/bin/env bash
# Lists the functions of the project's non-test C++ and CUDA sources longer than a limit (default
# 80 lines, the house rule), longest first, as "LINES FILE:LINE NAME"; exits 1 when there is one.
# Lengths are ctags' (Universal Ctags: from the line of the name to the closing brace).
#   scripts/function-lengths.sh [LIMIT]
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-80}
command -v ctags >/dev/null || { echo "function-lengths: needs universal-ctags" >&2; exit 2; }
files=$(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.cc' '*.cu' '*.h' \
  ':!tests' ':!build*')
# shellcheck disable=SC2086
long=$(ctags --languages=C++,CUDA --map-C++=+.cu --kinds-C++=f --kinds-CUDA=f --fields=+ne -o - \
  $files 2>/dev/null |
  awk -F'\t' -v limit="$limit" '{
      line = end = 0
      for (i = 4; i <= NF; ++i) {
        if ($i ~ /^line:/) line = substr($i, 6)
        if ($i ~ /^end:/) end = substr($i, 5)
      }
      if (line && end && end - line + 1 > limit) printf "%d %s:%d %s\n", end - line + 1, $2, line, $1
    }' | sort -rn)
[ -z "$long" ] && { echo "function-lengths: no function over $limit lines"; exit 0; }
echo "$long"
echo "function-lengths: $(wc -l <<<"$long") functions over $limit lines" >&2
exit 1
