#!/usr/bin/env bash
# What annotating tools costs at compile time: the share of a crate's LLVM IR that is idem's
# (cargo llvm-lines), and the debug build time of N annotated tools against N bare `async fn`s.
#
#   scripts/compile-cost.sh [REPO] [CRATE] [N_IR] [N_TIME]
#
# REPO: the idem checkout to measure (default: this one); CRATE: its facade crate's name
# (`idem-tools`; `idem` for checkouts from before the rename); N_IR: tools in the IR crate
# (default 20); N_TIME: tools in the build-time crates (default 200). Needs cargo-llvm-lines
# (`cargo install cargo-llvm-lines`). Prints one line per measure: the IR of N_IR tools that
# return one result type, then of N_IR tools that each return their own. IDEM_KEEP_WORK=1 keeps
# the work directory (the crates, and `ir-one.txt`, `ir-bare-one.txt`, `ir-each.txt`,
# `ir-bare-each.txt`: `cargo llvm-lines` of each).
set -euo pipefail
repo=$(cd "${1:-$(dirname "$0")/..}" && pwd)
crate=${2:-idem-tools}
n_ir=${3:-20}
n_time=${4:-200}
lib=${crate//-/_}
work=$(mktemp -d "${TMPDIR:-/tmp}/idem-compile-cost.XXXXXX")
trap '[ -n "${IDEM_KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
export CARGO_TARGET_DIR="$work/target"

# A crate of $2 tools, annotated ($3 = idem) or bare ($3 = bare), in directory $1; all return
# one result type, or ($4 = each) each its own, as the tools of a real crate usually do (the
# record's encoder and decoder are compiled once per result type).
make_crate() {
    local dir=$1 n=$2 kind=$3 types=${4:-one}
    mkdir -p "$dir/src"
    cat >"$dir/Cargo.toml" <<EOF
[package]
name = "tools-$kind-$n"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
$crate = { path = "$repo" }
serde = { version = "1", features = ["derive"] }

[workspace]
EOF
    {
        echo '#[derive(serde::Serialize, serde::Deserialize)]'
        echo 'pub struct Receipt { pub id: u64, pub to: String }'
        for i in $(seq 1 "$n"); do
            local ty=Receipt
            if [ "$types" = each ]; then
                ty=Receipt$i
                echo '#[derive(serde::Serialize, serde::Deserialize)]'
                echo "pub struct $ty { pub id: u64, pub to: String }"
            fi
            if [ "$kind" = idem ]; then
                echo "#[$lib::idempotent]"
                echo "pub async fn tool_$i(to: String, amount: u64) -> Result<$ty, $lib::Error> {"
            else
                echo "pub async fn tool_$i(to: String, amount: u64) -> Result<$ty, std::io::Error> {"
            fi
            echo "    Ok($ty { id: amount + $i, to })"
            echo "}"
        done
    } >"$dir/src/lib.rs"
}

# The dependencies are built once, outside the measures.
make_crate "$work/warm" 1 idem
(cd "$work/warm" && cargo build -q 2>/dev/null)

# The IR of $n_ir tools that return one result type ($1 = one) or each its own ($1 = each).
ir_reading() {
    local types=$1
    make_crate "$work/ir-$types" "$n_ir" idem "$types"
    (cd "$work/ir-$types" && cargo llvm-lines --lib 2>/dev/null) >"$work/ir-$types.txt"
    make_crate "$work/ir-bare-$types" "$n_ir" bare "$types"
    (cd "$work/ir-bare-$types" && cargo llvm-lines --lib 2>/dev/null) >"$work/ir-bare-$types.txt"
    # Two readings: the lines in functions named by idem's crates, and the lines the annotations add
    # in all (the annotated crate's IR against the same crate bare). The second counts the serde and
    # serde_json code instantiated for idem's encoding and decoding, which the first does not see.
    python3 - "$work/ir-$types.txt" "$work/ir-bare-$types.txt" "$lib" "$n_ir" "$types" <<'EOF'
import re, sys
path, bare_path, lib, n, types = sys.argv[1:6]
what = f"{n} tools" if types == "one" else f"{n} tools, {n} result types"
def read(path):
    total = idem = 0
    for line in open(path):
        m = re.match(r'\s*(\d+)\s+\(\s*[\d.]+%.*?\)\s+(\d+)\s+\(.*?\)\s+(.*)', line)
        if not m:
            continue
        lines, name = int(m.group(1)), m.group(3)
        total += lines
        if lib + '::' in name or (lib + '_runtime::') in name or (lib + '_tools_runtime::') in name \
                or 'idem_runtime::' in name or 'idem_tools_runtime::' in name:
            idem += lines
    return total, idem
total, idem = read(path)
bare, _ = read(bare_path)
added = total - bare
print(f"llvm-lines: {what}: {idem} of {total} lines are in idem's functions ({100 * idem / max(total, 1):.1f}%)")
print(f"llvm-lines: {what}: {added} of {total} lines are added by the annotations ({100 * added / max(total, 1):.1f}%; the bare crate has {bare})")
EOF
}
ir_reading one
ir_reading each

# Build times: each crate built from scratch (its dependencies built already) `runs` times
# (IDEM_BUILD_RUNS, default 3); the least wall time and the least CPU time (user + system, of
# cargo and rustc) of the runs, which a busy machine inflates least.
runs=${IDEM_BUILD_RUNS:-3}
declare -A wall cpu
for kind in bare idem; do
    make_crate "$work/$kind" "$n_time" "$kind"
    (cd "$work/$kind" && cargo build -q 2>/dev/null) # its dependencies, once
    best_wall="" best_cpu=""
    for _ in $(seq 1 "$runs"); do
        (cd "$work/$kind" && cargo clean -q -p "tools-$kind-$n_time" 2>/dev/null)
        read -r w c < <(cd "$work/$kind" && /usr/bin/time -f "%e %U %S" cargo build -q 2>&1 >/dev/null |
            tail -1 | awk '{print $1, $2 + $3}')
        best_wall=$(python3 -c "print(min(x for x in [$w, ${best_wall:-$w}]))")
        best_cpu=$(python3 -c "print(min(x for x in [$c, ${best_cpu:-$c}]))")
    done
    wall[$kind]=$best_wall cpu[$kind]=$best_cpu
    echo "build: $n_time $kind tools: ${best_wall} s wall, ${best_cpu} s CPU (least of $runs)"
done
python3 -c "print(f'build: idem / bare: {${wall[idem]} / ${wall[bare]}:.1f}x wall, {${cpu[idem]} / ${cpu[bare]}:.1f}x CPU')"
