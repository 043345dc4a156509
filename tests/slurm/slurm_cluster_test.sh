#!/usr/bin/env bash
# A real Slurm cluster on this machine, and ddpd's Slurm scripts run on it with sbatch.
#
#   ctl  SUBNET.1  slurmctld, munged ─┐
#   n1   SUBNET.2  slurmd             ─┼─ network namespaces (tests/support/netns_hosts.sh), each
#   n2   SUBNET.3  slurmd             ─┘  with its own host name (a UTS namespace)
#
# Debian's slurm-wlm (22.05) with this test's own munge key, config and state, all under a
# temporary directory: nothing of the machine's own Slurm or munge is used or changed.
# 1. Standalone: `sbatch deploy/slurm/ddpd-train.sbatch` on 2 nodes x 2 tasks. Every task reads
#    Slurm's variables as torchrun's: the test asserts ranks 0-3, two per host, all meeting at
#    n1 (the first host of the node list), and per-step losses equal to one process's run of the
#    same job (the losses are averaged over ranks, and the sample order does not depend on the
#    world size).
# 2. Daemon mode: `sbatch deploy/slurm/ddpd-daemon.sbatch` on 2 nodes: the coordinator on the batch
#    host, a worker daemon per node; the job SUCCEEDED on both workers with the same losses.
#
# Usage: slurm_cluster_test.sh BIN_DIR
# Exit 0 pass, 1 fail, 77 skip: not root, no network namespaces, or a Slurm daemon cannot start
# (the reason and the daemon's log are printed).
set -uo pipefail
source "$(dirname "$0")/../support/shell_helpers.sh"
bin=$(cd "${1:?usage: slurm_cluster_test.sh BIN_DIR}" && pwd)
deploy=$(cd "$(dirname "$0")/../../deploy/slurm" && pwd)
job_args="--model tiny --batch 8 --context 16 --steps 6 --threads 1 --strategy bucketed"

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "the cluster's hosts are network namespaces, which need root"
for tool in ip slurmctld slurmd sbatch sinfo munged; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/setup.sh installs slurm-wlm)"
done
source "$(dirname "$0")/../support/netns_hosts.sh"
work=$(mktemp -d /tmp/ddpd-slurm-XXXXXX)
chmod 755 "$work"  # slurmd and munged check the path to their files
cleanup() {
  trap '' INT TERM HUP
  netns_hosts_down
  finish_work "$work"
}
on_exit cleanup
netns_hosts_up ctl n1 n2 || skip "cannot create network namespaces here"

# munge: the test's own key and socket (the machine's munged, if any, is not involved).
mkdir -m 700 "$work/munge"
head -c 1024 /dev/urandom >"$work/munge/munge.key" && chmod 600 "$work/munge/munge.key"
socket=$work/munge/munge.socket
netns_daemon ctl "$work/munged.log" munged --foreground --force --socket="$socket" \
  --key-file="$work/munge/munge.key" --pid-file="$work/munge/munged.pid" \
  --seed-file="$work/munge/munged.seed" --log-file="$work/munge/munged.file.log"
wait_for_or_skip() {  # SECONDS WHAT LOG COMMAND...: like wait_for, but a daemon not up is a skip
  local deadline=$(( $(date +%s) + $1 )) what=$2 log=$3; shift 3
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "--- $log"; tail -n 15 "$log"
      skip "$what did not start (log above)"
    fi
    sleep 0.2
  done
}
wait_for_or_skip 15 munged "$work/munged.log" test -S "$socket"

# Slurm's configuration: no cgroup confinement, no accounting; the cgroup plugin slurmd loads in
# any case is told which hierarchy this machine mounts.
cgroup_plugin=cgroup/v1
[ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] && cgroup_plugin=cgroup/v2
echo "CgroupPlugin=$cgroup_plugin" >"$work/cgroup.conf"
cpus=$(nproc)
mkdir -p "$work/state" "$work/spool/n1" "$work/spool/n2"
cat >"$work/slurm.conf" <<CONF
ClusterName=ddpdtest
SlurmctldHost=ctl(${ip_of[ctl]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%n.pid
SlurmctldLogFile=$work/slurmctld.file.log
SlurmdLogFile=$work/slurmd-%n.file.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
KillWait=5
NodeName=n1 NodeAddr=${ip_of[n1]} CPUs=$cpus State=UNKNOWN
NodeName=n2 NodeAddr=${ip_of[n2]} CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$work/slurm.conf
# Each host's daemon runs under its own host name: slurmctld checks it is SlurmctldHost, slurmd
# finds its NodeName by it, and ranks advertise it.
netns_daemon ctl "$work/slurmctld.log" unshare --uts sh -c 'hostname ctl && exec slurmctld -D -i'
for n in n1 n2; do
  netns_daemon "$n" "$work/slurmd-$n.log" unshare --uts sh -c "hostname $n && exec slurmd -D"
done
nodes_idle() { [ "$(on ctl sinfo -h -o '%D %t' 2>/dev/null)" = "2 idle" ]; }
wait_for_or_skip 60 "slurmctld and 2 slurmd (nodes idle)" "$work/slurmd-n1.log" nodes_idle
echo "cluster up: $(on ctl sinfo -h -o '%P %D nodes %N %t') ($(slurmctld -V))"

json_losses() {  # FILE: the per-step losses of the first JSON result in FILE
  /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        d = json.loads(line)
        print(d["state"], " ".join(repr(s["loss"]) for s in d["steps"]))
        break' "$1"
}
same_losses() {  # A B: the loss lists agree within 1e-5 relative
  /usr/bin/python3 -c '
import sys
a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]
sys.exit(0 if len(a) == len(b) and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b)) else 1)' "$1" "$2"
}

# The reference: one process, the same job.
# shellcheck disable=SC2086
env -u RANK -u WORLD_SIZE "$bin/ddpd-worker" run ddp $job_args --json >"$work/reference.json" 2>&1 ||
  fail "the one-process reference run failed: $(tail -n 3 "$work/reference.json")"
reference=$(json_losses "$work/reference.json")
reference=${reference#SUCCEEDED }
echo "one process: losses $reference"

# sbatch_wait NAME SCRIPT SBATCH_ARGS...: submits from the controller's host and waits; stdout
# (the JSON result) goes to $work/NAME.out, stderr (every task's log) to $work/NAME.log, as the
# scripts' own #SBATCH lines do.
sbatch_wait() {
  local name=$1 script=$2; shift 2
  on ctl env DDPD_BIN="$bin" DDPD_JOB_ARGS="$job_args" DDPD_CHECKPOINTS="$work/checkpoints" \
    DDPD_STATE="$work/ddpd-state" sbatch --wait --chdir="$work" --output="$work/$name.out" \
    --error="$work/$name.log" "$@" "$script"
}

# 1. Standalone: 2 nodes x 2 tasks.
start=$(now)
sbatch_wait standalone "$deploy/ddpd-train.sbatch" --nodes=2 --ntasks-per-node=2 \
  --cpus-per-task=1 || fail "standalone sbatch job failed: $(tail -n 20 "$work/standalone.log")"
echo "standalone: sbatch --wait returned after $(elapsed "$start" "$(now)") s"
grep -E "rank=[0-9]+ world=" "$work/standalone.log" | sed 's/.*\] //' | sort
for r in 0 1 2 3; do
  host=n1; [ "$r" -ge 2 ] && host=n2  # srun's block distribution: tasks 0,1 on n1, 2,3 on n2
  grep -qE "rank=$r world=4 local_rank=$((r % 2)) host=$host rendezvous at n1:" \
    "$work/standalone.log" || fail "rank $r did not rendezvous as rank $r of 4 on $host at n1"
done
result=$(json_losses "$work/standalone.out")
echo "standalone: $result"
[ "${result%% *}" = SUCCEEDED ] || fail "standalone result: $result"
same_losses "${result#SUCCEEDED }" "$reference" ||
  fail "4 ranks on 2 nodes lost '${result#SUCCEEDED }', one process '$reference'"
bytes=$(grep -m1 '^{' "$work/standalone.out" | /usr/bin/python3 -c \
  'import json,sys; print(json.load(sys.stdin)["steps"][0]["gradient_sync_bytes"])')
[ "$bytes" -gt 0 ] || fail "no gradient bytes were synchronised"

# 2. Daemon mode: a coordinator on the batch host, one worker per node.
start=$(now)
sbatch_wait daemon "$deploy/ddpd-daemon.sbatch" --nodes=2 --ntasks-per-node=1 \
  --cpus-per-task=1 || fail "daemon-mode sbatch job failed: $(tail -n 20 "$work/daemon.log")"
echo "daemon mode: sbatch --wait returned after $(elapsed "$start" "$(now)") s"
grep -E "^\[.*(registered|placed on)" "$work/daemon.log" | sed 's/.*\] //'
for n in n1 n2; do
  grep -q "worker=slurm-[0-9]*-$n registered ($n:" "$work/daemon.log" ||
    fail "no worker daemon registered from $n"
done
result=$(json_losses "$work/daemon.out")
echo "daemon mode: $result"
[ "${result%% *}" = SUCCEEDED ] || fail "daemon-mode result: $result"
same_losses "${result#SUCCEEDED }" "$reference" ||
  fail "2 workers lost '${result#SUCCEEDED }', one process '$reference'"
[ -z "$(on ctl squeue -h)" ] || fail "jobs left in the queue: $(on ctl squeue -h)"
echo PASS
