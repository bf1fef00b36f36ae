//! [`Store`] for [`SqliteStore`]: `begin` reads on the calling thread when it can, and every
//! write runs there too when the connection is free; the rest goes to the store's thread.

use std::time::Duration;

use rusqlite::{OptionalExtension, params};

use super::claim::{OwnedBegin, refused_by_key};
use super::row::{COLUMNS, Corrupt, Seen, corrupt, read_row, select};
use super::statements::{COMPLETE, COMPLETED_BY, HAS_RECORD, RELEASE, REMOVE_SHOWN, RENEW};
use super::thread::Job;
use super::worker::Worker;
use super::{SqliteStore, sql_ms, sql_token};
use crate::clock::duration_ms;
use crate::key::Key;
use crate::store::{Begin, BeginRequest, Lease, Record, Removed, Store, StoreFuture};
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
fn completed_by(worker: &Worker<'_>, lease: &Lease) -> rusqlite::Result<bool> {
    worker
        .conn
        .prepare_cached(COMPLETED_BY)?
        .query_row(
            params![
                &*lease.namespace,
                lease.key.as_bytes().as_slice(),
                sql_token(lease.token),
                sql_ms(worker.now)
            ],
            |_| Ok(()),
        )
        .optional()
        .map(|found| found.is_some())
}

/// Completes the record `lease` holds with `result`, kept for `ttl`.
fn complete(
    worker: &mut Worker<'_>,
    lease: &Lease,
    result: &[u8],
    ttl: Duration,
) -> rusqlite::Result<Result<()>> {
    worker.writing()?;
    let now = worker.now;
    let changed = worker.conn.prepare_cached(COMPLETE)?.execute(params![
        result,
        sql_ms(now.saturating_add(duration_ms(ttl))),
        &*lease.namespace,
        lease.key.as_bytes().as_slice(),
        sql_token(lease.token),
        sql_ms(now),
    ])?;
    if changed == 0 && completed_by(worker, lease)? {
        return Ok(Ok(())); // completed by this lease already: a retried complete
    }
    Ok(held(changed, &lease.key))
}

/// Runs `sql` (`RENEW` with its new expiry first, or `RELEASE`) for the record `lease` holds.
fn fenced(
    worker: &mut Worker<'_>,
    lease: &Lease,
    sql: &str,
    expiry: Option<Duration>,
) -> rusqlite::Result<Result<()>> {
    worker.writing()?;
    let now = worker.now;
    let mut stmt = worker.conn.prepare_cached(sql)?;
    let (namespace, key, token) = (
        &*lease.namespace,
        lease.key.as_bytes().as_slice(),
        sql_token(lease.token),
    );
    let changed = match expiry {
        Some(duration) => stmt.execute(params![
            sql_ms(now.saturating_add(duration_ms(duration))),
            namespace,
            key,
            token,
            sql_ms(now),
        ])?,
        None => stmt.execute(params![namespace, key, token, sql_ms(now)])?,
    };
    Ok(held(changed, &lease.key))
}

/// The live records `sql` (selecting [`COLUMNS`]) finds with `params`, in its order. One
/// corrupt row must not hide the others: it is skipped, and named in the log.
fn listed(
    worker: &mut Worker<'_>,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<Result<Vec<Record>>> {
    let now = worker.now;
    let mut stmt = worker.conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params, read_row)?;
    let mut out = Vec::new();
    for row in rows {
        let (namespace, key, record) = match row? {
            Ok(row) => (
                row.namespace.clone(),
                hex::encode(&row.key),
                row.into_record(now, worker.conn),
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
}

impl SqliteStore {
    /// `begin` on this thread, reading on a reader connection: `Some` answer if that settles
    /// it (a live record, a spent per-key count, a corrupt row), `None` if the key has to be
    /// claimed, and `Err(())` if the whole of `begin` has to run on the writing connection.
    fn begin_read(&self, req: &BeginRequest<'_>) -> std::result::Result<Option<Result<Begin>>, ()> {
        let readers = self.readers.as_ref().ok_or(())?;
        match readers.seen(req.namespace, req.turn, req.key, self.clock.now_ms()) {
            Some(Ok(Seen::Live(answer))) => Ok(Some(Ok(answer))),
            // A claim whose holder is gone is freed and claimed on the writing connection.
            Some(Ok(Seen::Held(held))) if held.is_abandoned() => Err(()),
            Some(Ok(Seen::Held(held))) => Ok(Some(Ok(held.in_flight()))),
            Some(Ok(Seen::Free { attempts })) => Ok(refused_by_key(attempts, &req.charge).map(Ok)),
            Some(Err(corrupt)) => Ok(Some(Err(corrupt))),
            None => Err(()),
        }
    }

    /// Runs `work` on the writing connection on this thread if it is free and nothing is on
    /// its way to the store's thread (under load, writes join its batches).
    fn here<T>(
        &self,
        work: &mut dyn FnMut(&mut Worker<'_>) -> rusqlite::Result<Result<T>>,
    ) -> Option<Result<T>> {
        if !self.pending.is_idle() {
            return None;
        }
        let mut due = false;
        let answer = self.writer.here(&*self.clock, &mut due, work);
        if due {
            let _ = self.jobs.send(Job::Maintain);
        }
        answer
    }

    /// A write: run on this thread with `here` if it can (see [`Self::here`]), else sent to
    /// the store's thread as `queued()`.
    fn write<'a, T, F>(
        &self,
        operation: &'static str,
        skip_if_abandoned: bool,
        key: &Key,
        mut here: impl FnMut(&mut Worker<'_>) -> rusqlite::Result<Result<T>>,
        queued: impl FnOnce() -> F,
    ) -> StoreFuture<'a, T>
    where
        T: Send + 'static,
        F: FnMut(&mut Worker<'_>) -> rusqlite::Result<Result<T>> + Send + 'static,
    {
        if let Some(answer) = self.here(&mut here) {
            return StoreFuture::ready(answer);
        }
        self.submit(operation, true, skip_if_abandoned, Some(key), queued())
            .boxed()
    }
}

impl Store for SqliteStore {
    /// On this thread when the store is idle: the whole of `begin` on the writing connection
    /// if it is free (its cache is the warmest), else a read on a reader connection, which
    /// answers a live record and leaves a claim to the writing connection. While writes are
    /// queued, the whole of `begin` joins them on the store's thread.
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        if let Some(answer) = self.here(&mut |worker| worker.begin(&req)) {
            return StoreFuture::ready(answer);
        }
        let whole = !self.pending.is_clear(req.key)
            || match self.begin_read(&req) {
                Ok(Some(answer)) => return StoreFuture::ready(answer),
                Ok(None) => false,
                Err(()) => true,
            };
        let step = move |worker: &mut Worker<'_>, req: &BeginRequest<'_>| {
            if whole {
                worker.begin(req)
            } else {
                worker.claim(req)
            }
        };
        self.write(
            "begin",
            true,
            req.key,
            |worker| step(worker, &req),
            || {
                let owned = OwnedBegin::new(&req);
                move |worker: &mut Worker<'_>| step(worker, &owned.request())
            },
        )
    }

    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        self.write(
            "renew",
            false,
            &lease.key,
            |worker| fenced(worker, lease, RENEW, Some(duration)),
            || {
                let lease = lease.clone();
                move |worker: &mut Worker<'_>| fenced(worker, &lease, RENEW, Some(duration))
            },
        )
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        self.write(
            "complete",
            false,
            &lease.key,
            |worker| complete(worker, lease, result, ttl),
            || {
                let (lease, result) = (lease.clone(), result.to_vec());
                move |worker: &mut Worker<'_>| complete(worker, &lease, &result, ttl)
            },
        )
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        self.write(
            "release",
            false,
            &lease.key,
            |worker| fenced(worker, lease, RELEASE, None),
            || {
                let lease = lease.clone();
                move |worker: &mut Worker<'_>| fenced(worker, &lease, RELEASE, None)
            },
        )
    }

    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        let (namespace, key) = (namespace.to_owned(), *key);
        self.submit("get", false, true, None, move |worker| {
            let now = worker.now;
            Ok(match select(worker.conn, &namespace, &key)? {
                Ok(Some(row)) if row.is_live(now) => row
                    .into_record(now, worker.conn)
                    .map(Some)
                    .map_err(corrupt(&key)),
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
                let (deleted, next) = worker.sweep(after.as_deref(), now)?;
                total = total.saturating_add(u64::try_from(deleted).unwrap_or(u64::MAX));
                match next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            // And every count of started actions.
            let mut after = None;
            while let (_, Some(next)) = worker.sweep_counts(after.as_deref(), now)? {
                after = Some(next);
            }
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
            let sql = format!(
                "SELECT {COLUMNS} FROM idem_records WHERE expires_at_ms > ?1 \
                 AND (?2 IS NULL OR namespace = ?2) LIMIT ?3"
            );
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            listed(worker, &sql, params![sql_ms(worker.now), namespace, limit])
        })
        .boxed()
    }

    /// Through the index on `(namespace, turn, created_at_ms)`.
    fn list_turn<'a>(
        &'a self,
        namespace: &'a str,
        turn: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        let (namespace, turn) = (namespace.to_owned(), turn.to_owned());
        self.submit("list_turn", false, true, None, move |worker| {
            let sql = format!(
                "SELECT {COLUMNS} FROM idem_records WHERE namespace = ?1 AND turn = ?2 \
                 AND expires_at_ms > ?3 ORDER BY created_at_ms, key LIMIT ?4"
            );
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let now = sql_ms(worker.now);
            listed(worker, &sql, params![namespace, turn, now, limit])
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
                .prepare_cached("DELETE FROM idem_records WHERE key = ?2 AND namespace = ?1")?
                .execute(params![namespace, owned.as_bytes().as_slice()])?;
            Ok(Ok(live))
        })
        .boxed()
    }

    fn remove_shown<'a>(&'a self, shown: &'a Record) -> StoreFuture<'a, Removed> {
        let (namespace, key) = (shown.namespace.clone(), shown.key);
        let (state, created) = (shown.state.as_str(), sql_ms(shown.created_at_ms));
        self.submit("remove", true, false, Some(&key), move |worker| {
            let (now, key) = (sql_ms(worker.now), key.as_bytes().as_slice());
            worker.writing()?;
            let deleted: Option<bool> = worker
                .conn
                .prepare_cached(REMOVE_SHOWN)?
                .query_row(params![namespace, key, state, created, now], |row| {
                    row.get(0)
                })
                .optional()?;
            if let Some(live) = deleted {
                return Ok(Ok(Removed::Deleted { live }));
            }
            let has_record = worker
                .conn
                .prepare_cached(HAS_RECORD)?
                .query_row(params![namespace, key], |_| Ok(()))
                .optional()?
                .is_some();
            Ok(Ok(if has_record {
                Removed::Changed
            } else {
                Removed::Gone
            }))
        })
        .boxed()
    }
}
