#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests and local replicas: loopback only, data under .ci-state/pg.
#
#   scripts/postgres.sh start   installs the Debian package if missing (as root), initialises and starts the server
#                               (or reuses the running one), and prints ONLY its SQLAlchemy URL on stdout
#   scripts/postgres.sh stop    stops it (the data directory is kept)
#   scripts/postgres.sh url     prints the URL of the running server
#
# Logs go to stderr. Safe to call concurrently (flock) and quick when the server already runs.
set -euo pipefail

exec 3>&1 1>&2  # stdout carries the URL only

root=$(cd "$(dirname "$0")/.." && pwd)
state=${SPECTUNE_PG_STATE:-$root/.ci-state/pg}
data=$state/data
role=spectune
database=spectune

log() { echo "postgres.sh: $*"; }

is_root() { [ "$(id -u)" = 0 ]; }

# initdb and the server refuse to run as root, so root hands them to the `postgres` user.
as_owner() {
  if is_root; then runuser -u postgres -- "$@"; else "$@"; fi
}

find_bindir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$dir" ] && [ -x "$dir/pg_ctl" ] && echo "$dir"
}

install_postgres() {
  if ! is_root; then
    log "PostgreSQL is not installed and only root can install it (apt-get install postgresql)"
    exit 1
  fi
  log "installing the postgresql Debian package"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q postgresql || { apt-get update -q && apt-get install -y -q postgresql; }
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

running() { as_owner "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; }

# Line 4 of postmaster.pid is the port the running server listens on.
current_port() { sed -n 4p "$data/postmaster.pid"; }

init_cluster() {
  log "initialising a cluster in $data"
  rm -rf "$data"
  if is_root; then chown postgres: "$state"; fi
  (umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$state/password")
  if is_root; then chown postgres: "$state/password"; fi
  as_owner "$bindir/initdb" -D "$data" -U "$role" --pwfile="$state/password" --auth=scram-sha-256 \
    -E UTF8 --no-locale --no-sync >/dev/null
  # A test server: loopback TCP only, no Unix socket, and durability traded for speed.
  cat >>"$data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
EOF
}

url() {
  echo "postgresql+psycopg://$role:$(cat "$state/password")@127.0.0.1:$(current_port)/$database"
}

start() {
  bindir=$(find_bindir) || { install_postgres; bindir=$(find_bindir); }
  [ -s "$data/PG_VERSION" ] && [ -s "$state/password" ] || init_cluster
  if running; then
    log "reusing the server on port $(current_port)"
  else
    local port
    port=$(free_port)
    log "starting PostgreSQL on 127.0.0.1:$port"
    # The server must not inherit the URL pipe (fd 3) or the lock (fd 9), or callers and later runs would wait on it.
    as_owner "$bindir/pg_ctl" -D "$data" -l "$state/server.log" -w -t 60 -o "-p $port" start >/dev/null 3>&- 9>&-
  fi
  local port
  port=$(current_port)
  export PGPASSWORD
  PGPASSWORD=$(cat "$state/password")
  if [ -z "$("$bindir/psql" -h 127.0.0.1 -p "$port" -U "$role" -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '$database'")" ]; then
    "$bindir/createdb" -h 127.0.0.1 -p "$port" -U "$role" "$database"
  fi
  url >&3
}

stop() {
  bindir=$(find_bindir) || { log "PostgreSQL is not installed"; return 0; }
  if running; then
    as_owner "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    log "stopped"
  else
    log "not running"
  fi
}

cmd=${1:-}
case "$cmd" in
  start | stop | url) ;;
  *) log "usage: $0 start|stop|url"; exit 2 ;;
esac

mkdir -p "$state"
exec 9>"$state/lock"
flock 9

case "$cmd" in
  start) start ;;
  stop) stop ;;
  url)
    bindir=$(find_bindir) && running || { log "not running"; exit 1; }
    url >&3
    ;;
esac
