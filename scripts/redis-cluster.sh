#!/usr/bin/env bash
# A throwaway three-master Redis Cluster on free loopback ports, for the Redis Cluster tests.
#
#   scripts/redis-cluster.sh run CMD...   start the cluster, run CMD with IDEM_REDIS_CLUSTER_URLS
#                                         set (comma-separated node URLs), stop the cluster,
#                                         exit with CMD's status
#
# CI:   scripts/redis-cluster.sh run cargo test -p idem-tools-runtime --features redis --test redis_cluster
#
# Every node listens on 127.0.0.1 only, keeps nothing on disk (--save '' --appendonly no) and
# lives in one temporary directory, removed afterwards. Waits are bounded: the script gives up
# (and stops what it started) if the cluster is not `cluster_state:ok` within 30 s.
set -euo pipefail

server=${IDEM_REDIS_SERVER:-redis-server}
cli=${IDEM_REDIS_CLI:-redis-cli}

ensure_installed() {
    if ! command -v "$server" >/dev/null 2>&1 || ! command -v "$cli" >/dev/null 2>&1; then
        echo "redis-server/redis-cli not found; installing them with apt-get" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >&2
    fi
}

dir=""
ports=()

stop_cluster() {
    local pidfile pid
    [ -n "$dir" ] || return 0
    for pidfile in "$dir"/*/redis.pid; do
        [ -s "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
    done
    rm -rf "$dir"
}

# Whether the server answering on $1 is the one whose pid file is $2.
ours() {
    [ -s "$2" ] && [ "$("$cli" -h 127.0.0.1 -p "$1" info server 2>/dev/null | tr -d '\r' \
        | sed -n 's/^process_id://p')" = "$(cat "$2")" ]
}

# Starts one node on a free port in $dir/n$1; appends the port to `ports`.
start_node() {
    local node_dir="$dir/n$1" port
    mkdir -p "$node_dir"
    for _ in $(seq 1 50); do
        port=$(( 20000 + RANDOM % 40000 ))
        # Cluster nodes also listen on port + 10000 (the bus): both must be free.
        [ $(( port + 10000 )) -lt 65536 ] || continue
        rm -f "$node_dir/redis.pid"
        if "$server" --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
            --cluster-config-file "$node_dir/nodes.conf" --cluster-node-timeout 5000 \
            --save '' --appendonly no --dir "$node_dir" --daemonize yes \
            --pidfile "$node_dir/redis.pid" --logfile "$node_dir/redis.log" >/dev/null 2>&1; then
            for _ in $(seq 1 100); do
                if [ "$("$cli" -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; then
                    if ours "$port" "$node_dir/redis.pid"; then
                        ports+=("$port")
                        return 0
                    fi
                    break
                fi
                sleep 0.05
            done
        fi
    done
    echo "could not start cluster node $1; see $node_dir/redis.log" >&2
    return 1
}

start_cluster() {
    ensure_installed
    dir=$(mktemp -d "${TMPDIR:-/tmp}/idem-redis-cluster.XXXXXX")
    for n in 1 2 3; do
        start_node "$n"
    done
    local addrs=()
    for port in "${ports[@]}"; do
        addrs+=("127.0.0.1:$port")
    done
    "$cli" --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 || {
        cat "$dir/create.log" >&2
        return 1
    }
    local deadline=$(( SECONDS + 30 ))
    for port in "${ports[@]}"; do
        until "$cli" -h 127.0.0.1 -p "$port" cluster info 2>/dev/null | tr -d '\r' \
            | grep -qx 'cluster_state:ok'; do
            if [ "$SECONDS" -ge "$deadline" ]; then
                echo "the cluster did not reach cluster_state:ok within 30 s" >&2
                return 1
            fi
            sleep 0.1
        done
    done
}

case "${1:-}" in
    run)
        shift
        [ "$#" -gt 0 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
        trap stop_cluster EXIT
        start_cluster
        urls=()
        for port in "${ports[@]}"; do
            urls+=("redis://127.0.0.1:$port")
        done
        IDEM_REDIS_CLUSTER_URLS=$(IFS=,; echo "${urls[*]}")
        export IDEM_REDIS_CLUSTER_URLS
        echo "redis cluster on $IDEM_REDIS_CLUSTER_URLS" >&2
        status=0
        "$@" || status=$?
        exit "$status"
        ;;
    *)
        sed -n '2,13p' "$0" >&2
        exit 2
        ;;
esac
