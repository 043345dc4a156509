#!/usr/bin/env bash
# Multi-host test in network namespaces: the project's own three test hosts on one machine.
#
#   coordinator host  C  10.R.0.1 ─┐
#   worker host       W0 10.R.0.2 ─┼─ bridge in its own namespace (tests/support/netns_hosts.sh)
#   worker host       W1 10.R.0.3 ─┘
#
# 1. A 2-rank DDP job rendezvouses across hosts: rank 0's TCPStore is reached at W0's own
#    address (a rank 0 that advertised 127.0.0.1 would fail here).
# 2. Partition: W1's link is cut mid-job. The job FAILS with the reason, rank 0 gives up within
#    the collective timeout, W0 is IDLE again (W1 LOST), and a new job runs on W0.
# 3. The link comes back: W1 registers again and a 2-rank job succeeds.
# Namespaces, links and daemons are removed on exit, also when a check fails or on INT/TERM/HUP;
# the daemons die with this shell even when it is SIGKILLed.
#
# Usage: multihost_test.sh BIN_DIR   (exit 0 pass, 1 fail, 77 skip: not root / no netns)
set -uo pipefail
source "$(dirname "$0")/../support/shell_helpers.sh"
bin=${1:?usage: multihost_test.sh BIN_DIR}
collective_timeout=8  # seconds; the job's --timeout
worker_timeout=3      # seconds; the coordinator's --worker-timeout

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"

source "$(dirname "$0")/../support/netns_hosts.sh"
work=$(mktemp -d /tmp/ddpd-netns-XXXXXX)
export DDPD_TOKEN="netns-$netns_tag"
sw=$netns_switch

cleanup() {
  trap '' INT TERM HUP  # a second signal must not cut the cleanup short
  netns_hosts_down
  finish_work "$work"
}
on_exit cleanup

netns_hosts_up c w0 w1 || skip "cannot create network namespaces here"
daemon() { netns_daemon "$@"; }
ctl() { on c "$bin/ddpctl" --coordinator "${ip_of[c]}:50051" "$@"; }
json_field() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
worker_state() { ctl workers | awk -v id="$1" '$1 == id {print $2}'; }
is_state() { [ "$(worker_state "$1")" = "$2" ]; }
job_state() { ctl show "$1" --json | json_field 'd["state"]'; }
has_state() { [ "$(job_state "$1")" = "$2" ]; }

daemon c "$work/coordinator.log" "$bin/ddpd-coordinator" --listen "${ip_of[c]}:50051" \
  --db "$work/ddpd.db" --metrics-port 0 --worker-timeout "$worker_timeout" --log-level info
for w in w0 w1; do
  daemon "$w" "$work/$w.log" "$bin/ddpd-worker" --log-level info serve \
    --coordinator "${ip_of[c]}:50051" --worker-id "$w" --advertise-host "${ip_of[$w]}" \
    --heartbeat 0.5
done
start=$(now)
both_idle() { is_state w0 IDLE && is_state w1 IDLE; }
wait_for 60 "both workers idle" both_idle
echo "up: coordinator and 2 workers registered across 3 hosts in $(elapsed "$start" "$(now)") s"

# 1. Rendezvous across hosts.
ddp=(ddp --world-size 2 --model tiny --batch 4 --context 16 --threads 1)
job=$(ctl submit "${ddp[@]}" --steps 4 | head -n1)
ctl watch "$job" >/dev/null || fail "cross-host job $job did not succeed: $(ctl show "$job")"
show=$(ctl show "$job" --json)
running=$(json_field '[t["reason"] for t in d["history"] if t["state"]=="RUNNING"][0]' <<<"$show")
echo "job $job SUCCEEDED; $running"
[[ "$running" == *"${ip_of[w0]}:"* || "$running" == *"${ip_of[w1]}:"* ]] ||
  fail "rendezvous is not at a worker host's address: $running"
[[ "$running" != *127.0.0.1* ]] || fail "rank 0 advertised loopback: $running"

# 2. Partition mid-job. Over Gloo, so the cut takes the data plane too: a worker cut off from
# the coordinator alone, whose rank still trains with its peers (over shared memory here), is
# DISCONNECTED and its job goes on (docs/protocols.md, "Worker loss").
job=$(ctl submit "${ddp[@]}" --steps 100000 --timeout "$collective_timeout" --transport gloo |
  head -n1)
stepping() { [ "$(ctl show "$job" --json | json_field 'len(d["rank_steps"])')" -gt 2 ]; }
wait_for 60 "job $job to report steps" stepping
ip -n "$sw" link set pw1 down   # W1 falls off the network
cut=$(now)
wait_for $(( worker_timeout + 30 )) "job $job to fail" has_state "$job" FAILED
failed_after=$(elapsed "$cut" "$(now)")
error=$(ctl show "$job" --json | json_field 'd.get("error","")')
echo "partition: job $job FAILED ${failed_after} s after the cut: $error"
[[ "$error" == *w1* ]] || fail "the failure does not name the lost worker: $error"
wait_for $(( collective_timeout + 30 )) "w0 to return to IDLE" is_state w0 IDLE
idle_after=$(elapsed "$cut" "$(now)")
echo "partition: w0 IDLE ${idle_after} s after the cut (collective timeout ${collective_timeout} s); w1 $(worker_state w1)"
[ "$(worker_state w1)" = LOST ] || fail "w1 should be LOST, is $(worker_state w1)"
/usr/bin/python3 -c "import sys; sys.exit(0 if $idle_after <= $collective_timeout + 10 else 1)" ||
  fail "w0 took ${idle_after} s, more than the collective timeout ${collective_timeout} s + 10"
grep -q "job=$job rank=.* failed" "$work/w0.log" || fail "w0's rank did not fail with a reason"
echo "partition: w0's rank failed with: $(grep -o "job=$job rank=.* failed.*" "$work/w0.log" | head -n1 | cut -c1-200)"
job=$(ctl submit ddp --world-size 1 --model tiny --batch 4 --context 16 --steps 3 | head -n1)
ctl watch "$job" >/dev/null || fail "job $job on the surviving worker failed"
echo "after the partition: 1-rank job $job SUCCEEDED on w0"

# 3. Heal: W1 re-registers and the pair trains again.
ip -n "$sw" link set pw1 up
wait_for 60 "w1 to register again" is_state w1 IDLE
job=$(ctl submit "${ddp[@]}" --steps 4 | head -n1)
ctl watch "$job" >/dev/null || fail "2-rank job $job after healing failed"
echo "healed: w1 IDLE again; 2-rank job $job SUCCEEDED"
echo PASS
