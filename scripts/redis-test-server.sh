#!/usr/bin/env bash
# A throwaway redis-server on a free loopback port for the Redis tests (feature `redis`).
#
#   scripts/redis-test-server.sh run CMD...   start a server, run CMD with IDEM_REDIS_URL set,
#                                             stop the server, exit with CMD's status
#   scripts/redis-test-server.sh start        start one; print `export IDEM_REDIS_URL=...`
#   scripts/redis-test-server.sh stop DIR     stop the server started with state in DIR
#
# CI:   scripts/redis-test-server.sh run cargo test --workspace --all-features
#
# Installs redis-server with apt-get if it is missing (needs root). The server keeps nothing on
# disk (--save '' --appendonly no) and listens on 127.0.0.1 only. Tests that kill and restart a
# server start their own from the same binary (IDEM_REDIS_SERVER, else PATH).
set -euo pipefail

ensure_installed() {
    if ! command -v "${IDEM_REDIS_SERVER:-redis-server}" >/dev/null 2>&1; then
        echo "redis-server not found; installing it with apt-get" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >&2
    fi
}

# Starts a server; prints its state directory and port.
start_server() {
    ensure_installed
    local dir port
    dir=$(mktemp -d "${TMPDIR:-/tmp}/idem-redis.XXXXXX")
    for _ in $(seq 1 50); do
        port=$(( 20000 + RANDOM % 40000 ))
        # A port someone else holds makes redis-server exit at once; then try another.
        if "${IDEM_REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 \
            --save '' --appendonly no --dir "$dir" --daemonize yes \
            --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null 2>&1; then
            for _ in $(seq 1 100); do
                if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; then
                    # Make sure the server answering is ours, not one already on that port.
                    if [ -s "$dir/redis.pid" ] && [ "$(redis-cli -h 127.0.0.1 -p "$port" \
                        info server | tr -d '\r' | sed -n 's/^process_id://p')" = \
                        "$(cat "$dir/redis.pid")" ]; then
                        echo "$dir" "$port"
                        return 0
                    fi
                    break
                fi
                sleep 0.05
            done
        fi
    done
    echo "could not start redis-server on a free port; see $dir/redis.log" >&2
    return 1
}

stop_server() {
    local dir=$1 pid
    if [ -s "$dir/redis.pid" ]; then
        pid=$(cat "$dir/redis.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
    fi
    rm -rf "$dir"
}

case "${1:-}" in
    run)
        shift
        read -r dir port < <(start_server)
        trap 'stop_server "$dir"' EXIT
        export IDEM_REDIS_URL="redis://127.0.0.1:$port"
        echo "redis-server on $IDEM_REDIS_URL" >&2
        status=0
        "$@" || status=$?
        exit "$status"
        ;;
    start)
        read -r dir port < <(start_server)
        echo "export IDEM_REDIS_URL=redis://127.0.0.1:$port"
        echo "# stop with: $0 stop $dir"
        ;;
    stop)
        stop_server "${2:?usage: $0 stop DIR}"
        ;;
    *)
        sed -n '2,14p' "$0" >&2
        exit 2
        ;;
esac
