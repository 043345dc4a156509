#!/usr/bin/env bash
# Benchmark (not a test): a 2-rank bucketed job (tiny model) through control-plane outages of
# 1, 5 and 30 s, on one host (docs/performance.md, "Control plane outages"):
#   coordinator  the coordinator SIGKILLed mid-job, a new one started on the same --db after the
#                outage; the job is adopted (the default)
#   link         worker 1's link to the coordinator cut for the outage through a loopback proxy
#                (tests/bench/tcp_proxy.py; worker 0 and the data plane keep theirs)
#   no-adopt     today's path, for comparison: the coordinator killed as above, the new one with
#                --no-adopt, the job submitted with --checkpoint-dir, --checkpoint-every 20 and
#                --max-restarts 1, so it restarts from its checkpoint
# Each group has its own coordinator, --db and two worker daemons (--heartbeat 0.5, --log-level
# info), a probe job of 300 steps, then one job per outage: 50 steps before the fault, then 1.5 x
# the probe's rate x (the outage + 8 s), so it trains past the return whatever the host's load
# (a job whose ranks finish during the outage is not a row: it is run again with twice the steps).
# Columns:
#   trained twice  steps trained twice: from the first step of attempt 1 to the highest step
#                  attempt 0 trained (its stored reports, those seen before the fault, and the
#                  step its daemons say it was cancelled at); 0 with one attempt
#   rank processes started again  the daemons' "job=J rank=R runs in process" lines, less the
#                  world size
#   reports lost   world x steps less the distinct (rank, step) stored, once the job ended
#   final (attempts)  the job's state and attempts
#   last registered again s  from the return (the new coordinator's start, or the link's
#                  restore) to the last daemon's registration again (its log's "registered with")
#   first report s  from the return to the first new step report stored (`show --json` polled
#                  every 0.15 s; for `link`, a report of the cut worker's rank); an upper bound:
#                  when the poll that saw it answered
#   first report after registration s  the two above, subtracted
# Goals: 0 steps trained twice, 0 rank processes started again, 0 reports lost, the first report
# at most 1 s after the last daemon registers again.
# OUTAGES="1 5" (or any list of seconds) and PATHS="coordinator link no-adopt" (any of them)
# choose the rows; KEEP=1 keeps the daemons' logs. Needs jq and python3.
# Usage: [OUTAGES=...] [PATHS=...] tests/bench/bench_control_plane.sh   (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
for b in ddpd-coordinator ddpd-worker ddpctl; do
  [ -x "build/bin/$b" ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
done
for tool in jq python3; do
  command -v $tool >/dev/null || { echo "bench_control_plane.sh needs $tool" >&2; exit 1; }
done
outages=${OUTAGES:-1 5 30}
paths=${PATHS:-coordinator link no-adopt}
world=2
margin=8  # seconds each job trains beyond its outage, at least
work=$(mktemp -d /tmp/ddpd-bench-control-plane.XXXXXX)
export DDPD_TOKEN=bench-control-plane
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

coordinator_pid="" proxy_pid="" worker_pids=()
stop_daemons() {
  local p
  for p in $coordinator_pid ${worker_pids[@]+"${worker_pids[@]}"} $proxy_pid; do
    kill "$p" 2>/dev/null || true
  done
  for p in $coordinator_pid ${worker_pids[@]+"${worker_pids[@]}"} $proxy_pid; do
    wait "$p" 2>/dev/null || true
  done
  coordinator_pid="" proxy_pid="" worker_pids=()
}
cleanup() {
  stop_daemons
  if [ "${KEEP:-0}" = 1 ]; then echo "logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Copies: the whole run uses one build even while build/bin is relinked.
bin=$work/bin
mkdir "$bin"
cp build/bin/ddpd-coordinator build/bin/ddpd-worker build/bin/ddpctl "$bin"/

now() { date +%s.%N; }
elapsed() { jq -n "$1 - $2"; }  # t1 t0 → t1 - t0

# One group's daemons: a coordinator on $dir/db, worker 0 direct, worker 1 direct or through the
# proxy (route = proxy).
start_coordinator() {  # extra flags...
  "$bin/ddpd-coordinator" --listen "127.0.0.1:$port" --db "$dir/db" --worker-timeout 3 \
    --metrics-port 0 "$@" >>"$dir/coordinator.log" 2>&1 &
  coordinator_pid=$!
}
wait_port() {  # port: until it accepts connections (30 s at most)
  for _ in $(seq 1500); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
    sleep 0.02
  done
  echo "nothing listens on port $1: see $dir/coordinator.log" >&2
  exit 1
}
ctl() { "$bin/ddpctl" --coordinator "127.0.0.1:$port" "$@"; }
start_group() {  # name route coordinator-flags...
  local name=$1 route=$2 i target
  shift 2
  dir=$work/$name
  mkdir -p "$dir"
  port=$(free_port)
  start_coordinator "$@"
  wait_port "$port"
  target=$port
  if [ "$route" = proxy ]; then
    python3 tests/bench/tcp_proxy.py "$port" --port-file "$dir/proxy.port" >"$dir/proxy.log" 2>&1 &
    proxy_pid=$!
    for _ in $(seq 200); do [ -s "$dir/proxy.port" ] && break; sleep 0.05; done
    [ -s "$dir/proxy.port" ] || { echo "tcp_proxy.py did not start" >&2; exit 1; }
    target=$(cat "$dir/proxy.port")
  fi
  for i in 0 1; do
    local to=$port
    [ "$i" = 1 ] && to=$target
    "$bin/ddpd-worker" serve --coordinator "127.0.0.1:$to" --worker-id "bench-w$i" \
      --heartbeat 0.5 --log-level info >>"$dir/worker$i.log" 2>&1 &
    worker_pids+=($!)
  done
  for _ in $(seq 150); do
    [ "$(ctl workers 2>/dev/null | grep -c ' IDLE ')" = 2 ] && return
    sleep 0.2
  done
  echo "the workers did not register" >&2
  exit 1
}

show() { ctl show "$1" --json; }
submit() {  # steps extra... → job id
  local steps=$1
  shift
  ctl submit ddp --world-size $world --model tiny --batch 6 --context 16 --threads 1 \
    --steps "$steps" --strategy bucketed "$@" | head -n1
}
wait_end() {  # job → its final show --json
  local shown
  while :; do
    shown=$(show "$1")
    case $(jq -r .state <<<"$shown") in
      RUNNING | PENDING) sleep 0.3 ;;
      *) echo "$shown"; return ;;
    esac
  done
}
max_step() { show "$1" | jq '[.rank_steps[].step] | max // -1'; }

# Step rows the store has for a job, read from the --db of a stopped coordinator.
stored_steps() {  # db job
  python3 - "$1" "$2" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
print(db.execute("SELECT COUNT(*) FROM steps WHERE job_id = ?", (sys.argv[2],)).fetchone()[0])
EOF
}

# The unix time of the first "registered with" line of a worker log at or after T.
registered_after() {  # log t
  local line t
  while read -r line; do
    t=${line#[}
    t=$(date -d "${t%%]*}" +%s.%N)
    if [ "$(jq -n "$t >= $2 - 0.01")" = true ]; then
      echo "$t"
      return
    fi
  done < <(grep 'registered with ' "$1")
  echo "$2"
}

# The probe: the job's rate in steps a second, start-up included.
probe_rate() {
  local job shown
  job=$(submit 300)
  shown=$(wait_end "$job")
  jq '300 / ((.history | map(select(.state != "PENDING")) | last.unix_time - first.unix_time))' \
    <<<"$shown"
}

# What the store has of a job: its rows (RANK >= 0: that rank's), and its rows of attempts
# after the first (a restart's first reports may replace rows attempt 0 stored).
signature() {  # job rank
  show "$1" | jq -r --argjson rank "$2" '[.rank_steps[] | select($rank < 0 or .rank == $rank)]
    | "\(length) rows, \([.[] | select(.attempt > 0)] | length) after attempt 0"'
}

# Whether a rank of JOB has finished (its daemon's log says so).
finished() { grep -q "job=$1 rank=[0-9]* succeeded" "$dir"/worker*.log; }

# One row: prints "| ... |", or nothing and sets void=1 where the ranks finished during the
# outage (the host ran faster than its probe): that row is to be run again, longer.
row() {  # kind(coordinator|link|no-adopt) outage factor
  local kind=$1 outage=$2 factor=$3 steps job extra=() fault_at back baseline first="" t
  local seen=0 poll shown cut_rank=-1 cut_worker registered twice again lost final before_max
  local early=0
  # FACTOR x the probe's rate: the host's load moves it (others' builds and tests).
  steps=$(jq -n "50 + ($factor * $rate * ($outage + $margin)) | ceil")
  [ "$kind" = no-adopt ] && extra=(--checkpoint-dir "$(mktemp -d "$dir/ckpt.XXXXXX")"
    --checkpoint-every 20 --max-restarts 1)
  job=$(submit "$steps" ${extra[@]+"${extra[@]}"})
  for _ in $(seq 600); do
    [ "$(max_step "$job")" -ge 50 ] && break
    sleep 0.1
  done
  [ "$(max_step "$job")" -ge 50 ] || { echo "job $job did not reach step 50" >&2; exit 1; }
  before_max=$(max_step "$job")
  if [ "$kind" = link ]; then
    cut_worker=bench-w1
    cut_rank=$(show "$job" | jq --arg w $cut_worker '.workers | index($w)')
    fault_at=$(now)
    kill -USR1 "$proxy_pid"
    for _ in $(seq 50); do
      ctl workers | grep -q "^$cut_worker .*DISCONNECTED" && break
      sleep 0.1
    done
    ctl workers | grep -q "^$cut_worker .*DISCONNECTED" ||
      echo "  ($cut_worker not DISCONNECTED during the cut)" >&2
    sleep "$(jq -n "[$outage - ($(now) - $fault_at), 0] | max")"
    [ "$(show "$job" | jq -r .state)" = RUNNING ] || echo "  (job $job not RUNNING during the cut)" >&2
    baseline=$(signature "$job" "$cut_rank")
    finished "$job" && early=1
    back=$(now)
    kill -USR2 "$proxy_pid"
  else
    kill -9 "$coordinator_pid"
    wait "$coordinator_pid" 2>/dev/null || true
    fault_at=$(now)
    baseline="$(stored_steps "$dir/db" "$job") rows, 0 after attempt 0"
    sleep "$outage"
    finished "$job" && early=1
    back=$(now)
    if [ "$kind" = no-adopt ]; then start_coordinator --no-adopt; else start_coordinator; fi
    wait_port "$port"
  fi
  # The first new report: poll every 0.15 s.
  local answered=""
  for _ in $(seq 600); do
    poll=$(signature "$job" "$cut_rank")
    [ -n "$answered" ] || answered=$(elapsed "$(now)" "$back")
    if [ "$poll" != "$baseline" ]; then
      first=$(elapsed "$(now)" "$back")
      break
    fi
    sleep 0.15
  done
  shown=$(wait_end "$job")
  # The last daemon's registration again.
  registered=$back
  if [ "$kind" = link ]; then
    registered=$(registered_after "$dir/worker1.log" "$back")
  else
    for i in 0 1; do
      t=$(registered_after "$dir/worker$i.log" "$back")
      registered=$(jq -n "[$registered, $t] | max")
    done
  fi
  registered=$(elapsed "$registered" "$back")
  local adopted
  adopted=$(jq -c --argjson back "$back" \
    '[.events[] | select(.kind == "adopted") | .unix_time - $back | . * 100 | round / 100]' \
    <<<"$shown")
  # Attempt 0's highest step: stored, seen before the fault, or the step in flight when its
  # daemons cancelled it (all of that one's steps before it were trained).
  local cancelled
  cancelled=$(cat "$dir"/worker*.log |
    sed -n "s/.*job=$job rank=[0-9]* failed: job cancelled at step \([0-9]*\).*/\1/p" |
    sort -n | tail -n1)
  twice=$(jq --argjson seen "$before_max" --argjson cancelled "${cancelled:-0}" '
    ([.rank_steps[] | select(.attempt > 0) | .step] | min) as $first
    | if $first == null then 0 else
        ([([.rank_steps[] | select(.attempt == 0) | .step] | max // -1), $seen, $cancelled - 1]
         | max) as $high
        | [$high - $first + 1, 0] | max end' <<<"$shown")
  again=$(($(cat "$dir"/worker*.log | grep -c "job=$job rank=[0-9]* runs in process") - world))
  lost=$(jq --argjson n $((world * steps)) \
    '$n - ([.rank_steps[] | [.rank, .step]] | unique | length)' <<<"$shown")
  final=$(jq -r '"\(.state) (\(.attempts))"' <<<"$shown")
  seen=$(jq -r '[.events[] | "\(.kind)\(if .rank >= 0 then " rank \(.rank)" else "" end)"] | join(", ")' \
    <<<"$shown")
  echo "  ($kind ${outage} s, $job, $steps steps, trained to $before_max before the fault;" \
    "incidents: ${seen:-none}; after the return: the first \`show\` answered in" \
    "$(printf %.2f "$answered") s, adopted $adopted s)" >&2
  if [ "$early" = 1 ]; then
    echo "  (its ranks finished during the outage; the job ended $final)" >&2
    void=1
    return
  fi
  local after="-"
  [ -n "$first" ] && after=$(printf %.2f "$(jq -n "$first - $registered")")
  printf '| %s | %s | %s | %s | %s | %s | %s | %.2f | %s | %s |\n' "$kind" "$outage" "$steps" \
    "$twice" "$again" "$lost" "$final" "$registered" \
    "$([ -n "$first" ] && printf %.2f "$first" || echo never)" "$after"
}

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD);" \
  "$(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "job: ddp, world 2, tiny, batch 6, context 16, 1 thread a rank, bucketed; outages ${outages// /, } s"
rates=""
echo "goals: 0 steps trained twice, 0 rank processes started again, 0 reports lost," \
  "first report <= 1 s after the last daemon registers again"
echo
table=$'| path | outage s | steps | trained twice | rank processes started again | reports lost | final (attempts) | last registered again s | first report s | first report after registration s |\n| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |'
for kind in $paths; do
  case $kind in
    coordinator) start_group adopt direct ;;
    link) start_group link proxy ;;
    no-adopt) start_group no-adopt direct ;;
    *) echo "unknown path $kind" >&2; exit 2 ;;
  esac
  rate=$(probe_rate)
  rates+="$kind $(printf %.0f "$rate"), "
  for outage in $outages; do
    factor=1.5
    for _ in 1 2 3; do
      void=0
      row "$kind" "$outage" "$factor" >>"$work/rows"  # not in a subshell: it starts coordinators
      [ "$void" = 1 ] || break
      factor=$(jq -n "$factor * 2")
      echo "  (again, with $factor x the probe's steps)" >&2
    done
  done
  stop_daemons
done
echo "probes (steps/s, 300 steps, start-up included): ${rates%, }; each job: 50 steps, then" \
  "the outage, then 1.5 x the probe's steps for ($margin s + the outage) (twice that, and" \
  "again, where its ranks finished during the outage)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "$table"
cat "$work/rows"
