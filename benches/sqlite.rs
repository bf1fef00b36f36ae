//! Replay and first execution on the SQLite store (`--features sqlite`): `sqlite/<what>/small`.
//! Compare with `calls/replay/small` and `calls/first/small` (the memory store).

#[path = "support/stores.rs"]
mod stores;
mod support;

criterion::criterion_group! {
    name = benches;
    config = criterion::Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = stores::sqlite
}
criterion::criterion_main!(benches);
