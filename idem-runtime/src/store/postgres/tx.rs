//! The database side of a transactional call: its claim and its record as SQL text, sent
//! with `BEGIN` and `COMMIT` in one round trip each.
//!
//! They travel in the simple query protocol (several statements, one round trip), which takes
//! no parameters: every value is spelled as a literal — bytes as hex digits
//! (`decode('…', 'hex')`), numbers in decimal, text as an escape string (`E'…'`, its
//! backslashes and quotes escaped, which means the same whatever `standard_conforming_strings`
//! says) — so no text from a caller reaches the statement as SQL. (Not `convert_from` of hex:
//! it made each claim cost milliseconds on the server.)

use std::fmt::Write as _;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use sqlx::{Connection as _, Executor as _, PgConnection, Postgres, Transaction};

use super::conn::within;
use super::ops::fenced;
use super::{PostgresStore, sql_ms, sql_token};
use crate::Result;
use crate::store::{Lease, LeaseToken};

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

/// `text` as an escape-string literal.
fn text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 3);
    out.push_str("E'");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

impl PostgresStore {
    /// `BEGIN` and the claim of `lease`'s key by turn `turn` inside the new transaction
    /// (`idem_claim`). The transaction may sit idle (waiting for its client) for at most
    /// `lease_duration`: past it the server ends the session and rolls everything back, so that
    /// a client it no longer hears from (a frozen process, a partition) does not hold the key's
    /// row lock forever.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn begin_and_claim(
        &self,
        lease: &Lease,
        tool: &str,
        turn: &str,
        fingerprint: &[u8; 32],
        lease_duration: Duration,
        window: Duration,
        lock_timeout: Duration,
    ) -> String {
        format!(
            "BEGIN; SELECT set_config('idle_in_transaction_session_timeout', '{lease}', true), \
             set_config('{CLAIM_SETTING}', '{token}', true); \
             SELECT {prefix}idem_claim({ns}, {key}, {tool}, {fp}, {lease}, {token}, {window}, \
             {timeout}, {turn})",
            prefix = self.inner.sql.prefix,
            ns = text(&lease.namespace),
            key = bytea(lease.key.as_bytes()),
            tool = text(tool),
            fp = bytea(fingerprint),
            lease = sql_ms(lease_duration).max(1),
            token = sql_token(lease.token),
            window = sql_ms(window),
            timeout = sql_ms(lock_timeout).max(1),
            turn = text(turn),
        )
    }

    /// The record of `result` under `lease`, `COMMIT`, and a new (empty) transaction for the
    /// connection's `Transaction` to roll back when it is dropped. The record is made only
    /// inside the transaction its claim opened ([`CLAIM_SETTING`], which a `COMMIT` or
    /// `ROLLBACK` of the tool's ends): it is the one row the statement returns, so the rows the
    /// round trip reports say whether it was made ([`ended_by_the_tool`]).
    pub(crate) fn record_and_commit(&self, lease: &Lease, result: &[u8], ttl: Duration) -> String {
        format!(
            "SELECT {prefix}idem_record({ns}, {key}, {token}, {result}, {ttl}) \
             WHERE current_setting('{CLAIM_SETTING}', true) = '{token}'; COMMIT; BEGIN",
            prefix = self.inner.sql.prefix,
            ns = text(&lease.namespace),
            key = bytea(lease.key.as_bytes()),
            token = sql_token(lease.token),
            result = bytea(result),
            ttl = sql_ms(ttl),
        )
    }

    /// Records `marker` (an interrupted call's) for `lease`'s key if its claim committed — the
    /// tool's body ended the transaction the claim opened, then failed or overran the lease —
    /// whether or not the lease has ended since: the token says nobody claimed the key after
    /// it. The charge before the claim left the row with the token too, but no lease (an
    /// expiry of 0): that row is no claim, and it is what this statement sees of a claim whose
    /// transaction is still open (to be rolled back), so nothing is marked or waited for. A
    /// row another caller's claim has locked since is skipped, not waited for. Whether it was
    /// marked.
    pub(crate) async fn mark_ended(
        &self,
        lease: &Lease,
        marker: &[u8],
        ttl: Duration,
    ) -> Result<bool> {
        let changed = self
            .on_conn("complete", async |conn| {
                let mark = sqlx::query(&self.inner.sql.mark_ended)
                    .bind(marker)
                    .bind(sql_ms(ttl));
                fenced(mark, lease).execute(&mut *conn).await
            })
            .await?
            .rows_affected();
        Ok(changed > 0)
    }
}

/// A setting local to the transaction a transactional claim opens, holding the claim's token:
/// a `COMMIT` or `ROLLBACK` the tool's body sends on its connection ends that transaction and
/// the setting with it.
pub(crate) const CLAIM_SETTING: &str = "idem.claim";

/// Whether a record-and-commit whose round trip reported `rows` rows made no record because
/// the transaction its claim opened was ended by the tool's body.
pub(crate) fn ended_by_the_tool(rows: u64) -> bool {
    rows == 0
}

/// Asks whether the transaction the claim made with `token` opened is still open on `conn`
/// (the tool's body may have ended it), answered within `bound`.
pub(crate) async fn still_open(
    conn: &mut PgConnection,
    token: LeaseToken,
    bound: Duration,
) -> Result<bool, sqlx::Error> {
    let sql = format!("SELECT current_setting('{CLAIM_SETTING}', true)");
    let setting: Option<String> = within(bound, sqlx::query_scalar(&sql).fetch_one(conn)).await?;
    Ok(setting.as_deref() == Some(sql_token(token).to_string().as_str()))
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
        assert_eq!(text("a'; DROP TABLE x; --"), r"E'a\'; DROP TABLE x; --'");
        assert_eq!(text(r"\'"), r"E'\\\''");
    }
}
