#!/usr/bin/env bash
# What the README and docs/ tell a user to type, run as written, from outside this workspace.
#
#   scripts/readme-as-written.sh
#
# 1. A fresh crate next to this checkout (a temporary directory holding `idem`, a link to the
#    checkout, and `app`): its Cargo.toml is the README's first `toml` block as written, its
#    src/main.rs the README's first `rust` block; it is built and run, and the retry in it
#    must replay (one "sending" line).
# 2. Every `idem-tools = …` dependency line in README.md and docs/*.md resolves from that crate
#    (`cargo tree`): the features it names exist, the path is the one the README uses.
# 3. Every `cargo install …` line in README.md and docs/*.md runs as written in the checkout,
#    with `--root` added (a temporary directory), and the installed `idem --help` runs.
#
# The fresh crates start from this workspace's Cargo.lock and share its target directory, so
# they build the dependency versions CI tests, and only what the workspace's builds have not.
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD
target=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
export CARGO_TARGET_DIR="$target"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ln -s "$checkout" "$tmp/idem"

# A crate `$1` in $tmp, its manifest a package header and the text on stdin.
new_crate() {
    mkdir -p "$tmp/$1/src"
    {
        printf '[package]\nname = "%s"\nversion = "0.0.0"\nedition = "2024"\npublish = false\n\n' "$1"
        cat
    } >"$tmp/$1/Cargo.toml"
    cp Cargo.lock "$tmp/$1/Cargo.lock"
}

# The body of the first fenced block of `$1` (toml, rust, ...) after the heading `$2`.
block() {
    python3 - "$1" "$2" <<'EOF'
import re, sys
lang, heading = sys.argv[1], sys.argv[2]
readme = open("README.md").read()
section = readme[readme.index(heading):]
found = re.search(rf"^```{lang}\n(.*?)^```", section, re.S | re.M)
if not found:
    sys.exit(f"README.md: no {lang} block after {heading!r}")
print(found.group(1), end="")
EOF
}

echo "--- the README's first example, in a fresh crate with its Cargo.toml lines as written"
block toml "## Annotate your tools" | new_crate app
block rust "## Annotate your tools" >"$tmp/app/src/main.rs"
sed -n '/^\[dependencies\]/,$p' "$tmp/app/Cargo.toml"
cargo run --quiet --manifest-path "$tmp/app/Cargo.toml" | tee "$tmp/app.out"
[ "$(grep -c '^sending ' "$tmp/app.out")" = 1 ] || {
    echo "the README's example sent more or less than once" >&2
    exit 1
}

echo "--- every idem-tools dependency line in README.md and docs/ resolves from a fresh crate"
python3 - >"$tmp/lines" <<'EOF'
import glob, re
for path in ["README.md", *sorted(glob.glob("docs/*.md"))]:
    for line in re.findall(r'idem-tools = (?:\{[^}\n]*\}|"[^"\n]*")', open(path).read()):
        print(f"{path}\t{line}")
EOF
[ -s "$tmp/lines" ] || {
    echo "no idem-tools dependency line found" >&2
    exit 1
}
while IFS=$'\t' read -r file line; do
    printf '%s: %s\n' "$file" "$line"
    rm -rf "$tmp/probe"
    printf '[dependencies]\n%s\n' "$line" | new_crate probe
    touch "$tmp/probe/src/lib.rs"
    cargo tree --quiet --depth 1 --manifest-path "$tmp/probe/Cargo.toml" >/dev/null
done <"$tmp/lines"

echo "--- every cargo install line in README.md and docs/, as written (with --root added)"
python3 - >"$tmp/installs" <<'EOF'
import glob, re
for path in ["README.md", *sorted(glob.glob("docs/*.md"))]:
    for command in re.findall(r"^\$ (cargo install [^#\n]*?)\s*(?:#.*)?$", open(path).read(), re.M):
        print(f"{path}\t{command}")
EOF
[ -s "$tmp/installs" ] || {
    echo "no cargo install line found" >&2
    exit 1
}
n=0
while IFS=$'\t' read -r file command; do
    n=$((n + 1))
    printf '%s: %s\n' "$file" "$command"
    read -ra words <<<"$command"
    "${words[@]}" --root "$tmp/root-$n"
    "$tmp/root-$n/bin/idem" --help >"$tmp/help"
    grep -q '^Usage: idem' "$tmp/help"
done <"$tmp/installs"
echo "the README's example and install lines work as written"
