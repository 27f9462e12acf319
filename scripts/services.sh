#!/usr/bin/env bash
# Brings up local PostgreSQL and Redis when they are not already answering, installing
# them from Debian's packages on a fresh machine. Used by `make run` and `make test`.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
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
  # Local development: trust auth on loopback, as the defaults in README assume.
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$conf/pg_hba.conf"; then
    as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nlocal all all trust' "$conf/pg_hba.conf"
  fi
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start
  for _ in $(seq 1 50); do pg_up && break; sleep 0.2; done
  pg_up || { echo "services: PostgreSQL did not come up" >&2; exit 1; }
fi

if ! redis_up; then
  echo "services: starting Redis"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/leaderboard.log
  for _ in $(seq 1 50); do redis_up && break; sleep 0.1; done
  redis_up || { echo "services: Redis did not come up" >&2; exit 1; }
fi
