//! The store behind a [`Forwarder`], the tools the tests call, and the clean-up.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use idem_test_support::Forwarder;
use idem_tools_runtime::engine::transactional;
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{PostgresStore, Store};
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn};
use sqlx::PgConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

pub use crate::postgres_common::ledger::{create_ledger, ledger};
use crate::postgres_common::{Failure, postgres_url, unique_schema};

/// The stores' lock timeout and reply timeout in these tests.
pub const LOCK: Duration = Duration::from_millis(500);
pub const REPLY: Duration = Duration::from_secs(1);

/// Which pool the store talks through.
#[derive(Debug, Clone, Copy)]
pub enum Pool {
    /// The one `PostgresStore::builder().connect` builds.
    Own,
    /// An application's pool handed to `from_pool` (`test_before_acquire(false)`, as its
    /// rustdoc recommends).
    App,
    /// An application's pool that waits for a connection as long as `sqlx` does by default
    /// (30 s): the store's reply timeout, not the pool's acquire timeout, bounds its calls.
    AppSlowAcquire,
}

/// A store whose connections go through a forwarder to the test server.
pub struct Frozen {
    pub forwarder: Forwarder,
    pub server: SocketAddr,
    pub store: PostgresStore,
    /// The server's URL, not through the forwarder.
    pub url: String,
}

impl Frozen {
    /// The store in a schema of its own, with a `ledger` table for the transactional tool;
    /// `None` (skipped) without a test server.
    pub async fn setup(tag: &str, pool: Pool) -> Option<Frozen> {
        let url = postgres_url(tag)?;
        let options: PgConnectOptions = url.parse().expect("a URL");
        let server = tokio::net::lookup_host((options.get_host(), options.get_port()))
            .await
            .expect("resolve")
            .next()
            .expect("an address");
        let forwarder = Forwarder::start(server);
        let through = options.clone().host("127.0.0.1").port(forwarder.port());
        let builder = PostgresStore::builder()
            .schema(unique_schema(tag))
            .lock_timeout(LOCK)
            .reply_timeout(REPLY)
            .connect_timeout(Duration::from_secs(1));
        let store = match pool {
            Pool::Own => {
                let port = options.get_port();
                let url = url.replace(&format!(":{port}/"), &format!(":{}/", forwarder.port()));
                builder.max_connections(4).connect(&url).await
            }
            Pool::App | Pool::AppSlowAcquire => {
                let acquire = match pool {
                    Pool::AppSlowAcquire => Duration::from_secs(30),
                    _ => Duration::from_secs(1),
                };
                let pool = PgPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(acquire)
                    .test_before_acquire(false)
                    .connect_lazy_with(through);
                builder.from_pool(pool).await
            }
        }
        .expect("open the store");
        create_ledger(&store).await;
        Some(Frozen {
            forwarder,
            server,
            store,
            url,
        })
    }

    /// Closes every connection (frozen ones too: the server ends their sessions), then drops
    /// the schema through a connection of its own.
    pub async fn cleanup(self) {
        let schema = self.store.schema().expect("a schema").to_owned();
        drop(self.forwarder);
        let mut conn = sqlx::PgConnection::connect_with(&self.url.parse().expect("a URL"))
            .await
            .expect("connect");
        sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .execute(&mut conn)
            .await
            .expect("drop the test schema");
    }

    /// Rows of `memo` in the ledger, counted through a connection of its own.
    pub async fn rows(&self, memo: &str) -> i64 {
        let mut conn = sqlx::PgConnection::connect_with(&self.url.parse().expect("a URL"))
            .await
            .expect("connect");
        sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {} WHERE memo = $1",
            ledger(&self.store)
        ))
        .bind(memo)
        .fetch_one(&mut conn)
        .await
        .expect("count rows")
    }
}

use sqlx::Connection as _;

/// A plain tool with a 10 s lease.
pub static SEND: ToolInfo = ToolInfo::idempotent("send").with_lease(Duration::from_secs(10));

/// The transactional tool's lease.
pub const PAY_LEASE: Duration = Duration::from_secs(3);

/// A transactional tool with a 3 s lease.
pub static PAY: ToolInfo = ToolInfo::idempotent("pay").with_lease(PAY_LEASE);

/// The turn of the tests: a short in-flight wait, and no cap on a tool's actions (every call
/// is a new action of the one turn).
pub fn turn(store: &PostgresStore) -> Turn {
    Turn::new("frozen")
        .with_in_flight_wait(Duration::from_secs(1))
        .with_actions_per_tool(u32::MAX)
        .with_store(Arc::new(store.clone()))
}

pub fn call(tool: &'static ToolInfo, turn: &Turn, memo: &str) -> Call {
    let mut args = ArgsDigest::new(tool.name);
    args.arg("memo", memo).expect("a string encodes");
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), tool.name, 1);
    Call::new(tool, turn, key, fingerprint)
}

/// A plain call of `send(memo)` on `store` (its side effect is nothing; it answers 7).
pub async fn plain(store: &PostgresStore, memo: &str) -> Result<i64, Error> {
    plain_in(&turn(store), memo).await
}

/// [`plain`] in `turn`.
pub async fn plain_in(turn: &Turn, memo: &str) -> Result<i64, Error> {
    idem_tools_runtime::execute(call(&SEND, turn, memo), Codec::ok_only(), async {
        Ok::<i64, Error>(7)
    })
    .await
}

/// A transactional call of `pay(memo)` on `store`: one ledger row, its id answered.
pub async fn pay(store: &PostgresStore, memo: &str) -> Result<i64, Failure> {
    let table = ledger(store);
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let turn = turn(store);
    transactional::execute(
        call(&PAY, &turn, memo).with_store(&shared),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            Ok(sqlx::query_scalar(&format!(
                "INSERT INTO {table} (memo) VALUES ($1) RETURNING id"
            ))
            .bind(memo)
            .fetch_one(&mut *conn)
            .await?)
        },
    )
    .await
}
