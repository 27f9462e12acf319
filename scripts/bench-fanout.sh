#!/usr/bin/env bash
# Fan-out benchmark of the realtime feed: N concurrent SSE clients, held by `loadgen fanout`
# in a separate process, while the top-10 changes every 300 ms and background scores flow.
# Reports delivery lag, the share of events delivered, how many clients end on the latest
# version, and the API processes' CPU and RSS. Called by scripts/bench.sh (`make bench`)
# unless BENCH_FANOUT=0; runs alone as well:
#
#   bash scripts/bench-fanout.sh                          # 1000 5000 10000 18000 on one API process, 30000 over two
#   BENCH_FANOUT_SIZES="1000 5000" bash scripts/bench-fanout.sh
#   BENCH_FANOUT_ARGS="-duration 30s -bg-rate 100" bash scripts/bench-fanout.sh   # extra loadgen flags
#   BENCH_FANOUT_PPROF_ADDR=127.0.0.1:6061 bash scripts/bench-fanout.sh   # pprof on the first API process
#
# A size above BENCH_FANOUT_SPLIT_ABOVE (default 19000: one process holds at most ~19,900
# sockets under the 20,000 open-file cap) runs over two API processes: the all-roles one and
# a second with LEADERBOARD_ROLES=api sharing its database, Redis, broker and secret, with
# half the clients on each, from two loadgen processes run side by side.
#
# Results in bench-results/: fanout-<N>.json (per loadgen: fanout-<N>-a.json, -b.json),
# fanout-summary.json (one row per size), fanout.log, fanout-service-a.log, fanout-service-b.log.
# The database leaderboard_bench_fanout is dropped and recreated on every run; the run's
# Redis keys are deleted when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

results=bench-results
db=${BENCH_FANOUT_DATABASE:-leaderboard_bench_fanout}
addr_a=${BENCH_FANOUT_ADDR_A:-127.0.0.1:18180}
addr_b=${BENCH_FANOUT_ADDR_B:-127.0.0.1:18181}
kafka_addr=${BENCH_FANOUT_KAFKA_ADDR:-127.0.0.1:19192}
sizes=${BENCH_FANOUT_SIZES:-1000 5000 10000 18000 30000}
split_above=${BENCH_FANOUT_SPLIT_ABOVE:-19000}
ramp=${BENCH_FANOUT_RAMP:-1000}
pg_url="postgres://postgres@127.0.0.1:5432/${db}?sslmode=disable"
redis_url=${BENCH_REDIS_URL:-redis://127.0.0.1:6379/0}
prefix="bench-fanout-$(date +%s)"
secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
ready_timeout=60
log=$results/fanout.log

for n in $sizes; do
  case $n in '' | *[!0-9]*) echo "bench-fanout: BENCH_FANOUT_SIZES: $n is not a number" >&2; exit 1 ;; esac
done
max_single=0
for n in $sizes; do
  if [ "$n" -le "$split_above" ] && [ "$n" -gt "$max_single" ]; then max_single=$n; fi
done
# The hub's cap must sit above the streams a process is asked to hold.
max_streams=${BENCH_FANOUT_MAX_STREAMS:-$((max_single > 18500 ? max_single + 500 : 19000))}

mkdir -p "$results" bin
rm -f "$results"/fanout-*  # results of an earlier run, so none is mistaken for this one's
: >"$log"
say() { echo "bench-fanout: $*" | tee -a "$log"; }

bash scripts/services.sh
say "building bin/leaderboard and bin/loadgen"
go build -o bin/leaderboard ./cmd/leaderboard
go build -o bin/loadgen ./cmd/loadgen

for a in "$addr_a" "$addr_b" "$kafka_addr"; do
  if ss -Htln "sport = :${a##*:}" | grep -q .; then
    echo "bench-fanout: port ${a##*:} is already in use (set BENCH_FANOUT_ADDR_A, _ADDR_B or _KAFKA_ADDR)" >&2
    exit 1
  fi
done

say "recreating database $db"
psql -h 127.0.0.1 -U postgres -d postgres -v ON_ERROR_STOP=1 -q \
  -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" -c "CREATE DATABASE \"$db\""

kafka_dir=$(mktemp -d -t leaderboard-fanout-kafka.XXXXXX)
sync_root=$(mktemp -d -t leaderboard-fanout-sync.XXXXXX)
pid_a=""
pid_b=""

stop_pid() {
  local pid=$1
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "bench-fanout: pid $pid did not stop within 30 s of SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_pid "$pid_b"
  stop_pid "$pid_a"
  echo "bench-fanout: deleting Redis keys $prefix:*"
  redis-cli -u "$redis_url" --scan --pattern "$prefix:*" \
    | xargs -r -n 500 redis-cli -u "$redis_url" unlink >/dev/null || true
  rm -rf "$kafka_dir" "$sync_root"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_service NAME ADDR LOG ENV... starts bin/leaderboard with the open-file limit raised
# to 20,000 and waits for /readyz; the pid is left in $started.
start_service() {
  local name=$1 addr=$2 logfile=$3
  shift 3
  say "starting API process $name on $addr (log $logfile)"
  (
    ulimit -n 20000 2>/dev/null || echo "bench-fanout: WARNING: ulimit -n 20000 refused; open-file limit $(ulimit -n)" >&2
    exec env \
      LEADERBOARD_HTTP_ADDR="$addr" \
      LEADERBOARD_POSTGRES_URL="$pg_url" \
      LEADERBOARD_REDIS_URL="$redis_url" \
      LEADERBOARD_REDIS_PREFIX="$prefix" \
      LEADERBOARD_JWT_SECRET="$secret" \
      LEADERBOARD_LOG_LEVEL="${LEADERBOARD_LOG_LEVEL:-warn}" \
      LEADERBOARD_SSE_MAX_STREAMS="$max_streams" \
      "$@" bin/leaderboard
  ) >"$logfile" 2>&1 &
  started=$!
  local deadline=$((SECONDS + ready_timeout))
  until curl -fsS -o /dev/null "http://$addr/readyz" 2>/dev/null; do
    if ! kill -0 "$started" 2>/dev/null; then
      echo "bench-fanout: API process $name exited before it was ready; last log lines:" >&2
      tail -n 20 "$logfile" >&2
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "bench-fanout: API process $name was not ready within ${ready_timeout}s; /readyz says:" >&2
      curl -sS "http://$addr/readyz" >&2 || true
      tail -n 20 "$logfile" >&2
      exit 1
    fi
    sleep 0.2
  done
  say "API process $name ready (pid $started, open-file limit $(awk '/Max open files/ {print $4}' "/proc/$started/limits"))"
}

# log_news FILE VAR prints the ERROR and WARN lines FILE gained since the count kept in VAR.
log_news() {
  local file=$1 var=$2 total new
  [ -f "$file" ] || return 0
  total=$(wc -l <"$file")
  new=$((total - ${!var:-0}))
  if [ "$new" -gt 0 ]; then
    local errs warns
    errs=$(tail -n "$new" "$file" | grep -c '"level":"ERROR"' || true)
    warns=$(tail -n "$new" "$file" | grep -c '"level":"WARN"' || true)
    say "  $file: $errs error and $warns warning lines during this run"
    tail -n "$new" "$file" | grep -E '"level":"(ERROR|WARN)"' \
      | sed -E 's/"(time|request_id|event_id|correlation_id|subscriber_id)":"[^"]*",?//g; s/"(took|wait_time)":[0-9]+,?//g' \
      | cut -c1-300 | sort | uniq -c | sort -rn | head -n 5 | tee -a "$log" || true
  fi
  printf -v "$var" '%s' "$total"
}

# alive NAME VAR reports an API process that has exited (with its exit status) and clears VAR.
alive() {
  local name=$1 var=$2 pid=${!2} status=0
  if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null || status=$?
    say "WARNING: API process $name (pid $pid) is no longer running (exit status $status); see its log"
    printf -v "$var" '%s' ""
    return 1
  fi
}

start_service a "$addr_a" "$results/fanout-service-a.log" \
  LEADERBOARD_KAFKA_BROKERS=embedded LEADERBOARD_KAFKA_EMBEDDED_ADDR="$kafka_addr" LEADERBOARD_KAFKA_DATA_DIR="$kafka_dir" \
  ${BENCH_FANOUT_PPROF_ADDR:+LEADERBOARD_PPROF_ADDR="$BENCH_FANOUT_PPROF_ADDR"}
pid_a=$started
lines_a=0
lines_b=0

# BENCH_FANOUT_ARGS is split on whitespace on purpose: it holds loadgen flags.
# shellcheck disable=SC2206
extra=(${BENCH_FANOUT_ARGS:-})
common=(-secret "$secret" -ramp-rate "$ramp" "${extra[@]}")
rc=0
rows=()
for n in $sizes; do
  if [ "$n" -le "$split_above" ]; then
    say "=== $n clients on one API process (LEADERBOARD_SSE_MAX_STREAMS=$max_streams) ==="
    set +e
    LEADERBOARD_JWT_SECRET="$secret" bin/loadgen fanout -clients "$n" -targets "http://$addr_a" -pids "$pid_a" \
      -out "$results/fanout-$n.json" "${common[@]}" 2>&1 | tee -a "$log"
    lrc=${PIPESTATUS[0]}
    set -e
    [ "$lrc" -eq 0 ] || { say "loadgen exited with $lrc"; rc=$lrc; }
    [ -f "$results/fanout-$n.json" ] && rows+=("$results/fanout-$n.json")
  else
    if [ -z "$pid_b" ]; then
      start_service b "$addr_b" "$results/fanout-service-b.log" LEADERBOARD_ROLES=api LEADERBOARD_KAFKA_BROKERS="$kafka_addr"
      pid_b=$started
    fi
    half_a=$(((n + 1) / 2))
    half_b=$((n / 2))
    say "=== $n clients over two API processes: $half_a on a (pid $pid_a), $half_b on b (pid $pid_b), two loadgens ==="
    sync_dir="$sync_root/$n"
    mkdir -p "$sync_dir"
    LEADERBOARD_JWT_SECRET="$secret" bin/loadgen fanout -name a -clients "$half_a" -user-prefix fan-a- \
      -targets "http://$addr_a" -pids "$pid_a" -sync-dir "$sync_dir" -peers 2 \
      -out "$results/fanout-$n-a.json" "${common[@]}" >"$results/fanout-$n-a.log" 2>&1 &
    lg_a=$!
    LEADERBOARD_JWT_SECRET="$secret" bin/loadgen fanout -name b -drive=false -clients "$half_b" -user-prefix fan-b- \
      -targets "http://$addr_b" -pids "$pid_b" -sync-dir "$sync_dir" -peers 2 \
      -out "$results/fanout-$n-b.json" "${common[@]}" >"$results/fanout-$n-b.log" 2>&1 &
    lg_b=$!
    set +e
    wait "$lg_a"
    rc_a=$?
    wait "$lg_b"
    rc_b=$?
    set -e
    cat "$results/fanout-$n-a.log" "$results/fanout-$n-b.log" | tee -a "$log"
    [ "$rc_a" -eq 0 ] || { say "loadgen a exited with $rc_a"; rc=$rc_a; }
    [ "$rc_b" -eq 0 ] || { say "loadgen b exited with $rc_b"; rc=$rc_b; }
    if [ -f "$results/fanout-$n-a.json" ] && [ -f "$results/fanout-$n-b.json" ]; then
      jq -s -r '
        def s(f): map(f) | add;
        "combined \(s(.streams.clients)) clients: connected \(s(.streams.connected)), refused \(s(.streams.refused)), " +
        "failed \(s(.streams.failed)), dropped early \(s(.streams.dropped_early)); delivered \(s(.delivery.pairs_delivered)) of " +
        "\(s(.delivery.pairs_expected)) pairs = \(s(.delivery.pairs_delivered) / ([s(.delivery.pairs_expected), 1] | max) * 10000 | round / 100)%; " +
        "lag p50/p95/p99/max \(map(.delivery.lag.p50_ms) | max)/\(map(.delivery.lag.p95_ms) | max)/\(map(.delivery.lag.p99_ms) | max)/" +
        "\(map(.delivery.lag.max_ms) | max) ms, 202->receive p50/p99 \(map(.delivery.end_to_end.p50_ms) | max)/\(map(.delivery.end_to_end.p99_ms) | max) ms " +
        "(each the larger of the two loadgens'"'"' percentiles, not a merged distribution); " +
        "on latest \(s(.delivery.on_latest)) of \(s(.streams.connected)) (all: \(if any(.[]; .delivery.all_on_latest_after_s < 0) then "never" else "+\(map(.delivery.all_on_latest_after_s) | max)s" end)); server CPU in drive " +
        "\(map(.servers[0].cpu_drive_s | tostring) | join(" + ")) s, RSS connected \(map(.servers[0].rss_connected_mb | tostring) | join(" + ")) MB"
      ' "$results/fanout-$n-a.json" "$results/fanout-$n-b.json" | tee -a "$log"
      rows+=("$results/fanout-$n-a.json+$results/fanout-$n-b.json")
    fi
  fi
  alive a pid_a || rc=1
  alive b pid_b || rc=1
  if [ -z "$pid_a" ]; then
    say "API process a is gone: stopping here"
    break
  fi
  log_news "$results/fanout-service-a.log" lines_a
  log_news "$results/fanout-service-b.log" lines_b
done

# One summary row per size; a split size sums counts and takes the larger percentile.
summary_rows=()
for r in "${rows[@]}"; do
  IFS=+ read -r -a files <<<"$r"
  summary_rows+=("$(jq -s -c '
    def s(f): map(f) | add;
    {clients: s(.streams.clients), api_processes: length, connected: s(.streams.connected), refused: s(.streams.refused),
     failed: s(.streams.failed), dropped_early: s(.streams.dropped_early), versions: (map(.delivery.versions_published) | min),
     delivered_share: (s(.delivery.pairs_delivered) / ([s(.delivery.pairs_expected), 1] | max)),
     lag_p50_ms: (map(.delivery.lag.p50_ms) | max), lag_p95_ms: (map(.delivery.lag.p95_ms) | max),
     lag_p99_ms: (map(.delivery.lag.p99_ms) | max), lag_max_ms: (map(.delivery.lag.max_ms) | max),
     end_to_end_p50_ms: (map(select(.delivery.end_to_end.count > 0) | .delivery.end_to_end.p50_ms) | max),
     end_to_end_p99_ms: (map(select(.delivery.end_to_end.count > 0) | .delivery.end_to_end.p99_ms) | max),
     on_latest: s(.delivery.on_latest),
     all_on_latest_after_s: (if any(.[]; .delivery.all_on_latest_after_s < 0) then -1 else map(.delivery.all_on_latest_after_s) | max end),
     server_cpu_drive_s: [.[] | .servers[] | .cpu_drive_s], server_cores_drive: [.[] | .servers[] | .drive_cores],
     server_rss_connected_mb: [.[] | .servers[] | .rss_connected_mb], server_rss_peak_mb: [.[] | .servers[] | .rss_peak_mb],
     loadgen_cores_drive: [.[] | .cpu.loadgen_drive_cores], machine_cores_drive: (map(.cpu.machine_drive_cores) | max)}
  ' "${files[@]}")")
done
if [ ${#summary_rows[@]} -gt 0 ]; then
  printf '%s\n' "${summary_rows[@]}" | jq -s '.' >"$results/fanout-summary.json"
  {
    echo
    echo "==================== fan-out summary (bench-results/fanout-summary.json) ===================="
    {
      printf 'clients\tAPI procs\tconnected\trefused\tdropped\tversions\tdelivered\tlag p50 ms\tp95\tp99\tmax\t202->recv p50/p99 ms\ton latest\tall after\tserver CPU s (cores)\tRSS connected/peak MB\tmachine cores\n'
      jq -r '.[] | [.clients, .api_processes, .connected, (.refused + .failed), .dropped_early, .versions,
        "\(.delivered_share * 10000 | round / 100)%", .lag_p50_ms, .lag_p95_ms, .lag_p99_ms, .lag_max_ms,
        "\(.end_to_end_p50_ms)/\(.end_to_end_p99_ms)", .on_latest, (if .all_on_latest_after_s < 0 then "never" else "+\(.all_on_latest_after_s)s" end),
        ([range(0; .server_cpu_drive_s | length) as $i | "\(.server_cpu_drive_s[$i]) (\(.server_cores_drive[$i]))"] | join(" + ")),
        ([range(0; .server_rss_connected_mb | length) as $i | "\(.server_rss_connected_mb[$i])/\(.server_rss_peak_mb[$i])"] | join(" + ")),
        .machine_cores_drive] | @tsv' \
        "$results/fanout-summary.json"
    } | column -t -s $'\t'
    echo "lag = receive time - data.ts (the hub's render time); 202->recv = from the leader score's 202 to the receive;"
    echo "delivered = (client, version) pairs received of those published during the drive; on latest = clients holding"
    echo "the final version at the end of the settle, all after = how much longer until every open stream held it;"
    echo "server CPU = drive + settle; machine cores = the whole machine busy during drive + settle (all processes)."
    echo "Two API processes: counts summed, percentiles the larger of the two loadgens' (not a merged distribution)."
    echo "machine: 2 cores, shared; API process(es), PostgreSQL, Redis, broker and loadgen(s) on one machine"
  } | tee -a "$log"
fi
exit "$rc"
