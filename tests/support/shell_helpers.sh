# Helpers shared by the shell tests (tests/netns, tests/compose); source after defining fail().

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
