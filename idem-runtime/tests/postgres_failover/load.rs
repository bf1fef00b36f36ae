//! The load: workers calling a plain tool (its side effect counted in this process, as an
//! outside system's would be) and a transactional tool (its side effect a row of the ledger, in
//! the database that fails over), on keys of repeated and fresh turns, through two stores — the
//! pool `PostgresStore::connect` builds and an application's pool handed to `from_pool` — and
//! what every call answered, and when.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_tools_runtime::engine::transactional;
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{PostgresStore, Store};
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn};
use rand::Rng;
use sqlx::PgConnection;

use crate::postgres_common::Failure;

/// The plain tool: a 10 s lease.
static SEND: ToolInfo = ToolInfo::idempotent("send").with_lease(Duration::from_secs(10));
/// The transactional tool: a 5 s lease (its body's bound).
static PAY: ToolInfo = ToolInfo::idempotent("pay").with_lease(Duration::from_secs(5));

/// How long a caller waits for a key in flight elsewhere.
pub const IN_FLIGHT_WAIT: Duration = Duration::from_secs(3);

/// A call that has not answered after this long is counted as hung (and given up).
pub const HUNG: Duration = Duration::from_secs(60);

/// Which tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tool {
    Plain,
    Transactional,
}

/// A key: the tool, the turn and the argument.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub tool: Tool,
    pub turn: String,
    pub memo: String,
}

impl Key {
    /// The ledger's name for the key.
    pub fn row(&self) -> String {
        format!("{}/{}", self.turn, self.memo)
    }
}

/// What a call answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Ok(i64),
    /// `Error::Store`: failed closed.
    Store,
    InFlight,
    LeaseLost,
    Interrupted,
    /// The tool's own error: its statement failed (its connection died with the primary).
    Tool,
    Other(String),
    /// No answer within [`HUNG`].
    Hung,
}

/// One call: its key, its store (0: `connect`'s pool, 1: an application's), when it started
/// and ended, and its answer.
#[derive(Debug, Clone)]
pub struct Called {
    pub key: Key,
    pub store: usize,
    pub started: Instant,
    pub ended: Instant,
    pub answer: Answer,
}

/// What the run saw: every call, and when each plain body performed its side effect.
#[derive(Default)]
pub struct Log {
    pub calls: Vec<Called>,
    pub effects: BTreeMap<Key, Vec<Instant>>,
}

/// The log, shared by the workers.
pub type Shared = Arc<Mutex<Log>>;

fn lock(log: &Shared) -> std::sync::MutexGuard<'_, Log> {
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Ids of the plain tool's results.
static NEXT_ID: AtomicI64 = AtomicI64::new(1);

fn nap() -> tokio::time::Sleep {
    let ms = rand::rng().random_range(0..10);
    tokio::time::sleep(Duration::from_millis(ms))
}

fn answer(result: Result<i64, Failure>) -> Answer {
    match result {
        Ok(id) => Answer::Ok(id),
        Err(Failure::Idem(Error::Store { .. } | Error::CommitFailed { .. })) => Answer::Store,
        Err(Failure::Idem(Error::InFlight { .. })) => Answer::InFlight,
        Err(Failure::Idem(Error::LeaseLost { .. })) => Answer::LeaseLost,
        Err(Failure::Idem(Error::Interrupted { .. })) => Answer::Interrupted,
        Err(Failure::Sql(_)) => Answer::Tool,
        Err(other) => Answer::Other(format!("{other:?}")),
    }
}

/// Calls `key` on `store` once and logs it.
pub async fn call(
    store: &PostgresStore,
    index: usize,
    key: &Key,
    ledger: &str,
    log: &Shared,
) -> Answer {
    let turn = Turn::new(key.turn.clone())
        .with_in_flight_wait(IN_FLIGHT_WAIT)
        .with_max_attempts_per_key(1_000_000)
        .with_actions_per_tool(u32::MAX)
        .with_store(Arc::new(store.clone()));
    let tool = match key.tool {
        Tool::Plain => &SEND,
        Tool::Transactional => &PAY,
    };
    let mut args = ArgsDigest::new(tool.name);
    args.arg("memo", &key.memo).expect("a string encodes");
    let (digest, fingerprint) = args.finish(turn.namespace(), turn.id(), tool.name, 1);
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let idem_call = Call::new(tool, &turn, digest, fingerprint).with_store(&shared);
    let started = Instant::now();
    let running = async {
        match key.tool {
            Tool::Plain => {
                let body = async {
                    nap().await;
                    lock(log)
                        .effects
                        .entry(key.clone())
                        .or_default()
                        .push(Instant::now());
                    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                    nap().await;
                    Ok::<i64, Error>(id)
                };
                let result = idem_tools_runtime::execute(idem_call, Codec::ok_only(), body).await;
                answer(result.map_err(Failure::Idem))
            }
            Tool::Transactional => {
                let row = key.row();
                let result = transactional::execute(
                    idem_call,
                    Codec::ok_only(),
                    async |conn: &mut PgConnection| -> Result<i64, Failure> {
                        nap().await;
                        let insert =
                            format!("INSERT INTO {ledger} (memo) VALUES ($1) RETURNING id");
                        let id = sqlx::query_scalar(&insert)
                            .bind(&row)
                            .fetch_one(&mut *conn)
                            .await?;
                        nap().await;
                        Ok(id)
                    },
                )
                .await;
                answer(result)
            }
        }
    };
    let answer = tokio::time::timeout(HUNG, running)
        .await
        .unwrap_or(Answer::Hung);
    lock(log).calls.push(Called {
        key: key.clone(),
        store: index,
        started,
        ended: Instant::now(),
        answer: answer.clone(),
    });
    answer
}

/// A key to call: a repeated turn and one of a few arguments (three times in four), or a
/// fresh turn.
fn pick(worker: usize, n: u64) -> Key {
    let mut rng = rand::rng();
    let tool = if rng.random_bool(0.5) {
        Tool::Plain
    } else {
        Tool::Transactional
    };
    if rng.random_range(0..4) == 0 {
        return Key {
            tool,
            turn: format!("fresh-{worker}-{n}"),
            memo: "m".to_owned(),
        };
    }
    Key {
        tool,
        turn: format!("turn-{}", rng.random_range(0..3)),
        memo: format!("m{}", rng.random_range(0..40)),
    }
}

/// Calls keys through `stores[worker % 2]` until `stop`.
pub async fn worker(
    worker: usize,
    stores: Vec<PostgresStore>,
    ledger: String,
    log: Shared,
    stop: Arc<AtomicBool>,
) {
    let index = worker % stores.len();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = pick(worker, n);
        let answer = call(&stores[index], index, &key, &ledger, &log).await;
        if !matches!(answer, Answer::Ok(_)) {
            tokio::time::sleep(Duration::from_millis(20)).await; // a failing store breathes
        }
    }
}
