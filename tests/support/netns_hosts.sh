# Test hosts in network namespaces on one machine, joined by a bridge in its own namespace (the
# "switch"), so the host's firewall and addresses are never involved (tests/netns, tests/slurm):
#
#   host A  SUBNET.1 ─┐
#   host B  SUBNET.2 ─┼─ bridge br0 in namespace $netns_switch
#   ...              ─┘
#
# Source after tests/support/shell_helpers.sh, then:
#   netns_hosts_up NAME...   creates one namespace per name, addresses in ip_of[NAME]; every
#                            host's /etc/hosts (through ip netns exec) names them all
#   on NAME CMD...           runs CMD on that host (in the foreground)
#   netns_daemon NAME LOG CMD...  starts CMD there in the background; its own pid in pids
#   netns_hosts_down         kills what still runs in the namespaces and removes them
# Every daemon runs as `ip netns exec NS setpriv --pdeathsig KILL CMD` started straight from the
# test's shell: ip and setpriv exec, so $! is the daemon's own pid, and the daemon gets SIGKILL
# when the shell dies, even by SIGKILL (CTest's timeout), which runs no trap.

netns_tag=$(( $$ % 100000 ))     # keeps names unique (and <= 15 chars) across parallel runs
netns_subnet="10.$(( 100 + $$ % 100 )).$(( $$ / 100 % 250 ))"
netns_switch="ddsw$netns_tag"
netns_names=()
declare -A ip_of=()
pids=()
pdeathsig=()
setpriv --pdeathsig KILL true 2>/dev/null && pdeathsig=(setpriv --pdeathsig KILL)

netns_of() { echo "dd$1$netns_tag"; }

# netns_hosts_up NAME...: returns 1 (after removing what it made) when namespaces cannot be made.
netns_hosts_up() {
  ip netns add "$netns_switch" 2>/dev/null || return 1
  ip -n "$netns_switch" link add br0 type bridge && ip -n "$netns_switch" link set br0 up &&
    ip -n "$netns_switch" link set lo up || fail "bridge"
  local h ns i=1 hosts_file
  for h in "$@"; do ip_of[$h]=$netns_subnet.$i; i=$((i + 1)); done
  hosts_file=$(printf '127.0.0.1 localhost\n'; for h in "$@"; do echo "${ip_of[$h]} $h"; done)
  for h in "$@"; do
    ns=$(netns_of "$h")
    netns_names+=("$ns")
    ip netns add "$ns" && ip -n "$ns" link set lo up &&
      ip link add "v$h$netns_tag" netns "$ns" type veth peer name "p$h" netns "$netns_switch" &&
      ip -n "$ns" addr add "${ip_of[$h]}/24" dev "v$h$netns_tag" &&
      ip -n "$ns" link set "v$h$netns_tag" up &&
      ip -n "$netns_switch" link set "p$h" master br0 && ip -n "$netns_switch" link set "p$h" up ||
      fail "host $h"
    # ip netns exec bind-mounts /etc/netns/NS/hosts over /etc/hosts for what runs there.
    mkdir -p "/etc/netns/$ns" && echo "$hosts_file" >"/etc/netns/$ns/hosts"
  done
}

on() { local h=$1; shift; ip netns exec "$(netns_of "$h")" "${pdeathsig[@]}" "$@"; }

# Not through on(): `on ... &` would fork a subshell, and $! would be the subshell's pid.
netns_daemon() {
  local h=$1 log=$2; shift 2
  ip netns exec "$(netns_of "$h")" "${pdeathsig[@]}" "$@" >"$log" 2>&1 &
  pids+=($!)
}

# del_netns NS: kills whatever still runs in NS (its /proc/PID/ns/net), then deletes it.
del_netns() {
  ip netns list 2>/dev/null | grep -q "^$1\( \|$\)" || return 0
  local left
  for _ in $(seq 50); do
    left=$(ip netns pids "$1" 2>/dev/null | tr '\n' ' ')
    [ -n "${left// }" ] || break
    # shellcheck disable=SC2086
    kill -9 $left 2>/dev/null; sleep 0.1
  done
  [ -z "${left// }" ] || echo "WARNING: processes left in namespace $1: $left" >&2
  ip netns del "$1" 2>/dev/null
  rm -rf "/etc/netns/$1"
}

netns_hosts_down() {
  stop_pids "${pids[@]}"
  wait 2>/dev/null
  local ns
  for ns in "${netns_names[@]}"; do del_netns "$ns"; done
  del_netns "$netns_switch"
}
