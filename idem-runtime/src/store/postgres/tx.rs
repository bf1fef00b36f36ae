//! The database side of a transactional call: its claim and its record as SQL text, sent
//! with `BEGIN` and `COMMIT` in one round trip each.
//!
//! They travel in the simple query protocol (several statements, one round trip), which takes
//! no parameters: every value is spelled as a literal — bytes as hex digits
//! (`decode('…', 'hex')`), numbers in decimal, text as an escape string (`E'…'`, each
//! backslash doubled and each quote doubled, `''`, which means the same whatever
//! `standard_conforming_strings` and `backslash_quote` say: a quote written `\'` is refused
//! under `backslash_quote = off`) — so no text from a caller reaches the statement as SQL.
//! (Not `convert_from` of hex: it made each claim cost milliseconds on the server.)

use std::fmt::Write as _;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use sqlx::{Connection as _, Executor as _, PgConnection, Postgres, Transaction};

use super::conn::within;
use super::ops::fenced;
use super::{PostgresStore, sql_ms, sql_token};
use crate::Result;
use crate::store::Lease;

/// `bytes` as a `bytea` literal.
fn bytea(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2 + 20);
    out.push_str("decode('");
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out.push_str("', 'hex')");
    out
}

/// `text` as an escape-string literal: backslashes doubled (an escape string reads them as
/// escapes whatever `standard_conforming_strings` says) and quotes doubled (never `\'`, which a
/// server with `backslash_quote = off` refuses). A NUL, which PostgreSQL's text cannot hold, is
/// left as it is: the server refuses the statement, as it refuses such text as a parameter.
fn text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 3);
    out.push_str("E'");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("''"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

impl PostgresStore {
    /// `BEGIN` and the claim of `claim.lease`'s key inside the new transaction (`idem_claim`),
    /// written as the record of an interrupted call (`claim.marker`, kept `claim.ttl`) until
    /// the result replaces it: a transaction the tool's body commits itself leaves that record.
    /// The transaction may sit idle (waiting for its client) for at most `claim.duration`: past
    /// it the server ends the session and rolls everything back, so that a client it no longer
    /// hears from (a frozen process, a partition) does not hold the key's row lock forever. And
    /// a statement of the body still running — waiting for a lock, say — when idem gave up on
    /// the call (its lease) and closed the connection is ended within [`CLIENT_CHECK_MS`]
    /// (PostgreSQL 14 and later: `client_connection_check_interval`), not when it finishes.
    pub(crate) fn begin_and_claim(&self, claim: &TxClaim<'_>) -> String {
        let lease = claim.lease;
        format!(
            "BEGIN; SELECT set_config('idle_in_transaction_session_timeout', '{duration}', true), \
             set_config('{CLAIM_SETTING}', '{token}', true), \
             CASE WHEN current_setting('server_version_num')::int >= 140000 THEN \
             set_config('client_connection_check_interval', '{CLIENT_CHECK_MS}', true) END; \
             SELECT {prefix}idem_claim({ns}, {key}, {tool}, {fp}, {marker}, {ttl}, {token}, \
             {window}, {timeout}, {turn})",
            prefix = self.inner.sql.prefix,
            ns = text(&lease.namespace),
            key = bytea(lease.key.as_bytes()),
            tool = text(claim.tool),
            fp = bytea(claim.fingerprint),
            marker = bytea(claim.marker),
            ttl = sql_ms(claim.ttl),
            duration = sql_ms(claim.duration).max(1),
            token = sql_token(lease.token),
            window = sql_ms(claim.window),
            timeout = sql_ms(claim.lock_timeout).max(1),
            turn = text(claim.turn),
        )
    }

    /// The record of `result` under `lease`, `COMMIT`, and a new (empty) transaction for the
    /// connection's `Transaction` to roll back when it is dropped. The record is made only
    /// inside the transaction its claim opened ([`own_transaction`]):
    /// otherwise a number is read from [`ENDED`], which fails, so that neither the record nor
    /// the `COMMIT` runs, not even of a transaction the tool began itself afterwards
    /// ([`ended_by_the_tool`]).
    pub(crate) fn record_and_commit(&self, lease: &Lease, result: &[u8], ttl: Duration) -> String {
        format!(
            "SELECT {prefix}idem_record({ns}, {key}, {token}, {result}, {ttl}) \
             WHERE (CASE WHEN {own} THEN '0' ELSE '{ENDED}' END)::bigint = 0; COMMIT; BEGIN",
            prefix = self.inner.sql.prefix,
            ns = text(&lease.namespace),
            key = bytea(lease.key.as_bytes()),
            token = sql_token(lease.token),
            result = bytea(result),
            ttl = sql_ms(ttl),
            own = own_transaction(
                &self.inner.sql.prefix,
                &text(&lease.namespace),
                &bytea(lease.key.as_bytes()),
                &sql_token(lease.token).to_string(),
            ),
        )
    }

    /// Asks whether the transaction the claim made with `lease` opened is still open on `conn`
    /// (the tool's body may have ended it), answered within `bound`.
    pub(crate) async fn still_open(
        &self,
        conn: &mut PgConnection,
        lease: &Lease,
        bound: Duration,
    ) -> Result<bool, sqlx::Error> {
        // Parameters, not literals: one statement text per store, prepared once.
        let own = own_transaction(&self.inner.sql.prefix, "$1", "$2", "$3::bigint");
        let sql = format!("SELECT {own}");
        let query = sqlx::query_scalar(&sql)
            .bind(&*lease.namespace)
            .bind(lease.key.as_bytes().as_slice())
            .bind(sql_token(lease.token));
        within(bound, query.fetch_one(conn)).await
    }

    /// Whether the claim made with `lease` committed: the tool's body ended the transaction
    /// the claim opened with a `COMMIT`, and the interrupted call's record the claim wrote
    /// stands (`idem_claim`).
    pub(crate) async fn claim_committed(&self, lease: &Lease) -> Result<bool> {
        let committed = self
            .on_conn("get", async |conn| {
                fenced(sqlx::query(&self.inner.sql.completed_by), lease)
                    .fetch_optional(&mut *conn)
                    .await
            })
            .await?;
        Ok(committed.is_some())
    }
}

/// A transactional call's claim, as [`PostgresStore::begin_and_claim`] writes it.
pub(crate) struct TxClaim<'a> {
    /// The key and the token.
    pub(crate) lease: &'a Lease,
    /// The tool's name.
    pub(crate) tool: &'a str,
    /// The id of the turn that claims.
    pub(crate) turn: &'a str,
    /// The call's fingerprint.
    pub(crate) fingerprint: &'a [u8; 32],
    /// The interrupted call's record, what a `COMMIT` of the tool's own leaves.
    pub(crate) marker: &'a [u8],
    /// How long that record, or the result, is kept.
    pub(crate) ttl: Duration,
    /// The call's lease: how long the transaction may sit idle.
    pub(crate) duration: Duration,
    /// The turn's budget window.
    pub(crate) window: Duration,
    /// How long the claim waits for a transaction that holds the key's row.
    pub(crate) lock_timeout: Duration,
}

/// How often, in milliseconds, the server checks that the client of a transactional call's
/// statement is still connected while the statement runs.
pub(crate) const CLIENT_CHECK_MS: u64 = 1000;

/// A setting local to the transaction a transactional claim opens, holding the claim's token:
/// a `COMMIT` or `ROLLBACK` the tool's body sends on its connection ends that transaction and
/// the setting with it.
pub(crate) const CLAIM_SETTING: &str = "idem.claim";

/// What [`PostgresStore::record_and_commit`] reads as a number when the transaction its claim
/// opened is over: the server's error quotes it.
const ENDED: &str = "idem: the transaction of the claim was ended by the tool";

/// Whether a record-and-commit that answered `recorded` (the rows its statements returned or
/// changed) made no record, and committed nothing, because the transaction its claim opened
/// was ended by the tool's body.
pub(crate) fn ended_by_the_tool(recorded: &Result<u64, sqlx::Error>) -> bool {
    match recorded {
        Ok(rows) => *rows == 0,
        Err(sqlx::Error::Database(error)) => error.message().contains(ENDED),
        Err(_) => false,
    }
}

/// A condition that holds inside the transaction the claim of the key `ns`, `key` with `token`
/// (each spelled as SQL) opened, and in no other: [`CLAIM_SETTING`] holds the claim's token (a
/// `COMMIT` or `ROLLBACK` of the tool's ends it) or — the setting gone though the transaction
/// is not, as after a `RESET ALL` of the tool's — the claim's row is this transaction's own
/// write (its `xmin` is the transaction's id: the claim is the transaction's first write, at
/// its top level). The row is read only when the setting does not answer (`CASE` keeps the
/// order): a call pays nothing for it, and never an extra round trip.
fn own_transaction(prefix: &str, ns: &str, key: &str, token: &str) -> String {
    format!(
        "CASE WHEN current_setting('{CLAIM_SETTING}', true) = ({token})::text THEN true \
         ELSE EXISTS (SELECT 1 FROM {prefix}idem_records AS r WHERE r.namespace = {ns} \
         AND r.key = {key} AND r.token = {token} \
         AND r.xmin = (txid_current_if_assigned() % 4294967296)::text::xid) END"
    )
}

/// Runs `sql` (several statements, the simple query protocol) on `conn`, answered within
/// `bound` (else [`unanswered`](super::conn::unanswered): the connection's state is unknown);
/// the rows its statements returned or changed. Boxed, as [`PostgresStore::charge_on`] is.
pub(crate) fn raw<'a>(
    conn: &'a mut PgConnection,
    sql: &'a str,
    bound: Duration,
) -> Pin<Box<dyn Future<Output = Result<u64, sqlx::Error>> + Send + 'a>> {
    // A `&str` without arguments goes out as one simple query (`sqlx::raw_sql`'s future is not
    // provably `Send` for a borrowed connection).
    Box::pin(within(bound, async move {
        conn.execute(sql).await.map(|done| done.rows_affected())
    }))
}

/// `BEGIN` and the claim (`sql`, from [`PostgresStore::begin_and_claim`]) on `conn`, answered
/// within `bound` (else [`unanswered`](super::conn::unanswered)).
pub(crate) async fn begin(
    conn: &mut PgConnection,
    sql: String,
    bound: Duration,
) -> Result<Transaction<'_, Postgres>, sqlx::Error> {
    within(bound, conn.begin_with(sql)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_hex_digits_only() {
        assert_eq!(bytea(b"\x00'\xff"), "decode('0027ff', 'hex')");
        assert_eq!(text("a'; DROP TABLE x; --"), r"E'a''; DROP TABLE x; --'");
        assert_eq!(text(r"\'"), r"E'\\'''");
    }
}
