//! [`Store`] for [`SqliteStore`]: `begin` reads on the calling thread when it can; every other
//! step is one operation on the store's thread.

use std::time::Duration;

use rusqlite::{OptionalExtension, params};

use super::claim::{OwnedBegin, refused_by_key};
use super::row::{COLUMNS, Corrupt, Seen, corrupt, read_row, select};
use super::worker::Worker;
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
fn completed_by(worker: &mut Worker<'_>, lease: &Lease) -> rusqlite::Result<bool> {
    let now = worker.now;
    worker
        .stmts
        .completed_by
        .query_row(
            params![
                &*lease.namespace,
                lease.key.as_bytes().as_slice(),
                sql_token(lease.token),
                sql_ms(now)
            ],
            |_| Ok(()),
        )
        .optional()
        .map(|found| found.is_some())
}

impl SqliteStore {
    /// `begin` read on this thread: `Some` answer if that settles it (a live record, a spent
    /// per-key count, a corrupt row), `None` if a claim has to be sent, and `Err(())` if the
    /// store's thread has to do the whole of it.
    fn begin_here(&self, req: &BeginRequest<'_>) -> std::result::Result<Option<Result<Begin>>, ()> {
        let readers = self.readers.as_ref().ok_or(())?;
        if !self.pending.is_clear(req.key) {
            return Err(()); // after what this store sent for the key
        }
        match readers.seen(req.namespace, req.key, self.clock.now_ms()) {
            Some(Ok(Seen::Live(answer))) => Ok(Some(Ok(answer))),
            Some(Ok(Seen::Free { attempts })) => Ok(refused_by_key(attempts, &req.charge).map(Ok)),
            Some(Err(corrupt)) => Ok(Some(Err(corrupt))),
            None => Err(()),
        }
    }
}

impl Store for SqliteStore {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        let whole = match self.begin_here(&req) {
            Ok(Some(answer)) => return Box::pin(std::future::ready(answer)),
            Ok(None) => false,
            Err(()) => true,
        };
        let owned = OwnedBegin {
            namespace: req.namespace.to_owned(),
            key: *req.key,
            tool: req.tool,
            fingerprint: *req.fingerprint,
            lease: req.lease,
            token: req.token,
            charge: req.charge,
        };
        self.submit("begin", true, true, Some(req.key), move |worker| {
            if whole {
                worker.begin(&owned)
            } else {
                worker.claim(&owned)
            }
        })
        .boxed()
    }

    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        let owned = lease.clone();
        self.submit("renew", true, false, Some(&lease.key), move |worker| {
            worker.writing()?;
            let now = worker.now;
            let changed = worker.stmts.renew.execute(params![
                sql_ms(now.saturating_add(duration_ms(duration))),
                &*owned.namespace,
                owned.key.as_bytes().as_slice(),
                sql_token(owned.token),
                sql_ms(now),
            ])?;
            Ok(held(changed, &owned.key))
        })
        .boxed()
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        let (owned, result) = (lease.clone(), result.to_vec());
        self.submit("complete", true, false, Some(&lease.key), move |worker| {
            worker.writing()?;
            let now = worker.now;
            let changed = worker.stmts.complete.execute(params![
                result,
                sql_ms(now.saturating_add(duration_ms(ttl))),
                &*owned.namespace,
                owned.key.as_bytes().as_slice(),
                sql_token(owned.token),
                sql_ms(now),
            ])?;
            if changed == 0 && completed_by(worker, &owned)? {
                return Ok(Ok(())); // completed by this lease already: a retried complete
            }
            Ok(held(changed, &owned.key))
        })
        .boxed()
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        let owned = lease.clone();
        self.submit("release", true, false, Some(&lease.key), move |worker| {
            worker.writing()?;
            let now = worker.now;
            let changed = worker.stmts.release.execute(params![
                &*owned.namespace,
                owned.key.as_bytes().as_slice(),
                sql_token(owned.token),
                sql_ms(now)
            ])?;
            Ok(held(changed, &owned.key))
        })
        .boxed()
    }

    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        let (namespace, key) = (namespace.to_owned(), *key);
        self.submit("get", false, true, None, move |worker| {
            let now = worker.now;
            Ok(match select(worker.conn, &namespace, &key)? {
                Ok(Some(row)) if row.is_live(now) => {
                    row.into_record(now).map(Some).map_err(corrupt(&key))
                }
                Ok(_) => Ok(None),
                Err(corrupt) => Err(corrupt),
            })
        })
        .boxed()
    }

    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        self.submit("purge_expired", true, true, None, move |worker| {
            let now = worker.now;
            // Every record, in steps of a few hundred (each its own short write).
            let mut total = 0u64;
            let mut after = None;
            loop {
                let (deleted, next) = worker.sweep(after.as_ref(), now)?;
                total = total.saturating_add(u64::try_from(deleted).unwrap_or(u64::MAX));
                match next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            while worker.purge_turn_counts(now)? > 0 {}
            Ok(Ok(total))
        })
        .boxed()
    }

    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        let namespace = namespace.map(str::to_owned);
        self.submit("list", false, true, None, move |worker| {
            let now = worker.now;
            let sql = format!(
                "SELECT {COLUMNS} FROM idem_records WHERE expires_at_ms > ?1 \
                 AND (?2 IS NULL OR namespace = ?2) LIMIT ?3"
            );
            let mut stmt = worker.conn.prepare_cached(&sql)?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = stmt.query_map(params![sql_ms(now), namespace, limit], read_row)?;
            let mut out = Vec::new();
            for row in rows {
                // One corrupt row must not hide the others: it is skipped, and named in the log.
                let (namespace, key, record) = match row? {
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
            Ok(Ok(out))
        })
        .boxed()
    }

    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        let (namespace, owned) = (namespace.to_owned(), *key);
        self.submit("remove", true, false, Some(key), move |worker| {
            let now = worker.now;
            let live = select(worker.conn, &namespace, &owned)
                .ok()
                .and_then(|row| row.ok().flatten())
                .is_some_and(|row| row.is_live(now));
            worker.writing()?;
            worker
                .conn
                .prepare_cached("DELETE FROM idem_records WHERE namespace = ?1 AND key = ?2")?
                .execute(params![namespace, owned.as_bytes().as_slice()])?;
            Ok(Ok(live))
        })
        .boxed()
    }
}
