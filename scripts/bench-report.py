#!/usr/bin/env python3
"""Runs idem's benchmarks and prints ONE table of ratios, marking which targets are met.

    scripts/bench-report.py                      # cargo bench --bench calls, then --bench scale
    scripts/bench-report.py --features sqlite    # also the SQLite rows (redis: set IDEM_REDIS_URL)
    scripts/bench-report.py --stores sqlite,redis   # idem bench on each store, next to its floor
    scripts/postgres-test-server.sh run scripts/bench-report.py --stores postgres   # PostgreSQL
    scripts/bench-report.py --stores sqlite --instructions   # and callgrind counts per call
    scripts/bench-report.py --no-run             # only read the results of the last run

It reads criterion's target/criterion/**/new/{benchmark,estimates}.json (the median of each
benchmark), the `scale ...` lines of the scale bench (kept in target/criterion/scale.txt), and
for `--stores` the JSON of `idem bench` (the operator CLI's benchmark: latency percentiles and
throughput, idem and the hand-written floor alternately in one run; kept in
target/criterion/stores.json) and with `--instructions` the instructions per call counted by
callgrind on `idem bench --exact` (kept in target/criterion/instructions.json). Before a run it
removes the previous results of the groups it runs, so the table is from one run. Extra
arguments after `--` go to the criterion benches (e.g. `-- --measurement-time 10`).
The exit status is 0 even when targets are missed: the table says which.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
CRITERION = TARGET / "criterion"
SCALE_OUT = CRITERION / "scale.txt"
STORES_OUT = CRITERION / "stores.json"
INSTRUCTIONS_OUT = CRITERION / "instructions.json"
IDEM = TARGET / "release" / "idem"
# idem bench runs: (label, extra arguments); each store is measured with both.
STORE_RUNS = [("64 tasks", ["--concurrency", "64"]),
              ("4 processes × 16 tasks", ["--concurrency", "16", "--processes", "4"])]
# Calls counted by callgrind: the difference of two runs, divided by their difference.
EXACT = (1000, 3000)
GROUPS = ["calls", "key", "throughput", "sqlite", "redis"]
SIZES = ["small", "1KiB", "64KiB"]
PAUSE_NS = 1_000_000


def run(features, extra):
    for group in GROUPS:
        shutil.rmtree(CRITERION / group, ignore_errors=True)
    feature_args = ["--features", features] if features else []
    bench = ["cargo", "bench", *feature_args]
    targets = ["calls"] + [store for store in ("sqlite", "redis")
                           if store in features.replace(",", " ").split()]
    for target in targets:
        subprocess.run([*bench, "--bench", target, "--", *extra], cwd=ROOT, check=True,
                       stdout=sys.stderr)
    scale = subprocess.run([*bench, "--bench", "scale", "--", *extra], cwd=ROOT, check=True,
                           stdout=subprocess.PIPE, text=True)
    sys.stderr.write(scale.stdout)
    CRITERION.mkdir(parents=True, exist_ok=True)
    SCALE_OUT.write_text(scale.stdout)


def store_urls(stores, workdir):
    """[(store name, idem global arguments)] for the stores asked for."""
    urls = []
    for store in stores:
        if store == "sqlite":
            urls.append(("sqlite", ["--sqlite", str(Path(workdir) / "bench.db")]))
        elif store == "redis":
            url = os.environ.get("IDEM_REDIS_URL")
            if not url:
                sys.stderr.write("redis: skipped (IDEM_REDIS_URL is not set)\n")
                continue
            urls.append(("redis", ["--redis", url]))
        elif store == "postgres":
            url = os.environ.get("IDEM_POSTGRES_URL")
            if not url:
                sys.stderr.write("postgres: skipped (IDEM_POSTGRES_URL is not set)\n")
                continue
            # A schema of its own per run, as the SQLite runs get a file of their own.
            schema = "idem_bench_" + Path(workdir).name.lower().replace("-", "_").strip("_")
            urls.append(("postgres", ["--postgres", url, "--schema", schema]))
        else:
            sys.exit(f"--stores: unknown store {store!r} (sqlite, redis, postgres)")
    return urls


def build_cli():
    subprocess.run(["cargo", "build", "--release", "-p", "idem-tools-cli"], cwd=ROOT, check=True,
                   stdout=sys.stderr)


def run_stores(stores, instructions):
    """idem bench on each store (and callgrind on --exact), results kept as JSON."""
    build_cli()
    CRITERION.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name, args in store_urls(stores, workdir):
            for label, extra in STORE_RUNS:
                out = subprocess.run([str(IDEM), *args, "--json", "bench", *extra], check=True,
                                     stdout=subprocess.PIPE, text=True)
                results.setdefault(name, {})[label] = json.loads(out.stdout)
    STORES_OUT.write_text(json.dumps(results, indent=1))
    if not instructions:
        return
    counts = {}
    for name in stores:
        for kind in ("replay", "first", "floor-replay", "floor-first"):
            total = []
            for n in EXACT:
                # A scratch store per run: what --exact records is left in place.
                with tempfile.TemporaryDirectory() as workdir:
                    (_, args), = store_urls([name], workdir) or [(None, None)]
                    if args is None:
                        break
                    out_file = Path(workdir) / "callgrind.out"
                    run = subprocess.run(["valgrind", "--tool=callgrind",
                                          f"--callgrind-out-file={out_file}", str(IDEM), *args,
                                          "bench", "--exact", f"{kind}:{n}"],
                                         check=True, stderr=subprocess.PIPE, text=True)
                    found = re.search(r"Collected : ([\d,]+)", run.stderr)
                    total.append(int(found.group(1).replace(",", "")))
            if len(total) == 2:
                counts.setdefault(name, {})[kind] = (total[1] - total[0]) / (EXACT[1] - EXACT[0])
    INSTRUCTIONS_OUT.write_text(json.dumps(counts, indent=1))


def load_json(path):
    return json.loads(path.read_text()) if path.exists() else {}


def load_estimates(criterion=CRITERION):
    """{(group, function, value): {"median": ns, "lo": ns, "hi": ns}} from criterion's files."""
    results = {}
    for bench_json in criterion.glob("**/new/benchmark.json"):
        meta = json.loads(bench_json.read_text())
        est_path = bench_json.parent / "estimates.json"
        if not est_path.exists():
            continue
        est = json.loads(est_path.read_text())
        mean_ci = est["mean"]["confidence_interval"]
        key = (meta["group_id"], meta.get("function_id"), meta.get("value_str"))
        results[key] = {
            "median": est["median"]["point_estimate"],
            "lo": mean_ci["lower_bound"],
            "hi": mean_ci["upper_bound"],
        }
    return results


def load_scale(scale_out=SCALE_OUT):
    if not scale_out.exists():
        return []
    rows = []
    for line in scale_out.read_text().splitlines():
        if line.startswith("scale "):
            fields = dict(part.split("=", 1) for part in line.split()[1:])
            rows.append({k: int(v) if v.isdigit() else v for k, v in fields.items()})
    # Grouped by the result recorded (`receipt`, or a size), smallest store first.
    return sorted(rows, key=lambda r: (str(r.get("result", r.get("result_bytes", ""))), r["n"]))


def fmt_time(ns):
    if ns is None:
        return "-"
    for unit, scale in (("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_ratio(r):
    return "-" if r is None else f"{r:.2f}×"


def verdict(checks):
    """checks: [(label, bool or None)] -> 'yes' / 'NO (label)' / '-' (nothing measured)."""
    known = [(label, ok) for label, ok in checks if ok is not None]
    if not known:
        return "-"
    failed = [label for label, ok in known if not ok]
    return "yes" if not failed else "NO (" + ", ".join(failed) + ")"


def within(r, limit):
    return None if r is None else r <= limit


def build_rows(est, scale, stores=None, instructions=None):
    rows = []

    def med(group, function, value):
        e = est.get((group, function, value))
        return e["median"] if e else None

    def add(what, size, time, others="", target="", checks=(), base=None):
        base = base or {}
        rows.append([what, size, fmt_time(time),
                     *(fmt_ratio(ratio(time, base.get(k))) for k in ("bare", "floor", "cached",
                                                                     "naive")),
                     others, target, verdict(list(checks)) if target else ""])

    for size in SIZES:
        base = {k: med("calls", f, size) for k, f in (("bare", "bare"), ("floor", "floor"),
                                                       ("cached", "cached_hit"),
                                                       ("naive", "naive_hit"))}
        bare_e, ro_e = est.get(("calls", "bare", size)), est.get(("calls", "read_only", size))
        if ro_e and bare_e:
            # One-sided: faster than bare is within noise too; slower must be by ≤ 10% or
            # inside bare's confidence interval.
            no_slower = ro_e["lo"] <= bare_e["hi"] or ro_e["median"] <= 1.10 * bare_e["median"]
            add("#[read_only]", size, ro_e["median"], "", "within noise of bare",
                [("slower than bare", no_slower)], base)
        floor_limit = 2.0 if size == "small" else 1.3
        for name, label in (("replay", "replay"), ("replay_detached", "replay, owned args")):
            replay = med("calls", name, size)
            if replay is None:
                continue
            checks = [(f">{floor_limit}× floor", within(ratio(replay, base["floor"]),
                                                        floor_limit))]
            target = f"≤ {floor_limit}× floor"
            if size == "small":
                checks.append((">2× cached", within(ratio(replay, base["cached"]), 2.0)))
                target += ", ≤ 2× cached"
            add(label, size, replay, "", target, checks, base)
        for name, replay_name, label in (("first", "replay", "first execution"),
                                         ("first_detached", "replay_detached",
                                          "first execution, owned args")):
            first, replay = med("calls", name, size), med("calls", replay_name, size)
            if first is None:
                continue
            r = ratio(first, replay)
            add(label, size, first, f"{fmt_ratio(r)} replay", "≤ 1.3× replay",
                [(">1.3× replay", within(r, 1.3))], base)
        join = med("calls", "join32", size)
        if join is not None:
            add("32-way join, per call", size, join,
                f"{fmt_ratio(ratio(join, med('calls', 'replay', size)))} replay", base=base)
        digest, to_vec = med("key", "args_digest", size), med("key", "serde_json", size)
        if digest is not None:
            add("key derivation (ArgsDigest)", size, digest,
                f"{fmt_ratio(ratio(digest, to_vec))} serde_json::to_vec ({fmt_time(to_vec)})")

    one, two = med("throughput", "replay", "1_thread"), med("throughput", "replay", "2_threads")
    if one is not None and two is not None:
        speedup = one / two
        add("replay throughput, 2 threads", "small", two,
            f"{speedup:.2f}× 1 thread ({fmt_time(one)}/replay)", "≥ 1.8× 1 thread",
            [("<1.8×", speedup >= 1.8)])

    small_base = {k: med("calls", f, "small") for k, f in (("bare", "bare"), ("floor", "floor"),
                                                            ("cached", "cached_hit"),
                                                            ("naive", "naive_hit"))}
    for store in ("sqlite", "redis"):  # criterion's rows (PostgreSQL: `idem bench` only)
        replay, first = med(store, "replay", "small"), med(store, "first", "small")
        if replay is not None:
            add(f"{store} replay", "small", replay, base=small_base)
        if first is not None:
            add(f"{store} first execution", "small", first,
                f"{fmt_ratio(ratio(first, replay))} replay", base=small_base)

    for store, runs in (stores or {}).items():
        first_run = next(iter(runs.values()), None)
        if first_run:
            for kind, label in (("replay", "replay"), ("first", "first execution")):
                pair = first_run["latency_ns"][kind]
                p50 = ratio(pair["idem"]["p50"], pair["floor"]["p50"])
                p99 = ratio(pair["idem"]["p99"], pair["floor"]["p99"])
                add(f"{store} {label}, idem bench p50", "small", pair["idem"]["p50"],
                    f"{fmt_ratio(p50)} floor ({fmt_time(pair['floor']['p50'])}); p99 "
                    f"{fmt_time(pair['idem']['p99'])}, {fmt_ratio(p99)} floor",
                    "≤ 1.5× floor", [(">1.5× floor", within(p50, 1.5))])
        for run, report in runs.items():
            for kind, label in (("first", "first executions"), ("replay", "replays")):
                pair = report["throughput_per_s"][kind]
                r = ratio(pair["idem"], pair["floor"])
                target = "≥ 0.7× floor" if kind == "first" else ""
                add(f"{store} {label} per second, {run}", "small", None,
                    f"{pair['idem']:,.0f}/s, {fmt_ratio(r)} floor ({pair['floor']:,.0f}/s)",
                    target, [("<0.7× floor", None if r is None else r >= 0.7)])
    for store, counts in (instructions or {}).items():
        for kind, label in (("replay", "replay"), ("first", "first execution")):
            idem, floor = counts.get(kind), counts.get(f"floor-{kind}")
            if idem is None:
                continue
            r = ratio(idem, floor)
            add(f"{store} {label}, instructions per call", "small", None,
                f"{idem:,.0f} vs floor {floor:,.0f}: {fmt_ratio(r)}", "≤ 1.5× floor",
                [(">1.5× floor", within(r, 1.5))])

    for row in scale:
        worst = max(row["replay_max_ns"], row["after_lease_max_ns"])
        pauses = row.get("replay_over_1ms", 0) + row.get("after_lease_over_1ms", 0)
        result = f", {row['result_bytes']} B results" if "result_bytes" in row else ""
        add(f"memory store, {row['n']:,} keys{result}: replay p50", "small", row["replay_p50_ns"],
            f"{row['bytes_per_record']} B/record; p99 {fmt_time(row['replay_p99_ns'])}, "
            f"max {fmt_time(row['replay_max_ns'])}; after lease p50 "
            f"{fmt_time(row['after_lease_p50_ns'])}, p99 {fmt_time(row['after_lease_p99_ns'])}, "
            f"max {fmt_time(row['after_lease_max_ns'])}; {pauses} replays > 1 ms",
            "≤ 200 B/record, no pause > 1 ms",
            [(">200 B", row["bytes_per_record"] <= 200), ("pause > 1 ms", worst <= PAUSE_NS)])
    kind = lambda r: r.get("result", r.get("result_bytes"))
    same_results = [r for r in scale if kind(r) == kind(scale[0])] if scale else []
    if len(same_results) >= 2:
        lo, hi = same_results[0], same_results[-1]
        p50 = ratio(hi["replay_p50_ns"], lo["replay_p50_ns"])
        p99 = ratio(max(hi["replay_p99_ns"], hi["after_lease_p99_ns"]),
                    max(lo["replay_p99_ns"], lo["after_lease_p99_ns"]))
        add(f"replay latency {hi['n']:,} vs {lo['n']:,} keys", "small", hi["replay_p50_ns"],
            f"p50 {fmt_ratio(p50)}, p99 {fmt_ratio(p99)}", "flat: p50 and p99 ≤ 2×",
            [("p50 grows", within(p50, 2.0)), ("p99 grows", within(p99, 2.0))])
    return rows


def print_table(rows):
    header = ["measurement", "args", "time (median)", "÷ bare", "÷ floor", "÷ cached",
              "÷ naive map", "other ratio", "target", "met"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")


def self_test():
    """Checks the ratios and verdicts on made-up results in a temporary criterion tree."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        made_up = {("calls", "bare", "small"): 10, ("calls", "read_only", "small"): 10.5,
                   ("calls", "bare", "1KiB"): 10, ("calls", "read_only", "1KiB"): 12,
                   ("calls", "bare", "64KiB"): 10, ("calls", "read_only", "64KiB"): 7,
                   ("calls", "floor", "small"): 100, ("calls", "cached_hit", "small"): 80,
                   ("calls", "naive_hit", "small"): 400, ("calls", "replay", "small"): 150,
                   ("calls", "first", "small"): 300, ("throughput", "replay", "1_thread"): 100,
                   ("throughput", "replay", "2_threads"): 50}
        for (group, function, value), ns in made_up.items():
            new = root / group / function / value / "new"
            new.mkdir(parents=True)
            new.joinpath("benchmark.json").write_text(json.dumps(
                {"group_id": group, "function_id": function, "value_str": value}))
            new.joinpath("estimates.json").write_text(json.dumps(
                {"mean": {"confidence_interval": {"lower_bound": ns * 0.99,
                                                  "upper_bound": ns * 1.01}},
                 "median": {"point_estimate": ns}}))
        scale = root / "scale.txt"
        scale.write_text(
            "scale n=10000 bytes_per_record=150 replay_p50_ns=1000 replay_p99_ns=2000 "
            "replay_max_ns=900000 replay_over_1ms=0 after_lease_p50_ns=1000 "
            "after_lease_p99_ns=2000 after_lease_max_ns=900000 after_lease_over_1ms=0\n"
            "scale n=1000000 bytes_per_record=300 replay_p50_ns=1500 replay_p99_ns=5000 "
            "replay_max_ns=900000 replay_over_1ms=0 after_lease_p50_ns=1500 "
            "after_lease_p99_ns=5000 after_lease_max_ns=20000000 after_lease_over_1ms=1\n")
        pct = lambda p50: {"p50": p50, "p90": p50, "p99": 2 * p50, "max": 3 * p50}
        stores = {"sqlite": {"64 tasks": {
            "latency_ns": {"replay": {"idem": pct(3000), "floor": pct(2000)},
                           "first": {"idem": pct(16000), "floor": pct(10000)}},
            "throughput_per_s": {"replay": {"idem": 300000.0, "floor": 400000.0},
                                 "first": {"idem": 20000.0, "floor": 30000.0}}}}}
        instructions = {"sqlite": {"replay": 14000, "floor-replay": 10000, "first": 80000,
                                   "floor-first": 40000}}
        rows = {(r[0], r[1]): r for r in build_rows(load_estimates(root), load_scale(scale),
                                                     stores, instructions)}
    expect = [
        (("#[read_only]", "small"), 3, "1.05×"), (("#[read_only]", "small"), 9, "yes"),
        (("#[read_only]", "1KiB"), 9, "NO (slower than bare)"),
        (("#[read_only]", "64KiB"), 9, "yes"),
        (("replay", "small"), 4, "1.50×"), (("replay", "small"), 5, "1.88×"),
        (("replay", "small"), 9, "yes"),
        (("first execution", "small"), 7, "2.00× replay"),
        (("first execution", "small"), 9, "NO (>1.3× replay)"),
        (("replay throughput, 2 threads", "small"), 9, "yes"),
        (("memory store, 10,000 keys: replay p50", "small"), 9, "yes"),
        (("memory store, 1,000,000 keys: replay p50", "small"), 9,
         "NO (>200 B, pause > 1 ms)"),
        (("replay latency 1,000,000 vs 10,000 keys", "small"), 9, "NO (p99 grows)"),
        (("sqlite replay, idem bench p50", "small"), 9, "yes"),
        (("sqlite first execution, idem bench p50", "small"), 9, "NO (>1.5× floor)"),
        (("sqlite first executions per second, 64 tasks", "small"), 9, "NO (<0.7× floor)"),
        (("sqlite replays per second, 64 tasks", "small"), 9, ""),
        (("sqlite replay, instructions per call", "small"), 9, "yes"),
        (("sqlite first execution, instructions per call", "small"), 9, "NO (>1.5× floor)"),
    ]
    failed = [(row, col, want, rows.get(row, [None] * 10)[col]) for row, col, want in expect
              if rows.get(row, [None] * 10)[col] != want]
    for row, col, want, got in failed:
        print(f"self-test: {row} column {col}: want {want!r}, got {got!r}")
    print(f"{len(expect) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-run", action="store_true", help="only read the last results")
    parser.add_argument("--self-test", action="store_true",
                        help="check the ratios and verdicts on made-up results, run nothing")
    parser.add_argument("--features", default=os.environ.get("IDEM_BENCH_FEATURES", ""),
                        help="cargo features for the benches (sqlite, redis)")
    parser.add_argument("--stores", default="",
                        help="run `idem bench` on these stores (sqlite, redis, postgres), "
                        "comma-separated")
    parser.add_argument("--instructions", action="store_true",
                        help="with --stores: count instructions per call with callgrind")
    parser.add_argument("--no-criterion", action="store_true",
                        help="skip the criterion and scale benches (store rows only)")
    parser.add_argument("extra", nargs="*", help="arguments for the benches, after --")
    args = parser.parse_args()
    if args.self_test:
        self_test()
    stores = [s for s in args.stores.replace(",", " ").split() if s]
    if not args.no_run:
        if not args.no_criterion:
            run(args.features, args.extra)
        if stores:
            run_stores(stores, args.instructions)
    est = load_estimates()
    if not est and not STORES_OUT.exists():
        sys.exit(f"no results under {CRITERION}: run without --no-run first")
    print_table(build_rows(est, load_scale(), load_json(STORES_OUT), load_json(INSTRUCTIONS_OUT)))


if __name__ == "__main__":
    main()
