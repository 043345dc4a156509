# Helpers shared by the shell tests (tests/netns, tests/compose, tests/api, tests/cuda); fail() may be defined
# after sourcing, before the first call.

# fail MESSAGE: marks the run failed and exits 1 (a test may define its own, after sourcing).
fail() { echo "FAIL: $*"; failed=1; exit 1; }

now() { date +%s.%N; }
elapsed() { /usr/bin/python3 -c "print(f'{$2 - $1:.1f}')"; }  # seconds between two now()s

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds; fail()s at the deadline.
wait_for() {
  local deadline=$(( $(date +%s) + $1 )) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "timed out waiting for $what"
    sleep 0.2
  done
}

# free_port: a TCP port free on 127.0.0.1 now (bound to port 0, then released).
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# port_open PORT: whether something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# stop_pids PID...: TERM, up to 5 s to exit, then KILL; reaps them (they are this shell's children).
stop_pids() {
  [ $# -gt 0 ] || return 0
  kill "$@" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$@" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$@" 2>/dev/null
  wait "$@" 2>/dev/null
  return 0
}

# on_exit CLEANUP: CLEANUP runs on every exit; INT, TERM and HUP mark the run failed and exit
# with 128 + the signal, so CLEANUP runs once, from the EXIT trap.
on_exit() {
  trap "$1" EXIT
  trap 'failed=1; exit 130' INT
  trap 'failed=1; exit 143' TERM
  trap 'failed=1; exit 129' HUP
}

# finish_work DIR: a failed run keeps DIR and prints the tail of each log in it; else removes it.
finish_work() {
  if [ "${failed:-0}" = 1 ]; then
    echo "logs kept in $1"
    for f in "$1"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done
  else
    rm -rf "$1"
  fi
  return 0
}

# ensure_dockerd LOG: when no Docker engine answers, starts dockerd (as root) with its output in
# LOG and waits up to 30 s for it; sets started_dockerd to its pid (empty when one already ran).
# Calls skip() (which the test defines) when no engine can be had.
ensure_dockerd() {
  started_dockerd=""
  docker info >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null || skip "no Docker engine (dockerd) installed"
  [ "$(id -u)" = 0 ] || skip "no Docker engine answers and starting dockerd needs root"
  dockerd >"$1" 2>&1 &
  started_dockerd=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { tail -n 5 "$1"; skip "dockerd did not start here"; }
}

# stop_started_dockerd: stops the dockerd that ensure_dockerd started, if any (up to 30 s).
stop_started_dockerd() {
  [ -n "${started_dockerd:-}" ] || return 0
  kill "$started_dockerd" 2>/dev/null
  for _ in $(seq 300); do kill -0 "$started_dockerd" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$started_dockerd" 2>/dev/null
  wait "$started_dockerd" 2>/dev/null
  return 0
}
