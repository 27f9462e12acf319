#!/usr/bin/env bash
# Brings up local PostgreSQL and Redis when they are not already answering, installing
# them from Debian's packages on a fresh machine. Used by `make run` and `make test`.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
# Local development: trust auth on loopback, as the defaults in README assume. Returns 1
# when the cluster's pg_hba.conf (in $1) has it already.
trust_loopback() {
  grep -q '^host all all 127.0.0.1/32 trust' "$1/pg_hba.conf" && return 1
  as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nlocal all all trust' "$1/pg_hba.conf"
}
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

need=()
command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ ${#need[@]} -gt 0 ]; then
  echo "services: installing ${need[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! pg_up; then
  echo "services: starting PostgreSQL"
  version=$(ls /etc/postgresql | sort -V | tail -1)
  if [ -z "$version" ]; then
    version=$(ls /usr/lib/postgresql | sort -V | tail -1)
    as_root pg_createcluster "$version" main
  fi
  conf=/etc/postgresql/$version/main
  trust_loopback "$conf" || true
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start
  for _ in $(seq 1 50); do pg_up && break; sleep 0.2; done
  pg_up || { echo "services: PostgreSQL did not come up" >&2; exit 1; }
fi

# A PostgreSQL that a package's service manager started (systemd on Debian and Ubuntu)
# answers with its default password rule on loopback, which the default
# LEADERBOARD_POSTGRES_URL (user postgres, no password) cannot pass: trust loopback there
# too, in the Debian cluster that serves port 5432, and undo it when that does not let
# user postgres in. Not when a login is configured (LEADERBOARD_POSTGRES_URL, or the
# tests' LEADERBOARD_TEST_POSTGRES_URL): the service and the tests log in as it says.
pg_login() { psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1; }
if [ -z "${LEADERBOARD_POSTGRES_URL:-}${LEADERBOARD_TEST_POSTGRES_URL:-}" ] && command -v psql >/dev/null 2>&1 && ! pg_login; then
  cluster=$(pg_lsclusters --no-header 2>/dev/null | awk '$3 == 5432 && $4 ~ /^online/ {print $1 "/" $2; exit}' || true)
  hba=/etc/postgresql/$cluster/pg_hba.conf
  if [ -n "$cluster" ] && as_root cp -p "$hba" "$hba.leaderboard-backup" && trust_loopback "/etc/postgresql/$cluster"; then
    reload() { as_root pg_ctlcluster --skip-systemctl-redirect "${cluster%/*}" "${cluster#*/}" reload || true; }
    reload
    for _ in $(seq 1 25); do pg_login && break; sleep 0.2; done
    if pg_login; then
      echo "services: user postgres may now log in on loopback without a password ($hba)"
    else # it is not what answers on 127.0.0.1:5432: the trust would open it for nothing
      as_root mv "$hba.leaderboard-backup" "$hba"
      reload
    fi
  fi
  [ -z "$cluster" ] || as_root rm -f "$hba.leaderboard-backup" || true
  pg_login || echo "services: warning: user postgres cannot log in to 127.0.0.1:5432 without a password; set LEADERBOARD_POSTGRES_URL" >&2
fi

if ! redis_up; then
  echo "services: starting Redis"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/leaderboard.log
  for _ in $(seq 1 50); do redis_up && break; sleep 0.1; done
  redis_up || { echo "services: Redis did not come up" >&2; exit 1; }
fi
