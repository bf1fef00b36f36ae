//! `begin` on Redis: one script call on a single server (or when the turn's hash shares the
//! record's Cluster slot); on a Cluster otherwise, a check, the turn's charge and the claim.

use super::call::{self, Token};
use super::layout::{self, TurnKey};
use super::reply::{Reply, corrupt, fingerprint as fingerprint_of, wrong_type};
use super::{MAX_DURATION_MS, RedisStore, SCRIPTS, script_ms};
use crate::store::budget::CounterId;
use crate::store::holder::Holder;
use crate::store::{Begin, BeginRequest, Exhausted, FirstResult};
use crate::{Error, Fingerprint, Result};

/// How `begin` reaches its turn's hash (counts of started actions, index of records).
pub(super) enum TurnHash<'a> {
    /// The hash shares the record's server or slot: the claim script charges it.
    InScript(TurnKey<'a>),
    /// The hash is in another Cluster slot: charged by its own script between a check and the
    /// claim.
    Apart(TurnKey<'a>),
}

/// What one pass of `begin` found.
pub(super) enum Begun {
    /// `begin`'s answer.
    Answer(Begin),
    /// A live claim whose process is certainly gone: to be freed, then claimed.
    Abandoned {
        /// The claim's token, as stored.
        token: Vec<u8>,
        /// Its holder, as stored.
        holder: Vec<u8>,
        /// Its fingerprint: the answer, `InFlight`, while the claim is left to end.
        fingerprint: Fingerprint,
    },
}

/// What the charge of a new action to its turn's hash (a Cluster's apart path) did.
enum TurnCharge {
    /// Counted: the key may be claimed.
    Counted,
    /// Refused by a cap; `just_charged`: the key was charged less than a lease ago, by this
    /// turn before or by a duplicate of this call that is claiming it.
    Refused {
        exhausted: Exhausted,
        just_charged: bool,
    },
}

/// How long a new action refused by a cap waits, when its key was charged moments ago, before
/// it looks for a duplicate's claim once more.
const TWIN_CLAIM_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// A script argument for an optional cap: its number, or `''` for none (written in place).
struct Cap(Option<u32>);

impl ::redis::ToRedisArgs for Cap {
    fn write_redis_args<W: ?Sized + ::redis::RedisWrite>(&self, out: &mut W) {
        match self.0 {
            Some(n) => n.write_redis_args(out),
            None => out.write_arg(b""),
        }
    }
}

fn cap(limit: Option<u32>) -> Cap {
    Cap(limit)
}

/// The numbers `begin.lua` claims by, as its one argument `ARGV[4]`: six decimals separated by
/// a space each (a cap is empty for none). One argument rather than six: each argument of a
/// command costs the client its own framing, and a replay sends them all.
struct ClaimTerms {
    lease_ms: u64,
    max_attempts: u32,
    turn_cap: Option<u32>,
    window_ms: u64,
    tool_cap: Option<u32>,
    keep_ms: u64,
}

impl ClaimTerms {
    fn of(req: &BeginRequest<'_>) -> ClaimTerms {
        ClaimTerms {
            lease_ms: script_ms(req.lease),
            max_attempts: req.charge.max_attempts,
            turn_cap: req.charge.max_calls,
            window_ms: script_ms(req.charge.window),
            tool_cap: req.charge.max_tool_actions,
            keep_ms: kept(req),
        }
    }
}

impl ::redis::ToRedisArgs for ClaimTerms {
    fn write_redis_args<W: ?Sized + ::redis::RedisWrite>(&self, out: &mut W) {
        use bytes::BufMut;
        // Six numbers of at most 20 digits and five spaces.
        let mut arg = out.bufmut_for_next_arg(6 * 20 + 5);
        let mut digits = itoa::Buffer::new();
        let numbers = [
            Some(self.lease_ms),
            Some(u64::from(self.max_attempts)),
            self.turn_cap.map(u64::from),
            Some(self.window_ms),
            self.tool_cap.map(u64::from),
            Some(self.keep_ms),
        ];
        for (i, number) in numbers.into_iter().enumerate() {
            if i > 0 {
                arg.put_u8(b' ');
            }
            if let Some(n) = number {
                arg.put_slice(digits.format(n).as_bytes());
            }
        }
    }
}

/// How long a new action keeps its turn's hash (its counts and its index of records) at least,
/// in ms: the budget window, the lease and the TTL, so that the index outlives every record it
/// names unless a tool ran, or was retried, for longer than the window.
fn kept(req: &BeginRequest<'_>) -> u64 {
    (script_ms(req.charge.window) + script_ms(req.lease) + script_ms(req.ttl)).min(MAX_DURATION_MS)
}

impl RedisStore {
    /// Where the turn's hash of `req` is, as seen from its record's key. Only a Cluster spells
    /// the keys out, to compare their slots.
    pub(super) fn turn_hash<'a>(
        &'a self,
        req: &'a BeginRequest<'_>,
        id: &'a CounterId,
    ) -> TurnHash<'a> {
        let turn_key = TurnKey {
            prefix: &self.prefix,
            namespace: req.namespace,
            id,
        };
        let apart = self.is_cluster()
            && layout::slot(&turn_key.text())
                != layout::slot(&self.record_key(req.namespace, req.key).text());
        if apart {
            TurnHash::Apart(turn_key)
        } else {
            TurnHash::InScript(turn_key)
        }
    }

    /// Runs `begin.lua` in `mode`, with the turn hash's key if the script charges it.
    pub(super) async fn begin_script(
        &self,
        req: &BeginRequest<'_>,
        turn_key: Option<TurnKey<'_>>,
        mode: &str,
    ) -> Result<Reply> {
        let record_key = self.record_key(req.namespace, req.key);
        let keys = 1 + usize::from(turn_key.is_some());
        let holder = Holder::this_process_text().unwrap_or_default();
        let bytes =
            2 * record_key.len() + req.tool.len() + req.turn.len() + holder.len() + 2 * 32 + 150;
        let mut cmd = call::evalsha(&SCRIPTS.begin, keys, keys + 8, bytes);
        cmd.arg(record_key);
        if let Some(turn_key) = turn_key {
            cmd.arg(turn_key);
        }
        cmd.arg(Token(req.token.0))
            .arg(req.fingerprint.as_bytes().as_slice())
            .arg(req.tool)
            .arg(ClaimTerms::of(req))
            .arg(mode)
            .arg(req.turn)
            .arg(req.key.as_bytes().as_slice())
            .arg(holder);
        let reply = match self.eval_raw(&SCRIPTS.begin, &cmd).await {
            Ok(reply) => reply,
            Err(error) if call::wrong_type(&error) => {
                return Err(wrong_type(req.key, &self.kind_of(record_key).await));
            }
            Err(error) => return Err(Error::store("begin", error)),
        };
        Reply::begun(reply)
    }

    /// Charges a new action of `req` to the turn's hash at `turn_key` (its own Cluster slot),
    /// and indexes its key, unless a cap is reached: `Ok(None)` if counted, else the refusal.
    async fn charge_turn(
        &self,
        turn_key: TurnKey<'_>,
        req: &BeginRequest<'_>,
    ) -> Result<TurnCharge> {
        let mut cmd = call::evalsha(&SCRIPTS.turn, 1, 9, 240 + req.tool.len());
        cmd.arg(turn_key)
            .arg("charge")
            .arg(req.tool)
            .arg(req.key.as_bytes().as_slice())
            .arg(cap(req.charge.max_calls))
            .arg(cap(req.charge.max_tool_actions))
            .arg(script_ms(req.charge.window))
            .arg(kept(req))
            .arg(script_ms(req.lease))
            .arg(Token(req.token.0));
        let (just_charged, value) = match self.eval("begin", &SCRIPTS.turn, &cmd).await? {
            ::redis::Value::BulkString(ok) if ok == b"ok" => return Ok(TurnCharge::Counted),
            ::redis::Value::BulkString(mut reply) if reply.first() == Some(&b'd') => {
                reply.remove(0);
                (true, ::redis::Value::BulkString(reply))
            }
            value => (false, value),
        };
        let exhausted = match Reply::begun(value)? {
            Reply::RefusedTurn(calls) => Exhausted::Turn {
                calls,
                limit: req.charge.max_calls.unwrap_or(u32::MAX),
            },
            Reply::RefusedTool(calls) => Exhausted::Tool {
                calls,
                limit: req.charge.max_tool_actions.unwrap_or(u32::MAX),
            },
            _ => return Err(Error::store("begin", "unexpected reply from Redis")),
        };
        Ok(TurnCharge::Refused {
            exhausted,
            just_charged,
        })
    }

    /// Gives back a new action counted by [`charge_turn`](Self::charge_turn) that was not
    /// claimed as one.
    async fn refund_turn(&self, turn_key: TurnKey<'_>, req: &BeginRequest<'_>) {
        let mut cmd = call::evalsha(&SCRIPTS.turn, 1, 9, 240 + req.tool.len());
        cmd.arg(turn_key)
            .arg("refund")
            .arg(req.tool)
            .arg(req.key.as_bytes().as_slice())
            .arg(cap(req.charge.max_calls))
            .arg(cap(req.charge.max_tool_actions))
            .arg(0)
            .arg(0)
            .arg(0)
            .arg(Token(req.token.0));
        if let Err(error) = self.eval("begin", &SCRIPTS.turn, &cmd).await {
            tracing::warn!(target: "idem", key = %req.key.short(), %error,
                "could not give back a turn's count whose claim did not happen; the turn \
                 counts one action too many until its window ends");
        }
    }

    /// `begin` on a Cluster whose turn hash lies in another slot than the record: a check of
    /// the record (a replay or a wait is answered there); a retry claims at once; a new action
    /// is charged to the turn's hash, then claimed (and given back if the claim did not happen
    /// as a new action).
    pub(super) async fn begin_apart(
        &self,
        req: &BeginRequest<'_>,
        turn_key: TurnKey<'_>,
    ) -> Result<Begun> {
        let attempts = match self.begin_script(req, None, "check").await? {
            Reply::Free(attempts) => attempts,
            answer => return Self::begun(req, answer),
        };
        if attempts > 0 {
            match self.begin_script(req, None, "retry").await? {
                Reply::Free(_) => {} // a new action after all: its record was completed
                answer => return Self::begun(req, answer),
            }
        }
        if let TurnCharge::Refused {
            exhausted,
            just_charged,
        } = self.charge_turn(turn_key, req).await?
        {
            // A duplicate of this call may have charged the key since the check (the count it
            // took is what refuses this one): its claim answers, as it would have at the check.
            // The cap refuses only a key that no duplicate is claiming; one charged moments ago
            // is looked at once more, after the round trip a duplicate's claim takes.
            let mut answer = self.begin_script(req, None, "check").await?;
            if just_charged && matches!(answer, Reply::Free(_)) {
                tokio::time::sleep(TWIN_CLAIM_WAIT).await;
                answer = self.begin_script(req, None, "check").await?;
            }
            return match answer {
                Reply::Free(_) => Ok(Begun::Answer(Begin::Refused(exhausted))),
                answer => Self::begun(req, answer),
            };
        }
        let reply = self.begin_script(req, None, "claim").await;
        let answer = match reply {
            Ok(Reply::ClaimedRetry) => {
                self.refund_turn(turn_key, req).await;
                return Ok(Begun::Answer(Begin::Claimed));
            }
            reply => reply.and_then(|reply| Self::begun(req, reply)),
        };
        if !matches!(answer, Ok(Begun::Answer(Begin::Claimed))) {
            self.refund_turn(turn_key, req).await;
        }
        answer
    }

    /// The answer of `begin` for a reply of `begin.lua`.
    pub(super) fn begun(req: &BeginRequest<'_>, reply: Reply) -> Result<Begun> {
        let answer = match reply {
            Reply::Claimed | Reply::ClaimedRetry => Begin::Claimed,
            Reply::Done {
                fingerprint,
                result,
            } => Begin::Completed(FirstResult {
                fingerprint: fingerprint_of(req.key, &fingerprint)?,
                result,
            }),
            Reply::Running {
                fingerprint,
                token,
                holder,
            } => {
                let fingerprint = fingerprint_of(req.key, &fingerprint)?;
                let gone =
                    std::str::from_utf8(&holder).is_ok_and(|text| Holder::text_is_gone(Some(text)));
                if gone {
                    return Ok(Begun::Abandoned {
                        token,
                        holder,
                        fingerprint,
                    });
                }
                Begin::InFlight { fingerprint }
            }
            Reply::Corrupt(what) => return Err(corrupt(req.key, what)),
            Reply::RefusedKey(attempts) => Begin::Refused(Exhausted::Key {
                attempts,
                limit: req.charge.max_attempts,
            }),
            Reply::RefusedTurn(calls) => Begin::Refused(Exhausted::Turn {
                calls,
                limit: req.charge.max_calls.unwrap_or(u32::MAX),
            }),
            Reply::RefusedTool(calls) => Begin::Refused(Exhausted::Tool {
                calls,
                limit: req.charge.max_tool_actions.unwrap_or(u32::MAX),
            }),
            Reply::Free(_) | Reply::None | Reply::Record(_) => {
                return Err(Error::store("begin", "unexpected reply from Redis"));
            }
        };
        Ok(Begun::Answer(answer))
    }

    /// Frees a claim whose process is gone (if it still holds the key: its token and holder),
    /// keeping the key's attempt count, as `release` does.
    pub(super) async fn free_abandoned(
        &self,
        req: &BeginRequest<'_>,
        token: &[u8],
        holder: &[u8],
    ) -> Result<()> {
        let key = self.record_key(req.namespace, req.key);
        let grace = script_ms(self.holder_grace).to_string();
        let mut cmd = call::evalsha(
            &SCRIPTS.release,
            1,
            3,
            key.len() + token.len() + holder.len() + grace.len(),
        );
        cmd.arg(key).arg(token).arg(holder).arg(grace);
        // 0: it changed hands meanwhile, or already ends within the grace; the claim that
        // follows sees what holds it now.
        let shortened = self.eval("begin", &SCRIPTS.release, &cmd).await?;
        if matches!(shortened, ::redis::Value::Int(1)) {
            tracing::info!(target: "idem", key = %req.key.short(), tool = req.tool,
                holder = %String::from_utf8_lossy(holder),
                "a claim whose process is gone ends within a reply timeout");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::ClaimTerms;

    fn written(terms: &ClaimTerms) -> Vec<Vec<u8>> {
        let mut cmd = ::redis::Cmd::new();
        cmd.arg(terms);
        cmd.args_iter()
            .map(|arg| match arg {
                ::redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => b"(not a simple argument)".to_vec(),
            })
            .collect()
    }

    #[test]
    fn claim_terms_are_one_argument_of_six_numbers_with_empty_absent_caps() {
        let terms = ClaimTerms {
            lease_ms: 30_000,
            max_attempts: 3,
            turn_cap: None,
            window_ms: 86_400_000,
            tool_cap: Some(0),
            keep_ms: u64::MAX,
        };
        assert_eq!(
            written(&terms),
            [b"30000 3  86400000 0 18446744073709551615".to_vec()]
        );
        let capped = ClaimTerms {
            turn_cap: Some(u32::MAX),
            tool_cap: None,
            ..terms
        };
        assert_eq!(
            written(&capped),
            [b"30000 3 4294967295 86400000  18446744073709551615".to_vec()]
        );
    }
}
