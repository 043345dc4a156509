# Helpers shared by the shell tests (tests/netns, tests/compose, tests/api); fail() may be defined
# after sourcing, before the first call.

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
