//! Record codec against `serde_json` (the previous format) on small structs, typical tool
//! results: encode (every first execution), decode (every replay) and the fidelity check.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use idem_tools_runtime::replay::bench;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Status {
    Sent,
    Queued { position: u32 },
}

/// A result with strings: decoding it is dominated by their allocations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    id: u64,
    to: String,
    subject: String,
    status: Status,
    cost: f64,
    tags: Vec<String>,
    thread: Option<u64>,
}

/// A result of numbers only: the formats' own costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Reading {
    sensor: u32,
    at_ms: u64,
    values: [f64; 4],
    ok: bool,
    status: Status,
    offset: Option<i32>,
}

#[derive(Serialize, Deserialize)]
enum Json<T> {
    #[serde(rename = "ok")]
    Ok(T),
}

fn compare<T: Serialize + DeserializeOwned>(c: &mut Criterion, name: &str, value: &T) {
    let mut out = Vec::with_capacity(256);
    c.bench_function(&format!("{name}: idem encode"), |b| {
        b.iter(|| {
            bench::encode(black_box(value), &mut out).expect("encode");
            black_box(out.len())
        })
    });
    c.bench_function(&format!("{name}: json encode"), |b| {
        b.iter(|| {
            out.clear();
            serde_json::to_writer(&mut out, &Json::Ok(black_box(value))).expect("json");
            black_box(out.len())
        })
    });
    let mut record = Vec::new();
    bench::encode(value, &mut record).expect("encode");
    let json = serde_json::to_vec(&Json::Ok(value)).expect("json");
    println!(
        "{name}: record {} bytes, JSON {} bytes",
        record.len(),
        json.len()
    );
    c.bench_function(&format!("{name}: idem decode"), |b| {
        b.iter(|| bench::decode::<T>(black_box(&record)).expect("decode"))
    });
    c.bench_function(&format!("{name}: json decode"), |b| {
        b.iter(|| {
            let Json::Ok(v) = serde_json::from_slice::<Json<T>>(black_box(&json)).expect("json");
            v
        })
    });
    c.bench_function(&format!("{name}: idem verify"), |b| {
        b.iter(|| bench::verify::<T>(black_box(&record)).expect("verify"))
    });
}

fn codec(c: &mut Criterion) {
    let receipt = Receipt {
        id: 9_123_456_789,
        to: "ada@example.com".to_owned(),
        subject: "Quarterly report, second draft".to_owned(),
        status: Status::Queued { position: 3 },
        cost: 0.0125,
        tags: vec!["work".to_owned(), "reports".to_owned()],
        thread: Some(77),
    };
    compare(c, "receipt", &receipt);
    let reading = Reading {
        sensor: 17,
        at_ms: 1_764_700_000_000,
        values: [20.125, -3.5, 1e-3, 1013.25],
        ok: true,
        status: Status::Sent,
        offset: Some(-120),
    };
    compare(c, "reading", &reading);
}

criterion_group!(benches, codec);
criterion_main!(benches);
