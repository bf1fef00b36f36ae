//! `begin` on the store's thread: a claim is one conditional upsert that applies the per-key
//! budget rule itself; a claim charged to the counts of started actions (a turn with a cap, the
//! per-tool cap) reads the key's row again and, for a new action, reads and writes those
//! counts, in one transaction with the claim. And the whole of `begin`, for when it could not
//! read on the caller's thread.

use std::time::Duration;

use rusqlite::{OptionalExtension, params};

use super::row::{self, Held, Seen};
use super::statements::{CLAIM, FREE_ABANDONED, SEEN, SET_TURN_COUNT, TURN_COUNT};
use super::worker::Worker;
use super::{sql_ms, sql_token};
use crate::clock::duration_ms;
use crate::key::{Fingerprint, Key};
use crate::store::budget::{self, CounterId};
use crate::store::holder::Holder;
use crate::store::{Begin, BeginRequest, Charge, LeaseToken};
use crate::{Error, Result};

/// How often a claim is tried again when the key changed hands between the claim and the read
/// that explains why it did not take (another process, between two autocommit statements).
const CLAIM_TRIES: usize = 4;

/// A [`BeginRequest`] that can travel to the store's thread.
pub(super) struct OwnedBegin {
    namespace: String,
    key: Key,
    tool: &'static str,
    turn: String,
    fingerprint: Fingerprint,
    lease: Duration,
    ttl: Duration,
    token: LeaseToken,
    charge: Charge,
}

impl OwnedBegin {
    pub(super) fn new(req: &BeginRequest<'_>) -> Self {
        OwnedBegin {
            namespace: req.namespace.to_owned(),
            key: *req.key,
            tool: req.tool,
            turn: req.turn.to_owned(),
            fingerprint: *req.fingerprint,
            lease: req.lease,
            ttl: req.ttl,
            token: req.token,
            charge: req.charge,
        }
    }

    /// The request again.
    pub(super) fn request(&self) -> BeginRequest<'_> {
        BeginRequest {
            namespace: &self.namespace,
            key: &self.key,
            tool: self.tool,
            turn: &self.turn,
            fingerprint: &self.fingerprint,
            lease: self.lease,
            ttl: self.ttl,
            token: self.token,
            charge: self.charge,
        }
    }
}

/// `begin`'s answer when the per-key count alone refuses a claim.
pub(super) fn refused_by_key(attempts: u32, charge: &Charge) -> Option<Begin> {
    let counts = budget::Counts {
        attempts,
        ..budget::Counts::default()
    };
    match budget::charge(counts, charge) {
        Err(exhausted @ crate::store::Exhausted::Key { .. }) => Some(Begin::Refused(exhausted)),
        _ => None,
    }
}

impl Worker<'_> {
    /// What `begin` learns of the request's key.
    fn seen(&mut self, req: &BeginRequest<'_>) -> rusqlite::Result<Result<Seen>> {
        row::seen(
            &mut *self.conn.prepare_cached(SEEN)?,
            req.namespace,
            req.turn,
            req.key,
            self.now,
        )
    }

    /// A live claim's answer: [`Begin::InFlight`] while its holder may run; `None` once a
    /// holder that is certainly gone (its process exited, on this host) has had its claim
    /// freed, as if its lease had run out, so that the key can be claimed again.
    fn held(&mut self, req: &BeginRequest<'_>, held: &Held) -> rusqlite::Result<Option<Begin>> {
        if !held.is_abandoned() {
            return Ok(Some(held.in_flight()));
        }
        self.writing()?;
        // Only the claim that was read, which may have changed hands since.
        self.conn.prepare_cached(FREE_ABANDONED)?.execute(params![
            req.namespace,
            req.key.as_bytes().as_slice(),
            held.token,
            held.holder,
        ])?;
        tracing::info!(target: "idem", key = %req.key.short(), tool = req.tool,
            holder = held.holder.as_deref().unwrap_or_default(),
            "freed a claim whose process is gone");
        Ok(None)
    }

    /// The whole of `begin`: a live record answers (read without the write lock), else the
    /// claim.
    pub(super) fn begin(&mut self, req: &BeginRequest<'_>) -> rusqlite::Result<Result<Begin>> {
        match self.seen(req)? {
            Ok(Seen::Live(answer)) => Ok(Ok(answer)),
            Ok(Seen::Held(held)) => match self.held(req, &held)? {
                Some(answer) => Ok(Ok(answer)),
                None => self.claim(req),
            },
            Ok(Seen::Free { attempts }) => match refused_by_key(attempts, &req.charge) {
                Some(refused) => Ok(Ok(refused)),
                None => self.claim(req),
            },
            Err(corrupt) => Ok(Err(corrupt)),
        }
    }

    /// Claims the request's key, which was found without a live record (perhaps on another
    /// thread, so the claim checks again).
    pub(super) fn claim(&mut self, req: &BeginRequest<'_>) -> rusqlite::Result<Result<Begin>> {
        if req.charge.max_calls.is_some() || req.charge.max_tool_actions.is_some() {
            return self.transaction(|worker| worker.claim_counted(req));
        }
        for _ in 0..CLAIM_TRIES {
            self.writing()?;
            if self.upsert(req)? == 1 {
                return Ok(Ok(Begin::Claimed));
            }
            // Not taken: the record is live, or the count is spent.
            match self.seen(req)? {
                Ok(Seen::Live(answer)) => return Ok(Ok(answer)),
                Ok(Seen::Held(held)) => {
                    if let Some(answer) = self.held(req, &held)? {
                        return Ok(Ok(answer));
                    }
                    // Freed: claim it.
                }
                Ok(Seen::Free { attempts }) => {
                    if let Some(refused) = refused_by_key(attempts, &req.charge) {
                        return Ok(Ok(refused));
                    }
                    // Free again: another process gave it back meanwhile.
                }
                Err(corrupt) => return Ok(Err(corrupt)),
            }
        }
        Ok(Err(Error::store(
            "begin",
            "the key changed hands between every claim and read; try again",
        )))
    }

    /// A claim charged to the counts of started actions, in a transaction: the key's count is
    /// read first, and a retry (a claim by this turn since its last result) is charged to it
    /// alone; a new action reads the turn's and the tool's counts, and is counted in each that
    /// has a cap. A refusal writes nothing.
    fn claim_counted(&mut self, req: &BeginRequest<'_>) -> rusqlite::Result<Result<Begin>> {
        let mut seen = self.seen(req)?;
        if let Ok(Seen::Held(held)) = &seen {
            if let Some(answer) = self.held(req, held)? {
                return Ok(Ok(answer));
            }
            // Freed, under the write lock: read the count it left.
            seen = self.seen(req)?;
        }
        let attempts = match seen {
            Ok(Seen::Live(answer)) => return Ok(Ok(answer)),
            Ok(Seen::Held(held)) => return Ok(Ok(held.in_flight())),
            Ok(Seen::Free { attempts }) => attempts,
            Err(corrupt) => return Ok(Err(corrupt)),
        };
        let charge = &req.charge;
        let new = budget::is_new_action(attempts);
        let turn = (new && charge.max_calls.is_some()).then(|| charge.turn.turn_counter());
        let tool =
            (new && charge.max_tool_actions.is_some()).then(|| charge.turn.tool_counter(req.tool));
        let counts = budget::Counts {
            attempts,
            calls: match &turn {
                Some(id) => self.count(id)?,
                None => 0,
            },
            tool_actions: match &tool {
                Some(id) => self.count(id)?,
                None => 0,
            },
        };
        if let Err(refused) = budget::charge(counts, charge) {
            return Ok(Ok(Begin::Refused(refused)));
        }
        let window_end = sql_ms(self.now.saturating_add(duration_ms(charge.window)));
        for (id, n) in [(turn, counts.calls), (tool, counts.tool_actions)] {
            if let Some(id) = id {
                self.conn.prepare_cached(SET_TURN_COUNT)?.execute(params![
                    id.as_slice(),
                    n + 1,
                    window_end
                ])?;
            }
        }
        if self.upsert(req)? != 1 {
            // Under the write lock nothing can change between the read and the claim.
            return Ok(Err(Error::store("begin", "the claim did not take")));
        }
        Ok(Ok(Begin::Claimed))
    }

    /// The claim statement; returns the rows it changed (1: claimed).
    fn upsert(&mut self, req: &BeginRequest<'_>) -> rusqlite::Result<usize> {
        let now = self.now;
        self.conn.prepare_cached(CLAIM)?.execute(params![
            req.key.as_bytes().as_slice(),
            req.namespace,
            req.tool,
            req.fingerprint.as_bytes().as_slice(),
            sql_ms(now),
            sql_ms(now.saturating_add(duration_ms(req.lease))),
            sql_token(req.token),
            sql_ms(now.saturating_add(duration_ms(req.charge.window))),
            req.charge.max_attempts,
            req.turn,
            Holder::this_process_text(),
        ])
    }

    /// The live count of started actions named `id` (0 if absent or expired).
    fn count(&mut self, id: &CounterId) -> rusqlite::Result<u32> {
        let n: Option<i64> = self
            .conn
            .prepare_cached(TURN_COUNT)?
            .query_row(params![id.as_slice(), sql_ms(self.now)], |row| row.get(0))
            .optional()?;
        // A count out of range (written by hand) is read as the nearest valid one.
        Ok(n.map_or(0, |n| u32::try_from(n.max(0)).unwrap_or(u32::MAX)))
    }
}
