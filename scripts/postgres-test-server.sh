#!/usr/bin/env bash
# A throwaway PostgreSQL server on a free loopback port for the PostgreSQL tests (feature
# `postgres`).
#
#   scripts/postgres-test-server.sh run CMD...   start a server, run CMD with IDEM_POSTGRES_URL
#                                                set, stop the server, exit with CMD's status
#   scripts/postgres-test-server.sh start        start one; print `export IDEM_POSTGRES_URL=...`
#                                                and `export IDEM_POSTGRES_DIR=...`
#   scripts/postgres-test-server.sh stop DIR     stop the server whose state is in DIR, delete DIR
#   scripts/postgres-test-server.sh restart DIR  stop it (fast: connections are cut) and start it
#                                                again on the same port and data
#
# CI:   scripts/postgres-test-server.sh run cargo test --workspace --all-features
#
# Installs PostgreSQL with apt-get if initdb/pg_ctl are missing (needs root). The cluster lives
# in a temporary directory (initdb, trust authentication for loopback only, fsync off unless
# IDEM_POSTGRES_FSYNC=on, as for benchmarks), listens on 127.0.0.1 only, and is deleted on stop. PostgreSQL refuses to run as root: as root, the
# server runs as the `postgres` user (created by the package) through runuser.
set -euo pipefail

pg_bin() {
    local dir
    if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v pg_ctl)")"
        return 0
    fi
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$dir" ] && [ -x "$dir/pg_ctl" ]; then
        echo "$dir"
        return 0
    fi
    return 1
}

ensure_installed() {
    if ! pg_bin >/dev/null; then
        echo "PostgreSQL not found; installing it with apt-get" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    fi
    pg_bin >/dev/null || { echo "no pg_ctl after installing postgresql" >&2; return 1; }
}

# Runs a server binary as a user PostgreSQL accepts.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# Starts the server whose state is in $1 on port $2; returns non-zero if it did not come up.
start_cluster() {
    local dir=$1 port=$2 bin
    bin=$(pg_bin)
    local durability="-c fsync=off -c full_page_writes=off"
    if [ "${IDEM_POSTGRES_FSYNC:-off}" = on ]; then
        durability="-c fsync=on"
    fi
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 $durability -c max_connections=200" \
        start >/dev/null 2>&1
}

# Starts a server; prints its state directory and port.
start_server() {
    ensure_installed
    local dir port bin
    bin=$(pg_bin)
    dir=$(mktemp -d "${TMPDIR:-/tmp}/idem-postgres.XXXXXX")
    chmod 755 "$dir"
    if [ "$(id -u)" = 0 ]; then
        chown postgres "$dir"
    fi
    if ! as_owner "$bin/initdb" -D "$dir/data" -U idem --auth=trust -E UTF8 --no-instructions \
        >"$dir/initdb.log" 2>&1; then
        echo "initdb failed; see $dir/initdb.log" >&2
        cat "$dir/initdb.log" >&2
        return 1
    fi
    for _ in $(seq 1 50); do
        port=$(( 20000 + RANDOM % 40000 ))
        # A port someone else holds makes the server fail to start; then try another.
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            continue
        fi
        if start_cluster "$dir" "$port"; then
            echo "$port" >"$dir/port"
            if ! as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U idem -d postgres -q \
                -c "CREATE DATABASE idem_test" >/dev/null 2>&1; then
                echo "could not create the test database; see $dir/server.log" >&2
                return 1
            fi
            echo "$dir" "$port"
            return 0
        fi
    done
    echo "could not start PostgreSQL on a free port; see $dir/server.log" >&2
    return 1
}

stop_server() {
    local dir=$1 bin
    bin=$(pg_bin)
    if [ -d "$dir/data" ]; then
        as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
}

restart_server() {
    local dir=$1 bin
    bin=$(pg_bin)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    start_cluster "$dir" "$(cat "$dir/port")"
}

case "${1:-}" in
    run)
        shift
        read -r dir port < <(start_server) || true
        [ -n "${port:-}" ] || { echo "PostgreSQL did not start" >&2; exit 1; }
        trap 'stop_server "$dir"' EXIT
        export IDEM_POSTGRES_URL="postgres://idem@127.0.0.1:$port/idem_test"
        export IDEM_POSTGRES_DIR="$dir"
        echo "PostgreSQL on $IDEM_POSTGRES_URL" >&2
        status=0
        "$@" || status=$?
        exit "$status"
        ;;
    start)
        read -r dir port < <(start_server) || true
        [ -n "${port:-}" ] || { echo "PostgreSQL did not start" >&2; exit 1; }
        echo "export IDEM_POSTGRES_URL=postgres://idem@127.0.0.1:$port/idem_test"
        echo "export IDEM_POSTGRES_DIR=$dir"
        echo "# stop with: $0 stop $dir"
        ;;
    stop)
        stop_server "${2:?usage: $0 stop DIR}"
        ;;
    restart)
        restart_server "${2:?usage: $0 restart DIR}"
        ;;
    *)
        sed -n '2,19p' "$0" >&2
        exit 2
        ;;
esac
