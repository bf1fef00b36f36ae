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
# Failovers (the failover tests drive these; DIR is a server started here):
#   scripts/postgres-test-server.sh standby DIR [PORT]  a streaming standby of the server in DIR
#                                                (pg_basebackup -R through 127.0.0.1:PORT, the
#                                                server's own port by default), started on a free
#                                                port; prints its state directory and port
#   scripts/postgres-test-server.sh sync DIR on|off  make the server's standbys synchronous
#                                                (synchronous_standby_names = '*'), or not
#   scripts/postgres-test-server.sh wait-standby DIR  wait until a standby streams from it (and,
#                                                if its standbys are synchronous, is synchronous)
#   scripts/postgres-test-server.sh promote DIR  promote the standby in DIR to a primary
#   scripts/postgres-test-server.sh freeze DIR   SIGSTOP its postmaster and every process of it:
#                                                connections stay open and nothing answers
#   scripts/postgres-test-server.sh thaw DIR     SIGCONT them: what was sent meanwhile runs
#   scripts/postgres-test-server.sh kill DIR     SIGKILL them all (a host that dies)
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

# A new state directory the server's user owns; prints it.
new_dir() {
    local dir
    dir=$(mktemp -d "${TMPDIR:-/tmp}/idem-postgres.XXXXXX")
    chmod 755 "$dir"
    if [ "$(id -u)" = 0 ]; then
        chown postgres "$dir"
    fi
    echo "$dir"
}

# Starts the server whose state is in $1 on a free port, kept in $1/port; prints the port.
start_on_free_port() {
    local dir=$1 port
    for _ in $(seq 1 50); do
        port=$(( 20000 + RANDOM % 40000 ))
        # A port someone else holds makes the server fail to start; then try another.
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            continue
        fi
        if start_cluster "$dir" "$port"; then
            echo "$port" >"$dir/port"
            echo "$port"
            return 0
        fi
    done
    echo "could not start PostgreSQL on a free port; see $dir/server.log" >&2
    return 1
}

# Starts a server; prints its state directory and port.
start_server() {
    ensure_installed
    local dir port bin
    bin=$(pg_bin)
    dir=$(new_dir)
    if ! as_owner "$bin/initdb" -D "$dir/data" -U idem --auth=trust -E UTF8 --no-instructions \
        >"$dir/initdb.log" 2>&1; then
        echo "initdb failed; see $dir/initdb.log" >&2
        cat "$dir/initdb.log" >&2
        return 1
    fi
    port=$(start_on_free_port "$dir") || return 1
    if ! as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U idem -d postgres -q \
        -c "CREATE DATABASE idem_test" >/dev/null 2>&1; then
        echo "could not create the test database; see $dir/server.log" >&2
        return 1
    fi
    echo "$dir" "$port"
}

# The postmaster of the server in $1 and every process it started, one pid a line.
server_pids() {
    local pid
    pid=$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null) || return 0
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 0
    echo "$pid"
    ps -o pid= --ppid "$pid" 2>/dev/null | tr -d ' ' || true
}

# Sends signal $2 to the server in $1: the postmaster first (so that it starts nothing more).
signal_server() {
    local pids
    pids=$(server_pids "$1")
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086 # one pid a word
    kill "-$2" $pids 2>/dev/null || true
}

# Runs SQL on the server in $1.
psql_on() {
    local dir=$1 bin
    shift
    bin=$(pg_bin)
    as_owner "$bin/psql" -h 127.0.0.1 -p "$(cat "$dir/port")" -U idem -d postgres -qAt -v ON_ERROR_STOP=1 "$@"
}

# A streaming standby of the server in $1, through 127.0.0.1:$2 (default: its port), started on
# a free port; prints its state directory and port.
start_standby() {
    local primary=$1 via=${2:-} dir port bin
    bin=$(pg_bin)
    via=${via:-$(cat "$primary/port")}
    dir=$(new_dir)
    if ! as_owner "$bin/pg_basebackup" -h 127.0.0.1 -p "$via" -U idem -D "$dir/data" -R \
        -X stream -c fast >"$dir/basebackup.log" 2>&1; then
        echo "pg_basebackup failed; see $dir/basebackup.log" >&2
        cat "$dir/basebackup.log" >&2
        return 1
    fi
    port=$(start_on_free_port "$dir") || return 1
    echo "$dir" "$port"
}

stop_server() {
    local dir=$1 bin
    bin=$(pg_bin)
    # A frozen server handles no signal but SIGKILL until it is thawed.
    signal_server "$dir" CONT
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
    standby)
        start_standby "${2:?usage: $0 standby DIR [PORT]}" "${3:-}"
        ;;
    sync)
        dir=${2:?usage: $0 sync DIR on|off}
        case "${3:?usage: $0 sync DIR on|off}" in
            on) psql_on "$dir" -c "ALTER SYSTEM SET synchronous_standby_names = '*'" ;;
            off) psql_on "$dir" -c "ALTER SYSTEM RESET synchronous_standby_names" ;;
            *) echo "usage: $0 sync DIR on|off" >&2; exit 2 ;;
        esac
        psql_on "$dir" -c "SELECT pg_reload_conf()" >/dev/null
        ;;
    wait-standby)
        dir=${2:?usage: $0 wait-standby DIR}
        for _ in $(seq 1 300); do
            if [ "$(psql_on "$dir" -c "SELECT count(*) FROM pg_stat_replication \
                WHERE state = 'streaming' AND (sync_state = 'sync' \
                OR current_setting('synchronous_standby_names') = '')")" -gt 0 ]; then
                exit 0
            fi
            sleep 0.1
        done
        echo "no standby streaming from $dir after 30 s" >&2
        exit 1
        ;;
    promote)
        dir=${2:?usage: $0 promote DIR}
        as_owner "$(pg_bin)/pg_ctl" -D "$dir/data" -w -t 30 promote >/dev/null
        ;;
    freeze)
        signal_server "${2:?usage: $0 freeze DIR}" STOP
        ;;
    thaw)
        signal_server "${2:?usage: $0 thaw DIR}" CONT
        ;;
    kill)
        signal_server "${2:?usage: $0 kill DIR}" KILL
        ;;
    *)
        sed -n '2,33p' "$0" >&2
        exit 2
        ;;
esac
