//! Cost of a call's key + fingerprint ([`ArgsDigest`], as the `#[idempotent]` macro drives it)
//! against the naive alternative: `serde_json::to_vec` of the same arguments and one BLAKE3 pass
//! over those bytes.
//!
//! Three argument sizes: small (a 20-character string, a `u64` and three short strings), and a
//! 1 KiB and a 64 KiB string argument (next to a `u64`). Run with
//! `cargo bench -p idem-tools-runtime --bench keys`; the ratios to look at are
//! `args_digest / blake3_json` and `args_digest / json_to_vec+blake3` per size.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use idem_tools_runtime::key::{ArgsDigest, derive_key, fingerprint};
use serde::Serialize;

/// The small arguments record.
#[derive(Serialize)]
struct Small {
    recipient: String,
    amount_cents: u64,
    currency: String,
    memo: String,
    channel: String,
}

impl Small {
    fn new() -> Self {
        Small {
            recipient: "acct_0123456789abcdef".chars().take(20).collect(),
            amount_cents: 1_250_000,
            currency: "EUR".into(),
            memo: "lunch".into(),
            channel: "web".into(),
        }
    }

    fn digest(
        &self,
    ) -> (
        idem_tools_runtime::key::Key,
        idem_tools_runtime::key::Fingerprint,
    ) {
        let mut d = ArgsDigest::new("send_payment");
        let ok = d.arg("recipient", &self.recipient).is_ok()
            & d.arg("amount_cents", &self.amount_cents).is_ok()
            & d.arg("currency", &self.currency).is_ok()
            & d.arg("memo", &self.memo).is_ok()
            & d.arg("channel", &self.channel).is_ok();
        assert!(ok, "the bench arguments encode");
        d.finish("billing", "turn-0001", "send_payment", 1)
    }
}

/// One large string argument next to an integer.
#[derive(Serialize)]
struct Large {
    body: String,
    id: u64,
}

impl Large {
    fn new(len: usize) -> Self {
        // Printable ASCII without characters JSON escapes, so the JSON is as long as the text.
        let body = (0..len)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        Large { body, id: 42 }
    }

    fn digest(
        &self,
    ) -> (
        idem_tools_runtime::key::Key,
        idem_tools_runtime::key::Fingerprint,
    ) {
        let mut d = ArgsDigest::new("store_document");
        let ok = d.arg("body", &self.body).is_ok() & d.arg("id", &self.id).is_ok();
        assert!(ok, "the bench arguments encode");
        d.finish("docs", "turn-0001", "store_document", 1)
    }
}

fn bench_case<T: Serialize>(
    c: &mut Criterion,
    name: &str,
    args: &T,
    digest: impl Fn() -> (
        idem_tools_runtime::key::Key,
        idem_tools_runtime::key::Fingerprint,
    ),
) {
    let mut group = c.benchmark_group(name);
    group.bench_function("args_digest", |b| b.iter(|| black_box(digest())));
    group.bench_function("derive_key+fingerprint", |b| {
        b.iter(|| {
            let key = derive_key("ns", "turn-0001", "tool", 1, black_box(args));
            let fp = fingerprint("tool", 1, black_box(args));
            black_box((key.is_ok(), fp.is_ok()))
        })
    });
    group.bench_function("json_to_vec", |b| {
        b.iter(|| black_box(serde_json::to_vec(black_box(args)).map(|v| v.len())))
    });
    let json = serde_json::to_vec(args).unwrap_or_default();
    group.bench_function("blake3_json", |b| {
        b.iter(|| black_box(blake3::hash(black_box(&json))))
    });
    group.bench_function("json_to_vec+blake3", |b| {
        b.iter(|| {
            let bytes = serde_json::to_vec(black_box(args)).unwrap_or_default();
            black_box(blake3::hash(&bytes))
        })
    });
    group.finish();
}

fn keys(c: &mut Criterion) {
    let small = Small::new();
    bench_case(c, "small", &small, || small.digest());
    let kib = Large::new(1024);
    bench_case(c, "1KiB", &kib, || kib.digest());
    let big = Large::new(64 * 1024);
    bench_case(c, "64KiB", &big, || big.digest());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = keys
}
criterion_main!(benches);
