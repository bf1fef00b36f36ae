//! Replay and first execution on the Redis store (`--features redis`, server at
//! `IDEM_REDIS_URL`; without it the bench prints a skip line): `redis/<what>/small`.

#[path = "support/stores.rs"]
mod stores;
mod support;

criterion::criterion_group! {
    name = benches;
    config = criterion::Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = stores::redis
}
criterion::criterion_main!(benches);
