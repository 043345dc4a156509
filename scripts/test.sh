#!/usr/bin/env bash
# Quick start, command 2: install dependencies, build, and run every test (CTest) in build/:
#  - the CPU binaries' tests;
#  - ddpd_torch's pytest suite (TorchBackend.Pytest), on the package that CTest's
#    TorchBackend.Install builds and installs into .venv first (docs/torch-backend.md);
#  - with nvcc, the CUDA build's too (linked, not run: no GPU needed): the tests labelled cuda,
#    which check what it links and run what needs no GPU (the others skip without one).
# Fails too when a ddpd process started by the tests outlives them (listed, then killed).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
bash scripts/setup.sh
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  bash scripts/build.sh cuda
else
  echo "test: no nvcc (the CUDA toolkit): the CUDA build not built, its tests not run" >&2
  bash scripts/build.sh
fi
echo "test: set-up and builds took $((SECONDS - start)) s"
cd build

# ddpd_processes: "PID STARTTIME" of every process whose executable (or, where /proc/PID/exe
# cannot be read, name) is one of the project's, and that carries this run's mark in its
# environment (inherited from ctest) or runs in another PID namespace (a compose container).
# The mark keeps other ddpd processes on this machine (a user's own cluster) out of it.
mark="ddpd-test-$$-$(date +%s%N)"
ddpd_processes() {
  local dir pid exe name stat own_pidns
  own_pidns=$(readlink /proc/self/ns/pid 2>/dev/null || true)
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    exe=$(readlink "$dir/exe" 2>/dev/null) || exe=$(cat "$dir/comm" 2>/dev/null) || continue
    name=${exe##*/}; name=${name% (deleted)}
    case $name in
      ddpd-coordinator | ddpd-coordinato | ddpd-worker | ddpctl | ddpd-train | ddpd-test-rank) ;;
      *) continue ;;
    esac
    if ! grep -qzxF "DDPD_TEST_RUN=$mark" "$dir/environ" 2>/dev/null &&
      [ "$(readlink "$dir/ns/pid" 2>/dev/null || true)" = "$own_pidns" ]; then
      continue
    fi
    stat=$(cat "$dir/stat" 2>/dev/null) || continue
    # shellcheck disable=SC2086
    set -- ${stat##*) }  # fields from the 3rd on: state, ..., starttime (tells pid reuse apart)
    [ "$1" != Z ] || continue  # dead, not yet reaped
    echo "$pid ${20}"
  done
  return 0
}

# shm_segments: the shared-memory transport's segments in /dev/shm (docs/shm-transport.md).
shm_segments() { find /dev/shm -maxdepth 1 -name 'ddpd-shm-*' 2>/dev/null | sort; }

before=$(ddpd_processes | sort)
segments_before=$(shm_segments)
status=0
DDPD_TEST_RUN=$mark ctest --output-on-failure -j "${TEST_JOBS:-2}" || status=$?

# Daemons stopped by the tests' own cleanup may take a moment to exit.
leaked=""
for _ in $(seq 20); do
  leaked=$(comm -13 <(echo "$before") <(ddpd_processes | sort))
  [ -n "$leaked" ] || break
  sleep 0.5
done
if [ -n "$leaked" ]; then
  echo "FAIL: ddpd processes started by the tests outlived them (killed now):" >&2
  while read -r pid _; do
    echo "  $pid: $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" >&2
    kill -9 "$pid" 2>/dev/null || true
  done <<<"$leaked"
  [ "$status" -ne 0 ] || status=1
fi
# No test may leave a shared-memory segment behind.
left_segments=$(comm -13 <(echo "$segments_before") <(shm_segments))
if [ -n "$left_segments" ]; then
  echo "FAIL: shared-memory segments left in /dev/shm by the tests (removed now):" >&2
  echo "$left_segments" | sed 's/^/  /' >&2
  echo "$left_segments" | xargs rm -f
  [ "$status" -ne 0 ] || status=1
fi
echo "test: everything took $((SECONDS - start)) s"
exit "$status"
