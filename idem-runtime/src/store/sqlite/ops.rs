//! [`Store`] for [`SqliteStore`]: each operation one job on the connection's thread.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::{OptionalExtension, params};

use super::row::{COLUMNS, Corrupt, corrupt, read_row, select};
use super::worker::{OwnedBegin, Worker};
use super::{SqliteStore, sql_ms, sql_token};
use crate::clock::duration_ms;
use crate::key::Key;
use crate::store::{Begin, BeginRequest, Lease, Record, Store, StoreFuture};
use crate::{Error, Result};

/// `Ok` if a statement guarded by the lease token changed a row, else [`Error::LeaseLost`].
fn held(changed: usize, key: &Key) -> Result<()> {
    if changed == 0 {
        Err(Error::LeaseLost { key: key.short() })
    } else {
        Ok(())
    }
}

/// Whether `lease` completed its key's live record: a repeated `complete` then succeeds.
fn completed_by(worker: &Worker, lease: &Lease, now: u64) -> Result<bool> {
    worker
        .conn
        .prepare_cached(
            "SELECT 1 FROM idem_records WHERE namespace = ?1 AND key = ?2 AND token = ?3 \
             AND state = 'completed' AND expires_at_ms > ?4",
        )
        .and_then(|mut stmt| {
            stmt.query_row(
                params![
                    &*lease.namespace,
                    lease.key.as_bytes().as_slice(),
                    sql_token(lease.token),
                    sql_ms(now)
                ],
                |_| Ok(()),
            )
            .optional()
        })
        .map(|found| found.is_some())
        .map_err(|e| Error::store("complete", e))
}

impl Store for SqliteStore {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        let req = OwnedBegin {
            namespace: req.namespace.to_string(),
            key: *req.key,
            tool: req.tool,
            fingerprint: *req.fingerprint,
            lease: req.lease,
            token: req.token,
            charge: req.charge,
        };
        let clock = Arc::clone(&self.clock);
        self.submit("begin", true, move |worker, now| {
            worker.begin(&req, now, &*clock)
        })
        .boxed()
    }

    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        let lease = lease.clone();
        self.submit("renew", false, move |worker, now| {
            let changed = worker.write(
                "renew",
                "UPDATE idem_records SET expires_at_ms = ?1 WHERE namespace = ?2 AND key = ?3 \
                 AND token = ?4 AND state = 'in_progress' AND expires_at_ms > ?5",
                params![
                    sql_ms(now.saturating_add(duration_ms(duration))),
                    &*lease.namespace,
                    lease.key.as_bytes().as_slice(),
                    sql_token(lease.token),
                    sql_ms(now),
                ],
            )?;
            held(changed, &lease.key)
        })
        .boxed()
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        let (lease, result) = (lease.clone(), result.to_vec());
        self.submit("complete", false, move |worker, now| {
            // The token stays in the row, so that a retried complete is recognised.
            let changed = worker.write(
                "complete",
                "UPDATE idem_records SET state = 'completed', result = ?1, expires_at_ms = ?2, \
                 attempts = 0, attempts_expire_ms = 0 WHERE namespace = ?3 AND key = ?4 AND token = ?5 \
                 AND state = 'in_progress' AND expires_at_ms > ?6",
                params![
                    result,
                    sql_ms(now.saturating_add(duration_ms(ttl))),
                    &*lease.namespace,
                    lease.key.as_bytes().as_slice(),
                    sql_token(lease.token),
                    sql_ms(now),
                ],
            )?;
            if changed == 0 && completed_by(worker, &lease, now)? {
                return Ok(()); // completed by this lease already: a retried complete
            }
            held(changed, &lease.key)
        })
        .boxed()
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        let lease = lease.clone();
        self.submit("release", false, move |worker, now| {
            // The row stays, expired, with the key's attempt count.
            let changed = worker.write(
                "release",
                "UPDATE idem_records SET expires_at_ms = 0 WHERE namespace = ?1 AND key = ?2 \
                 AND token = ?3 AND state = 'in_progress' AND expires_at_ms > ?4",
                params![
                    &*lease.namespace,
                    lease.key.as_bytes().as_slice(),
                    sql_token(lease.token),
                    sql_ms(now)
                ],
            )?;
            held(changed, &lease.key)
        })
        .boxed()
    }

    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        let (namespace, key) = (namespace.to_owned(), *key);
        self.submit("get", true, move |worker, now| {
            match select(&worker.conn, "get", &namespace, &key)? {
                Some(row) if row.is_live(now) => {
                    row.into_record(now).map(Some).map_err(corrupt(&key))
                }
                _ => Ok(None),
            }
        })
        .boxed()
    }

    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        self.submit("purge_expired", true, move |worker, now| {
            let mut total = 0u64;
            loop {
                let (records, counts) = worker
                    .purge_batch(now)
                    .map_err(|e| Error::store("purge_expired", e))?;
                total = total.saturating_add(u64::try_from(records).unwrap_or(u64::MAX));
                if records == 0 && counts == 0 {
                    return Ok(total);
                }
            }
        })
        .boxed()
    }
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        let namespace = namespace.map(str::to_owned);
        self.submit("list", true, move |worker, now| {
            let fail = |e: rusqlite::Error| Error::store("list", e);
            let sql = format!(
                "SELECT {COLUMNS} FROM idem_records WHERE expires_at_ms > ?1 \
                 AND (?2 IS NULL OR namespace = ?2) LIMIT ?3"
            );
            let mut stmt = worker.conn.prepare_cached(&sql).map_err(fail)?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = stmt
                .query_map(params![sql_ms(now), namespace, limit], read_row)
                .map_err(fail)?;
            let mut out = Vec::new();
            for row in rows {
                // One corrupt row must not hide the others: it is skipped, and named in the log.
                let (namespace, key, record) = match row.map_err(fail)? {
                    Ok(row) => (
                        row.namespace.clone(),
                        hex::encode(&row.key),
                        row.into_record(now),
                    ),
                    Err(corrupt) => (String::new(), String::new(), Err(corrupt)),
                };
                match record {
                    Ok(record) => out.push(record),
                    Err(Corrupt(message)) => tracing::warn!(target: "idem", namespace, key,
                        message, "skipping a corrupt SQLite record; remove it with `remove`"),
                }
            }
            Ok(out)
        })
        .boxed()
    }

    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        let (namespace, key) = (namespace.to_owned(), *key);
        self.submit("remove", false, move |worker, now| {
            let live = select(&worker.conn, "remove", &namespace, &key)
                .ok()
                .flatten()
                .is_some_and(|row| row.is_live(now));
            worker.write(
                "remove",
                "DELETE FROM idem_records WHERE namespace = ?1 AND key = ?2",
                params![namespace, key.as_bytes().as_slice()],
            )?;
            Ok(live)
        })
        .boxed()
    }
}
