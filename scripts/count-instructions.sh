#!/usr/bin/env bash
# Instructions per call of each kind of `benches/count.rs` (the in-memory engine next to its
# floor), counted by callgrind: a run of N1 calls and one of N2, the difference ÷ (N2 − N1), so
# that start-up and the warm-up call cancel out. Counts do not depend on the machine's load.
#
#   scripts/count-instructions.sh [KIND...]     # default: every kind
#
# Prints one line per kind: instructions per call, allocations per call, and the ratio to the
# floor (and, for first executions, to the replay of the same argument passing).
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(floor replay replay_owned first first_owned)
n1=${IDEM_COUNT_N1:-1000}
n2=${IDEM_COUNT_N2:-3000}
cargo build -q --release --bench count
bin=$(cargo build -q --release --bench count --message-format=json |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "count" and m.get("executable"):
        print(m["executable"])')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
declare -A per_call
for kind in "${kinds[@]}"; do
    for n in "$n1" "$n2"; do
        valgrind --tool=callgrind --callgrind-out-file="$work/$kind.$n" "$bin" "$kind" "$n" \
            >"$work/$kind.$n.out" 2>"$work/$kind.$n.err"
    done
    total() { grep -m1 '^totals:' "$1" | awk '{print $2}'; }
    a=$(total "$work/$kind.$n1"); b=$(total "$work/$kind.$n2")
    per_call[$kind]=$(( (b - a) / (n2 - n1) ))
    allocs=$(grep -o 'allocations per call: [0-9.]*' "$work/$kind.$n2.out" | awk '{print $4}')
    line="$kind: ${per_call[$kind]} instructions per call, $allocs allocations per call"
    if [ -n "${per_call[floor]:-}" ] && [ "$kind" != floor ]; then
        line+=", $(python3 -c "print(f'{${per_call[$kind]} / ${per_call[floor]}:.2f}')")× the floor"
    fi
    replay=${kind/first/replay}
    if [ "$kind" != "$replay" ] && [ -n "${per_call[$replay]:-}" ]; then
        line+=", $(python3 -c "print(f'{${per_call[$kind]} / ${per_call[$replay]}:.2f}')")× $replay"
    fi
    echo "$line"
done
