//! `idem bench`'s report as a table for a terminal.

use std::fmt::Write as _;
use std::time::Duration;

use super::Report;

/// The report as a table.
pub(super) fn table(report: &Report) -> String {
    let time = |ns: u64| {
        let d = Duration::from_nanos(ns);
        if d >= Duration::from_millis(1) {
            format!("{:.2} ms", d.as_secs_f64() * 1e3)
        } else {
            format!("{:.1} µs", d.as_secs_f64() * 1e6)
        }
    };
    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            format!("{:.2}×", a / b)
        } else {
            "-".into()
        }
    };
    let mut out = String::new();
    let _ = writeln!(out, "store: {}", report.store);
    let _ = writeln!(out, "floor: {}", report.floor);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<28}{:>14}{:>14}{:>14}",
        "latency", "idem", "floor", "idem ÷ floor"
    );
    for (name, pair) in [
        ("replay", &report.latency_ns.replay),
        ("first execution", &report.latency_ns.first),
    ] {
        for (q, idem, floor) in [
            ("p50", pair.idem.p50, pair.floor.p50),
            ("p90", pair.idem.p90, pair.floor.p90),
            ("p99", pair.idem.p99, pair.floor.p99),
            ("max", pair.idem.max, pair.floor.max),
        ] {
            let _ = writeln!(
                out,
                "{:<28}{:>14}{:>14}{:>14}",
                format!("{name} {q}"),
                time(idem),
                time(floor),
                ratio(idem as f64, floor as f64)
            );
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "throughput, {} tasks × {} process{}",
        report.concurrency,
        report.processes,
        if report.processes == 1 { "" } else { "es" }
    );
    for (name, pair) in [
        ("replays", &report.throughput_per_s.replay),
        ("first executions", &report.throughput_per_s.first),
    ] {
        let _ = writeln!(
            out,
            "{:<28}{:>14}{:>14}{:>14}",
            format!("{name} per second"),
            format!("{:.0}", pair.idem),
            format!("{:.0}", pair.floor),
            ratio(pair.idem, pair.floor)
        );
    }
    if let Some(commands) = &report.commands_per_call {
        let _ = writeln!(out);
        let _ = writeln!(out, "server commands per call (INFO commandstats)");
        let list = |c: &[(String, f64)]| {
            c.iter()
                .map(|(name, n)| format!("{name} {n:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (name, pair) in [
            ("replay", &commands.replay),
            ("first execution", &commands.first),
        ] {
            let _ = writeln!(
                out,
                "{name}: idem {}; floor {}",
                list(&pair.idem),
                list(&pair.floor)
            );
        }
    }
    out
}
