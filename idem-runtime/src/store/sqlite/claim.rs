//! `begin` on the store's thread: a claim is one conditional upsert that applies the per-key
//! budget rule itself; a claim charged to the counts of started actions (a turn with a cap, the
//! per-tool cap) is a transaction: the claim, then one conditional upsert per count that adds a
//! new action under its cap, all undone if a count is at its cap. And the whole of `begin`, for
//! when it could not read on the caller's thread.

use std::time::Duration;

use rusqlite::{OptionalExtension, params};

use super::row::{self, Held, Seen};
use super::statements::{ATTEMPTS, CLAIM, COUNT_ACTION, FREE_ABANDONED, TURN_COUNT};
use super::worker::{Done, Worker};
use super::{sql_ms, sql_token};
use crate::clock::duration_ms;
use crate::key::{Fingerprint, Key};
use crate::store::budget::{self, CounterId};
use crate::store::holder::Holder;
use crate::store::{Begin, BeginRequest, Charge, Exhausted, LeaseToken};
use crate::{Error, Result};

/// How often a claim is tried again when the key changed hands between the claim and the read
/// that explains why it did not take (another process, between two autocommit statements).
const CLAIM_TRIES: usize = 4;

/// What the claim statement, and the read after it, found.
enum Taken {
    Claimed,
    /// Not claimed: `begin`'s answer (a live record, a claim in flight, a spent count).
    Answered(Begin),
}

impl Taken {
    fn answer(self) -> Begin {
        match self {
            Taken::Claimed => Begin::Claimed,
            Taken::Answered(answer) => answer,
        }
    }
}

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
        row::seen(self.conn, req.namespace, req.turn, req.key, self.now)
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
    /// thread, so the claim checks again). A claim charged to the counts of started actions
    /// (a turn with a cap, the per-tool cap) is a transaction: the claim, then, for a new
    /// action, each count — undone whole if a count is at its cap.
    pub(super) fn claim(&mut self, req: &BeginRequest<'_>) -> rusqlite::Result<Result<Begin>> {
        let charge = &req.charge;
        if charge.max_calls.is_none() && charge.max_tool_actions.is_none() {
            return Ok(self.take(req)?.map(Taken::answer));
        }
        self.transaction(|worker| {
            match worker.take(req)? {
                Ok(Taken::Claimed) => {}
                answered => return Ok(Done::Keep(answered.map(Taken::answer))),
            }
            match worker.count_new_action(req)? {
                None => Ok(Done::Keep(Ok(Begin::Claimed))),
                Some(refused) => Ok(Done::Undo(Ok(Begin::Refused(refused)))),
            }
        })
    }

    /// The claim statement, and when it does not take, the key's row read to say why: a live
    /// record, a spent per-key count, or a claim (freed and claimed again if its process is
    /// gone).
    fn take(&mut self, req: &BeginRequest<'_>) -> rusqlite::Result<Result<Taken>> {
        for _ in 0..CLAIM_TRIES {
            self.writing()?;
            if self.upsert(req)? == 1 {
                return Ok(Ok(Taken::Claimed));
            }
            // Not taken: the record is live, or the count is spent.
            match self.seen(req)? {
                Ok(Seen::Live(answer)) => return Ok(Ok(Taken::Answered(answer))),
                Ok(Seen::Held(held)) => {
                    if let Some(answer) = self.held(req, &held)? {
                        return Ok(Ok(Taken::Answered(answer)));
                    }
                    // Freed: claim it.
                }
                Ok(Seen::Free { attempts }) => {
                    if let Some(refused) = refused_by_key(attempts, &req.charge) {
                        return Ok(Ok(Taken::Answered(refused)));
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

    /// Counts the action just claimed, if new, in the turn's count (if the turn has a cap),
    /// then the tool's (if the per-tool cap is set); the cap that refuses it, if one does. A
    /// retry is counted in neither.
    fn count_new_action(&mut self, req: &BeginRequest<'_>) -> rusqlite::Result<Option<Exhausted>> {
        let charge = &req.charge;
        let window_end = sql_ms(self.now.saturating_add(duration_ms(charge.window)));
        // The names of the capped counts only (a tool's is a hash).
        let counts = [
            charge
                .max_calls
                .map(|limit| (limit, charge.turn.turn_counter(), true)),
            charge
                .max_tool_actions
                .map(|limit| (limit, charge.turn.tool_counter(req.tool), false)),
        ];
        let key = req.key.as_bytes().as_slice();
        for (limit, id, turn) in counts.into_iter().flatten() {
            let counted = self.conn.prepare_cached(COUNT_ACTION)?.execute(params![
                id.as_slice(),
                sql_ms(self.now),
                window_end,
                limit,
                key
            ])?;
            if counted == 1 {
                continue;
            }
            let attempts: i64 = self
                .conn
                .prepare_cached(ATTEMPTS)?
                .query_row([key], |row| row.get(0))?;
            if attempts > 1 {
                return Ok(None); // a retry: counted in neither
            }
            let calls = self.count(&id)?;
            return Ok(Some(if turn {
                Exhausted::Turn { calls, limit }
            } else {
                Exhausted::Tool { calls, limit }
            }));
        }
        Ok(None)
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
