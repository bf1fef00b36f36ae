#!/usr/bin/env bash
# What turning on a store feature costs the calls of another store, as a user sees it: a crate
# outside this workspace (whose dev-dependencies always pull sqlx, and with it `tracing`'s `log`
# feature) calls an `#[idempotent]` tool on a `MemoryStore`, replaying, with no `tracing`
# subscriber and no `log` logger installed; callgrind counts its instructions per call at two
# numbers of calls (the difference ÷ the difference, so start-up cancels out), once per feature
# set of idem-tools.
#
#   scripts/feature-tax.sh [REPO] [FEATURE_SET...]
#
# REPO: the idem checkout (default: this one). FEATURE_SET: comma-separated idem-tools features,
# `-` for none (default: - postgres redis sqlite postgres,redis,sqlite). Needs valgrind. Prints
# one line per feature set and kind (attached: a borrowed argument; detached: owned arguments):
# instructions per call, and how many of them run code of the tracing, tracing-core and log
# crates. Counts of different builds also differ by inlining (about 100 instructions either way
# here); the second figure is the tax this measures.
# IDEM_KEEP_WORK=1 keeps the work directory.
set -euo pipefail
repo=$(cd "${1:-$(dirname "$0")/..}" && pwd)
shift || true
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(- postgres redis sqlite postgres,redis,sqlite)
n1=${IDEM_COUNT_N1:-1000}
n2=${IDEM_COUNT_N2:-3000}
work=$(mktemp -d "${TMPDIR:-/tmp}/idem-feature-tax.XXXXXX")
trap '[ -n "${IDEM_KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
export CARGO_TARGET_DIR="${IDEM_TAX_TARGET:-$work/target}"

mkdir -p "$work/tax/src"
cat >"$work/tax/src/main.rs" <<'EOF'
//! `tax KIND N`: one call of KIND, then N replays of it, on a `MemoryStore`.
use std::hint::black_box;
use std::sync::Arc;

use idem_tools::{MemoryStore, Turn, idempotent};

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Receipt {
    pub id: u64,
    pub to: String,
}

/// Borrows an argument: runs attached.
#[idempotent]
async fn send(to: &str, amount: u64) -> Result<Receipt, idem_tools::Error> {
    Ok(Receipt { id: amount, to: to.to_owned() })
}

/// Owns its arguments: runs detached.
#[idempotent]
async fn send_owned(to: String, amount: u64) -> Result<Receipt, idem_tools::Error> {
    Ok(Receipt { id: amount, to })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().expect("a kind: attached or detached");
    let n: u64 = args.next().expect("a number of replays").parse().expect("a number");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let turn = Turn::new("tax")
        .with_store(Arc::new(MemoryStore::new()))
        .with_max_attempts_per_key(u32::MAX);
    rt.block_on(turn.scope(async {
        for _ in 0..=n {
            let receipt = match kind.as_str() {
                "attached" => send(black_box("ada"), 7).await,
                _ => send_owned(black_box("ada").to_owned(), 7).await,
            };
            black_box(receipt.expect("replayed"));
        }
    }));
}
EOF

for set in "${sets[@]}"; do
    features=""
    [ "$set" = - ] || features=", features = [\"${set//,/\", \"}\"]"
    cat >"$work/tax/Cargo.toml" <<EOF
[package]
name = "tax"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
idem-tools = { path = "$repo"$features }
serde = { version = "1", features = ["derive"] }
tokio = { version = "1", features = ["rt", "time"] }

[profile.release]
debug = "line-tables-only"

[workspace]
EOF
    (cd "$work/tax" && cargo build -q --release 2>/dev/null)
    cp "$CARGO_TARGET_DIR/release/tax" "$work/tax-$set"
    for kind in attached detached; do
        for n in "$n1" "$n2"; do
            valgrind --tool=callgrind --callgrind-out-file="$work/$set.$kind.$n" \
                "$work/tax-$set" "$kind" "$n" >/dev/null 2>&1
        done
        total() { grep -m1 '^totals:' "$1" | awk '{print $2}'; }
        # Instructions whose source is the tracing, tracing-core or log crates, inlined or not
        # (callgrind attributes an instruction to the file of its line).
        logging() {
            callgrind_annotate --auto=no "$1" 2>/dev/null |
                awk '/\/(tracing|tracing-core|log)-[0-9][^\/]*\// {gsub(",", "", $1); n += $1} END {print n + 0}'
        }
        a=$(total "$work/$set.$kind.$n1"); b=$(total "$work/$set.$kind.$n2")
        la=$(logging "$work/$set.$kind.$n1"); lb=$(logging "$work/$set.$kind.$n2")
        echo "features ${set}: $kind replay: $(( (b - a) / (n2 - n1) )) instructions per call," \
            "$(( (lb - la) / (n2 - n1) )) of them in tracing or log"
    done
done
