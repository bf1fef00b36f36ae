//! Claims inside a batch's transaction (where the store's thread runs two writes or more): a
//! refusal by a count undoes that claim alone, in a savepoint, and keeps what the batch wrote
//! before it; a panic rolls the batch back, and none of its claims is answered.

use std::time::Duration;

use rusqlite::Connection;

use super::schema;
use super::worker::{COUNTS_SWEEP, Worker};
use crate::clock::ManualClock;
use crate::key::{Fingerprint, Key};
use crate::store::budget::TurnIdentity;
use crate::store::{Begin, BeginRequest, Charge, Exhausted, LeaseToken};

const DAY: Duration = Duration::from_secs(86_400);

fn request<'a>(key: &'a Key, fp: &'a Fingerprint, tool: &'static str) -> BeginRequest<'a> {
    BeginRequest {
        namespace: "ns",
        key,
        tool,
        turn: "turn-1",
        fingerprint: fp,
        lease: DAY,
        ttl: DAY,
        token: LeaseToken::generate(),
        charge: Charge {
            turn: TurnIdentity::new("ns", "turn-1"),
            max_attempts: 3,
            max_calls: Some(2),
            max_tool_actions: Some(1),
            window: DAY,
        },
    }
}

/// A store's database in memory.
fn database() -> Connection {
    let mut conn = Connection::open_in_memory().expect("open");
    schema::configure(&mut conn, None, Duration::from_secs(1)).expect("schema");
    conn
}

fn claimed_row(conn: &Connection, key: &Key) -> bool {
    conn.query_row(
        "SELECT count(*) FROM idem_records WHERE key = ?1 AND state = 'in_progress'",
        [key.as_bytes().as_slice()],
        |row| row.get::<_, i64>(0),
    )
    .expect("read")
        == 1
}

#[test]
fn a_refused_claim_in_a_batch_is_undone_alone() {
    let conn = database();
    let clock = ManualClock::new(1_000_000);
    let fp = Fingerprint::from_bytes([7; 32]);
    let (a, b, c) = (
        Key::from_bytes([1; 32]),
        Key::from_bytes([2; 32]),
        Key::from_bytes([3; 32]),
    );
    let mut batch = Worker::new(&conn, &clock, true);
    let claim = |worker: &mut Worker<'_>, key, tool| {
        worker
            .claim(&request(key, &fp, tool))
            .expect("sqlite")
            .expect("answer")
    };
    assert_eq!(claim(&mut batch, &a, "charge"), Begin::Claimed);
    // The tool's cap refuses `b` after its claim and the turn's count took: both undone.
    assert_eq!(
        claim(&mut batch, &b, "charge"),
        Begin::Refused(Exhausted::Tool { calls: 1, limit: 1 })
    );
    assert!(
        !conn.is_autocommit(),
        "the batch's transaction is still open"
    );
    assert!(claimed_row(&conn, &a), "the batch's earlier claim is kept");
    assert!(!claimed_row(&conn, &b), "the refused claim is undone");
    // Had `b` counted against the turn (cap 2), `c` would be refused.
    assert_eq!(claim(&mut batch, &c, "refund"), Begin::Claimed);
    conn.execute_batch("COMMIT").expect("commit the batch");
    assert!(claimed_row(&conn, &a) && claimed_row(&conn, &c) && !claimed_row(&conn, &b));
}

/// A store operation that answers `answer` (or panics) on the store's thread.
fn task<T: Send + 'static>(
    work: impl FnMut(&mut Worker<'_>) -> rusqlite::Result<crate::Result<T>> + Send + 'static,
) -> (
    Box<dyn super::thread::Op>,
    tokio::sync::oneshot::Receiver<crate::Result<T>>,
) {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let op = super::thread::Task {
        operation: "test",
        may_write: true,
        skip_if_abandoned: false,
        work,
        answer: None,
        reply,
        pending: None,
    };
    (Box::new(op), answer)
}

#[test]
fn a_panic_in_a_batch_rolls_its_claims_back_and_answers_none_of_them() {
    let conn = database();
    let clock = ManualClock::new(1_000_000);
    let fp = Fingerprint::from_bytes([7; 32]);
    let a = Key::from_bytes([1; 32]);
    let (claims, claimed) = task(move |worker| worker.claim(&request(&a, &fp, "charge")));
    let (panics, _) = task(|_| -> rusqlite::Result<crate::Result<()>> {
        panic!("an operation panics after the batch's claim")
    });
    let mut batch = vec![claims, panics];
    let mut worker = Worker::new(&conn, &clock, true);
    worker.run_guarded(&mut batch);
    for op in batch {
        op.finish();
    }
    assert!(
        claimed.blocking_recv().is_err(),
        "the rolled-back claim's caller is told nothing was answered"
    );
    assert!(
        conn.is_autocommit(),
        "the batch's transaction is rolled back"
    );
    assert!(!claimed_row(&conn, &a), "and the claim with it");
}

#[test]
fn a_housekeeping_step_that_starts_near_the_end_covers_a_whole_batch() {
    let conn = database();
    let clock = ManualClock::new(1_000_000);
    let id = |i: u32| [&i.to_be_bytes()[..], &[0; 12]].concat();
    for i in 0..600 {
        conn.execute(
            "INSERT INTO idem_budgets (id, count, expires_at_ms) VALUES (?1, 1, 10)",
            [id(i)],
        )
        .expect("an expired count");
    }
    let left = || -> i64 {
        conn.query_row("SELECT count(*) FROM idem_budgets", [], |row| row.get(0))
            .expect("count")
    };
    let mut worker = Worker::new(&conn, &clock, false);
    // The previous step stopped at the 551st key: 49 are left after it, then a batch from the
    // first.
    let next = worker
        .sweep_step(&COUNTS_SWEEP, Some(&id(550)), 1_000_000)
        .expect("a step");
    assert_eq!(left(), 600 - 49 - 512, "at least a whole batch was swept");
    assert_eq!(next, Some(id(511)), "the next step goes on from there");
    // A purge's step stops at the last key.
    let (deleted, next) = worker
        .sweep_counts(Some(&id(550)), 1_000_000)
        .expect("purge");
    assert_eq!((deleted, next), (0, None));
}
