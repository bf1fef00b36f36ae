#!/usr/bin/env bash
# Runs examples/transactional.rs against a throwaway local PostgreSQL (started, and deleted at
# the end, by scripts/postgres-test-server.sh; PostgreSQL is installed with apt-get if missing).
#
#   scripts/transactional-example.sh
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/postgres-test-server.sh run cargo run --example transactional --features postgres
