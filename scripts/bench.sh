#!/usr/bin/env bash
# Benchmarks the whole service as `make run` runs it (embedded Kafka-protocol broker, local
# PostgreSQL and Redis), driven by cmd/loadgen from a separate process. Used by `make bench`.
#
#   bash scripts/bench.sh                          # full default run (about 9 minutes, then ~5 for the fan-out)
#   BENCH_DURATION=10s BENCH_RATE=2000 bash scripts/bench.sh
#   BENCH_FANOUT=0 BENCH_DURATION=10s BENCH_RATE=500 \
#     BENCH_ARGS="-read-duration 3s -big-entries 100000" bash scripts/bench.sh   # a short run of everything
#   bash scripts/bench.sh -concurrency 64 -phases rate   # extra arguments go to loadgen
#   BENCH_ARGS="-users 5000" bash scripts/bench.sh
#   LEADERBOARD_PPROF_ADDR=127.0.0.1:6061 BENCH_ARGS="-cpuprofile bench-results/loadgen.prof" bash scripts/bench.sh
#                                                  # pprof on the service; the load generator's own CPU profile
#   BENCH_ARGS="-phases mixed -mix best=1,incr=2,match=1 -mixed-rate 3000" bash scripts/bench.sh
#   BENCH_FANOUT=0 BENCH_ARGS="-phases limiter -limiter-duration 10s" bash scripts/bench.sh   # only the limiter's cost
#   BENCH_WRITES=0 bash scripts/bench.sh           # only the fan-out run (scripts/bench-fanout.sh)
#   BENCH_FANOUT=0 bash scripts/bench.sh           # only the write and read benchmark
#   BENCH_PG=sized BENCH_FANOUT=0 bash scripts/bench.sh   # against a PostgreSQL of its own, sized for the
#                                                  # write rate (see below; the fan-out run keeps the machine's)
#   BENCH_THP=always BENCH_HUGEPAGES=1 BENCH_PG=sized BENCH_FANOUT=0 bash scripts/bench.sh
#                                                  # also transparent huge pages for the run, and
#                                                  # huge pages for that PostgreSQL (root; see below)
#   BENCH_FANOUT_SIZES="1000 5000" bash scripts/bench.sh   # fan-out sizes (see bench-fanout.sh)
#
# loadgen's phases (-phases, default all, in this order; see `bin/loadgen -h`):
#   idle        -idle-duration (10 s) with no load: CPU of each process group at rest
#   rate        phase A: best scores on global, open loop at -rate (BENCH_RATE) for -duration (BENCH_DURATION);
#               like every write phase it reports accepted and applied commands per -window (10 s), and
#               says whether the rate holds: every window applied >= 90 % of what it accepted, accept
#               p99 < 100 ms, accept -> visible p95 < 1 s, errors < 1 %, nothing dropped
#               (BENCH_DURATION=15m BENCH_RATE=3000 BENCH_FANOUT=0 BENCH_ARGS="-phases rate": a soak run)
#   saturation  phase B: best scores, -concurrency closed-loop writers for -duration
#   limiter     the cost of the per-user rate limiter: best scores as in phase B, closed loop, in runs of
#               half of -limiter-duration (20 s) each, in the order off, on, on, off: off = the server
#               token (server writes skip the limiter), on = each user's own player token (sub = the
#               user), so every write runs the limiter's GCRA in Redis; reports each setting's
#               accepted/s, accept p50/p99, 429s, CPU per accepted write and the ratio on/off
#   mixed       open loop at -mixed-rate (default -rate) for -duration, each command drawn by -mix
#               (default best=1,incr=1,match=1): best scores on global, increments on points, match
#               points (one command, applied to match:{id}, daily and season) in matches of
#               -match-size (10) players; then the Redis memory of one match board
#   reads       GET /healthz (the bare HTTP ceiling), then top-10 and user rank of global, closed loop,
#               -read-duration each
#   bigreads    a board of -big-entries (1,000,000) entries, board `big` of the bench boards file:
#               seeded with one INSERT ... SELECT FROM generate_series into board_entries (+ ANALYZE),
#               loaded into Redis with POST /admin/boards/big/rebuild (admin token), its Redis memory
#               measured (MEMORY USAGE ... SAMPLES 0), then own rank, around-5, page walks and top-10
#   check       the exactly-once check of every accepted command (PostgreSQL and Redis; not `big`)
# Every phase reports the CPU time of the service (the embedded broker included), PostgreSQL
# and Redis from /proc, per applied score_history row for the write phases.
#
# The service runs with LEADERBOARD_BOARDS_FILE=bench-results/boards.yaml: the shipped boards
# (configs/boards.example.yaml, which configs' tests keep equal to the built-in defaults) plus
# the board `big` (operator best, order desc, period all_time) that bigreads seeds.
#
# The service runs with LEADERBOARD_RATE_LIMIT="${BENCH_RATE_LIMIT:-100000/1s}": player writes
# (the limiter phase's "on" runs) are rate-limited per user as in production, but with a limit
# no bench user reaches, so that the limiter does its whole work (one script call in Redis per
# write) without refusing anything; the phase warns when it sees a 429. BENCH_RATE_LIMIT=off
# turns the limiter off (then "on" measures player tokens without the limiter).
#
# Results: bench-results/summary.json (loadgen's JSON summary), bench-results/loadgen.log,
# bench-results/service.log. The database leaderboard_bench is dropped and recreated on
# every run; the run's Redis keys are deleted when it ends. Then, unless BENCH_FANOUT=0,
# scripts/bench-fanout.sh runs the realtime fan-out benchmark against a fresh service
# (results in bench-results/fanout*).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${BENCH_WRITES:-1}" = 0 ]; then
  if [ "${BENCH_FANOUT:-1}" = 0 ]; then
    echo "bench: BENCH_WRITES=0 and BENCH_FANOUT=0: nothing to run" >&2
    exit 1
  fi
  exec bash scripts/bench-fanout.sh
fi

results=bench-results
db=${BENCH_DATABASE:-leaderboard_bench}
addr=${BENCH_HTTP_ADDR:-127.0.0.1:18080}
pg_port=5432
redis_url=${BENCH_REDIS_URL:-redis://127.0.0.1:6379/0}
prefix="bench-$(date +%s)"
secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
ready_timeout=60

mkdir -p "$results" bin
bash scripts/services.sh

# BENCH_PG=sized runs the benchmark against a PostgreSQL of its own, sized for its write
# rate as README's "PostgreSQL sizing" advises (the machine's, Debian's defaults, checkpoints
# every 40 s or so at 5,000 scores/s): a fresh cluster of the installed version in a
# temporary directory on port BENCH_PG_PORT (5433), stopped and deleted when the run ends.
# BENCH_PG_SETTINGS overrides its settings (postgres -c options).
# (as root, as the user postgres: initdb refuses root).
pg_dir=""
as_pg=()
[ "$(id -u)" = 0 ] && as_pg=(runuser -u postgres --)
# BENCH_HUGEPAGES=1 (with BENCH_PG=sized, root only) reserves the kernel's huge pages for that
# PostgreSQL's shared memory (vm.nr_hugepages, raised by what `postgres -C
# shared_memory_size_in_huge_pages` says) and starts it with huge_pages=on, as PostgreSQL's
# documentation advises for a large shared_buffers; the reservation is given back when the
# run ends. It took about a fifth off PostgreSQL's CPU per score here (docs/benchmark-log.md).
hugepages_file=/proc/sys/vm/nr_hugepages
hugepages_before=""
stop_pg() {
  [ -n "$pg_dir" ] || return 0
  "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$pg_dir"
  pg_dir=""
  if [ -n "$hugepages_before" ]; then
    echo "$hugepages_before" >"$hugepages_file" 2>/dev/null || echo "bench: could not put $hugepages_file back to $hugepages_before" >&2
    hugepages_before=""
  fi
}
case "${BENCH_PG:-machine}" in
machine)
  if [ "${BENCH_HUGEPAGES:-0}" = 1 ]; then
    echo "bench: BENCH_HUGEPAGES=1 needs BENCH_PG=sized (the machine's PostgreSQL is left as it is)" >&2
    exit 1
  fi
  ;;
sized)
  pg_bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")
  pg_port=${BENCH_PG_PORT:-5433}
  pg_settings=${BENCH_PG_SETTINGS:-"-c shared_buffers=1GB -c max_wal_size=8GB -c min_wal_size=1GB -c checkpoint_timeout=15min -c wal_init_zero=off -c autovacuum=off"}
  pg_dir=$(mktemp -d -t leaderboard-bench-pg.XXXXXX)
  trap stop_pg EXIT # until cleanup (below) takes over
  [ "${#as_pg[@]}" = 0 ] || chown postgres: "$pg_dir"
  echo "bench: starting a PostgreSQL of its own ($pg_bin, port $pg_port: $pg_settings)"
  "${as_pg[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U postgres -A trust >"$pg_dir/initdb.log" 2>&1 ||
    { cat "$pg_dir/initdb.log" >&2; exit 1; }
  if [ "${BENCH_HUGEPAGES:-0}" = 1 ]; then
    # shellcheck disable=SC2086 # the settings are options
    need=$("${as_pg[@]}" "$pg_bin/postgres" -D "$pg_dir/data" -C shared_memory_size_in_huge_pages $pg_settings)
    before=$(cat "$hugepages_file")
    echo $((before + need)) >"$hugepages_file" || { echo "bench: BENCH_HUGEPAGES needs root (writing $hugepages_file)" >&2; exit 1; }
    hugepages_before=$before
    if [ "$(cat "$hugepages_file")" -lt $((before + need)) ]; then
      echo "bench: the kernel reserved $(cat "$hugepages_file") huge pages of the $((before + need)) asked (memory too fragmented?)" >&2
      exit 1
    fi
    pg_settings="$pg_settings -c huge_pages=on"
    echo "bench: $need huge pages reserved for it (vm.nr_hugepages $before -> $((before + need)) for the run)"
  fi
  # shellcheck disable=SC2086 # the settings are options
  "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w \
    -o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1 $pg_settings" start >/dev/null ||
    { cat "$pg_dir/server.log" >&2; exit 1; }
  ;;
*)
  echo "bench: BENCH_PG is machine (the machine's PostgreSQL on 5432) or sized, not $BENCH_PG" >&2
  exit 1
  ;;
esac
pg_url="postgres://postgres@127.0.0.1:${pg_port}/${db}?sslmode=disable"

# The bench's boards: the shipped ones plus `big` for the bigreads phase. The example file is
# one top-level `boards:` list; the extra board is appended as one more item of it, indented
# as the example's items are.
boards_file="$results/boards.yaml"
example=configs/boards.example.yaml
if grep -vE '^[[:space:]]*(#|$)' "$example" | grep -E '^[^[:space:]-]' | grep -vqE '^boards:[[:space:]]*(#.*)?$'; then
  echo "bench: $example has top-level keys other than boards:; cannot append the big board" >&2
  exit 1
fi
indent=$(grep -m1 -E '^[[:space:]]*- ' "$example" | sed -E 's/^([[:space:]]*)- .*/\1/')
{
  cat "$example"
  echo
  echo "${indent}# scripts/bench.sh: the bigreads phase seeds this board straight into board_entries"
  echo "${indent}- id: big"
  echo "${indent}  operator: best"
  echo "${indent}  order: desc"
  echo "${indent}  period: all_time"
} >"$boards_file"

echo "bench: building bin/leaderboard and bin/loadgen"
go build -o bin/leaderboard ./cmd/leaderboard
go build -o bin/loadgen ./cmd/loadgen

echo "bench: recreating database $db"
psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -v ON_ERROR_STOP=1 -q \
  -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" -c "CREATE DATABASE \"$db\""

if [ "$(psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -Atc 'SHOW autovacuum')" != on ]; then
  echo "bench: NOTE: autovacuum is off on this PostgreSQL: the service vacuums and analyzes its own tables" \
    "(autovacuum's thresholds, checked every 15 s), and its PostgreSQL CPU includes that"
fi

kafka_dir=$(mktemp -d -t leaderboard-bench-kafka.XXXXXX)
service_pid=""

stop_service() {
  [ -n "$service_pid" ] || return 0
  if kill -0 "$service_pid" 2>/dev/null; then
    kill -TERM "$service_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$service_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$service_pid" 2>/dev/null; then
      echo "bench: service did not stop within 30 s of SIGTERM; killing it" >&2
      kill -KILL "$service_pid" 2>/dev/null || true
    fi
  fi
  wait "$service_pid" 2>/dev/null || true
  service_pid=""
}

# release stops the service and deletes the run's Redis keys and broker data (idempotent).
released=""
release() {
  stop_service
  [ -z "$released" ] || return 0
  released=1
  echo "bench: deleting Redis keys $prefix:* and rate:$prefix:*"
  # rate:$prefix:* are the rate limiter's (go-redis/redis_rate puts "rate:" before the service's prefix).
  for pattern in "$prefix:*" "rate:$prefix:*"; do
    redis-cli -u "$redis_url" --scan --pattern "$pattern" \
      | xargs -r -n 500 redis-cli -u "$redis_url" unlink >/dev/null || true
  done
  rm -rf "$kafka_dir"
}

# BENCH_THP=always (or madvise, never) sets the kernel's transparent huge pages mode for the
# run (root only) and puts the machine's back when it ends. Go's runtime does not advise its
# heap, so under madvise (Debian's default) the service and the load generator run on 4 KB
# pages; always took about 6 % off the CPU per score here (docs/benchmark-log.md,
# 2026-11-27). The mode a run had is in its report's "machine:" line.
thp_file=/sys/kernel/mm/transparent_hugepage/enabled
thp_before=""
restore_thp() {
  [ -n "$thp_before" ] || return 0
  echo "$thp_before" >"$thp_file" 2>/dev/null || echo "bench: could not put $thp_file back to $thp_before" >&2
  thp_before=""
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  release
  stop_pg
  restore_thp
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -n "${BENCH_THP:-}" ]; then
  case "$BENCH_THP" in
  always | madvise | never) ;;
  *)
    echo "bench: BENCH_THP is always, madvise or never, not $BENCH_THP" >&2
    exit 1
    ;;
  esac
  before=$(sed -E 's/.*\[([a-z]+)\].*/\1/' "$thp_file")
  echo "$BENCH_THP" >"$thp_file" || { echo "bench: BENCH_THP needs root (writing $thp_file)" >&2; exit 1; }
  thp_before=$before
  echo "bench: transparent huge pages $BENCH_THP for the run (the machine's: $before)"
fi

echo "bench: starting the service on $addr (redis prefix $prefix, log $results/service.log)"
env \
  LEADERBOARD_HTTP_ADDR="$addr" \
  LEADERBOARD_POSTGRES_URL="$pg_url" \
  LEADERBOARD_REDIS_URL="$redis_url" \
  LEADERBOARD_REDIS_PREFIX="$prefix" \
  LEADERBOARD_KAFKA_BROKERS=embedded \
  LEADERBOARD_KAFKA_DATA_DIR="$kafka_dir" \
  LEADERBOARD_JWT_SECRET="$secret" \
  LEADERBOARD_LOG_LEVEL="${LEADERBOARD_LOG_LEVEL:-warn}" \
  LEADERBOARD_TIMEZONE=UTC \
  LEADERBOARD_BOARDS_FILE="$boards_file" \
  LEADERBOARD_RATE_LIMIT="${BENCH_RATE_LIMIT:-100000/1s}" \
  ${LEADERBOARD_PPROF_ADDR:+LEADERBOARD_PPROF_ADDR="$LEADERBOARD_PPROF_ADDR"} \
  ${LEADERBOARD_OUTBOX_SHARDS:+LEADERBOARD_OUTBOX_SHARDS="$LEADERBOARD_OUTBOX_SHARDS"} \
  ${LEADERBOARD_SCORE_PARTITIONS:+LEADERBOARD_SCORE_PARTITIONS="$LEADERBOARD_SCORE_PARTITIONS"} \
  bin/leaderboard >"$results/service.log" 2>&1 &
service_pid=$!

deadline=$((SECONDS + ready_timeout))
until curl -fsS -o /dev/null "http://$addr/readyz" 2>/dev/null; do
  if ! kill -0 "$service_pid" 2>/dev/null; then
    echo "bench: the service exited before it was ready; last log lines:" >&2
    tail -n 20 "$results/service.log" >&2
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "bench: the service was not ready within ${ready_timeout}s; /readyz says:" >&2
    curl -sS "http://$addr/readyz" >&2 || true
    echo >&2
    tail -n 20 "$results/service.log" >&2
    exit 1
  fi
  sleep 0.2
done
echo "bench: service ready (pid $service_pid)"

args=(-target "http://$addr" -postgres "$pg_url" -redis "$redis_url" -prefix "$prefix" -out "$results/summary.json"
  -service-pid "$service_pid" -big-board big)
[ -n "${BENCH_DURATION:-}" ] && args+=(-duration "$BENCH_DURATION")
[ -n "${BENCH_RATE:-}" ] && args+=(-rate "$BENCH_RATE")
# BENCH_ARGS is split on whitespace on purpose: it holds loadgen flags.
# shellcheck disable=SC2206
[ -n "${BENCH_ARGS:-}" ] && args+=(${BENCH_ARGS})
args+=("$@")

echo "bench: bin/loadgen ${args[*]}"
set +e
LEADERBOARD_JWT_SECRET="$secret" bin/loadgen "${args[@]}" 2>&1 | tee "$results/loadgen.log"
rc=${PIPESTATUS[0]}
set -e

if kill -0 "$service_pid" 2>/dev/null; then
  read -r cpu wall < <(ps -o times=,etimes= -p "$service_pid")
  echo "bench: service used ${cpu}s of CPU in ${wall}s of wall time (2 cores available)"
else
  echo "bench: WARNING: the service is no longer running (crashed during the run?); see $results/service.log" >&2
  if [ "$rc" -eq 0 ]; then rc=1; fi
fi
errors=$(grep -c '"level":"ERROR"' "$results/service.log" || true)
warnings=$(grep -c '"level":"WARN"' "$results/service.log" || true)
echo "bench: service log: $errors error and $warnings warning lines ($results/service.log)"
if [ "$errors" -gt 0 ]; then
  grep '"level":"ERROR"' "$results/service.log" | cut -c1-300 | sort | uniq -c | sort -rn | head -n 5
fi

if [ "${BENCH_FANOUT:-1}" != 0 ]; then
  release
  echo
  echo "bench: fan-out benchmark (scripts/bench-fanout.sh; BENCH_FANOUT=0 skips it)"
  frc=0
  bash scripts/bench-fanout.sh || frc=$?
  if [ "$rc" -eq 0 ]; then rc=$frc; fi
fi
exit "$rc"
