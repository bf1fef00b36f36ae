#!/usr/bin/env bash
# Tests of examples/mcp_server.rs with MCP clients idem did not write.
#
#   scripts/mcp-client-tests.sh [clients]   the official Python SDK (pytest, in a virtual
#                                           environment) over stdio and streamable HTTP, protocols
#                                           2025-11-25 and 2026-07-28; then the official
#                                           TypeScript SDK (node --test), if node and npm exist
#   scripts/mcp-client-tests.sh rmcp-versions
#                                           the Rust MCP tests with the lowest and the newest rmcp
#                                           the caret requirement admits (Cargo.lock is restored)
#
# Needs python3 >= 3.10 (and node >= 18 with npm for the TypeScript SDK; IDEM_REQUIRE_NODE=1
# makes their absence a failure). The packages come from PyPI and the npm registry, pinned in
# tests/mcp-clients/python/requirements.txt and tests/mcp-clients/node/package.json.
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir() {
    cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

clients() {
    local target work server status
    target=$(target_dir)
    work="$target/mcp-clients"
    mkdir -p "$work"
    echo "--- building the example server"
    cargo build --example mcp_server --features rmcp,sqlite
    server="$target/debug/examples/mcp_server"
    export IDEM_MCP_SERVER="$server"

    echo "--- the official Python SDK (pytest)"
    if [ ! -x "$work/venv/bin/python" ]; then
        python3 -m venv "$work/venv"
    fi
    "$work/venv/bin/pip" install --quiet --disable-pip-version-check \
        -r tests/mcp-clients/python/requirements.txt
    "$work/venv/bin/pip" list --disable-pip-version-check 2>/dev/null | grep -iE '^(mcp|pytest) '
    status=0
    (cd tests/mcp-clients/python &&
        PYTHONDONTWRITEBYTECODE=1 "$work/venv/bin/python" -m pytest -q -p no:cacheprovider) ||
        status=$?
    if [ "$status" -eq 5 ]; then
        echo "pytest collected no test: that is a failure here" >&2
        return 1
    elif [ "$status" -ne 0 ]; then
        return "$status"
    fi

    echo "--- the official TypeScript SDK (node --test)"
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        if [ "${IDEM_REQUIRE_NODE:-0}" = 1 ]; then
            echo "node and npm are required (IDEM_REQUIRE_NODE=1)" >&2
            return 1
        fi
        echo "node or npm not found: the TypeScript SDK tests are skipped"
        return 0
    fi
    (
        cd tests/mcp-clients/node
        npm install --no-audit --no-fund --no-package-lock --loglevel=error
        npm ls @modelcontextprotocol/sdk
        node --test
    )
}

rmcp_versions() {
    local lowest tests
    # The lowest version the requirements in Cargo.toml admit (rmcp = "X.Y" means >= X.Y.0).
    lowest=$(sed -n 's/^rmcp = { version = "\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1).0
    tests=(--test mcp_server --test mcp_sessions --test mcp_http)
    cp Cargo.lock "$(target_dir)/Cargo.lock.mcp-saved"
    trap 'cp "$(target_dir)/Cargo.lock.mcp-saved" Cargo.lock' EXIT
    for version in "$lowest" newest; do
        if [ "$version" = newest ]; then
            cargo update -p rmcp
        else
            cargo update -p rmcp --precise "$version"
        fi
        echo "--- with $(cargo tree -p idem-tools --features rmcp -e normal -i rmcp --depth 0 | head -n 1)"
        cargo test -p idem-tools --features rmcp "${tests[@]}"
    done
}

case "${1:-clients}" in
    clients) clients ;;
    rmcp-versions) rmcp_versions ;;
    *)
        echo "usage: $0 [clients|rmcp-versions]" >&2
        exit 2
        ;;
esac
