#!/usr/bin/env bash
# Make sure PostgreSQL and Redis answer on loopback for the test suite. Starts them if they are
# installed but down; installs them from the system's packages when missing and running as root.
set -u

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }
need_root() { echo "keel: $1 is not installed; install it (e.g. apt-get install $2) or run as root" >&2; exit 1; }
apt_install() {
  [ "$(id -u)" = 0 ] || need_root "$1" "$2"
  command -v apt-get >/dev/null || need_root "$1" "$2"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

if ! pg_up; then
  command -v pg_ctlcluster >/dev/null || apt_install PostgreSQL postgresql
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
  if [ -n "$ver" ]; then
    # Trust auth on loopback for the postgres user, as the tests expect (test machines only).
    hba=/etc/postgresql/$ver/main/pg_hba.conf
    if [ -w "$hba" ] && ! grep -q "keel-test" "$hba"; then
      sed -i '1i host all postgres 127.0.0.1/32 trust # keel-test' "$hba"
    fi
    pg_ctlcluster --skip-systemctl-redirect "$ver" main start 2>/dev/null || true
  fi
  for _ in $(seq 60); do pg_up && break; sleep 0.5; done
fi
pg_up && echo "postgres: up on 127.0.0.1:5432" || { echo "postgres: DOWN" >&2; exit 1; }

# `make test` runs three pytest sessions at once, each with its API servers, Celery workers and
# deployments holding pooled connections (about 70 at peak here): PostgreSQL's default of 100 is
# too close. Raised where this script may (a local cluster it can restart); otherwise it says so.
want_conns=300
have_conns=$(psql -h 127.0.0.1 -U postgres -Atc "SHOW max_connections" 2>/dev/null || echo 0)
if [ "${have_conns:-0}" -lt "$want_conns" ]; then
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
  if [ -n "$ver" ] && command -v pg_ctlcluster >/dev/null \
      && psql -h 127.0.0.1 -U postgres -qc "ALTER SYSTEM SET max_connections = $want_conns" 2>/dev/null; then
    pg_ctlcluster --skip-systemctl-redirect "$ver" main restart 2>/dev/null || true
    for _ in $(seq 60); do pg_up && break; sleep 0.5; done
  fi
  echo "postgres: max_connections $(psql -h 127.0.0.1 -U postgres -Atc 'SHOW max_connections' 2>/dev/null)" \
       "(wanted $want_conns for parallel test sessions)"
fi

if ! redis_up; then
  command -v redis-server >/dev/null || apt_install Redis redis-server
  mkdir -p /tmp/keel-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/keel-redis --logfile /tmp/keel-redis/redis.log
  for _ in $(seq 50); do redis_up && break; sleep 0.2; done
fi
redis_up && echo "redis: up on 127.0.0.1:6379" || { echo "redis: DOWN" >&2; exit 1; }
