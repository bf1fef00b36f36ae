//! [`Store`] for [`RedisStore`]: each operation one script call (see `begin` for the one
//! exception, on a Redis Cluster).

use std::collections::HashSet;
use std::time::Duration;

use ::redis::Value;

use super::call::{self, Token};
use super::conn::Node;
use super::layout::{self, TurnKey, parse_record_key, record_pattern};
use super::reply::{Reply, corrupt, fingerprint as fingerprint_of, unexpected, wrong_type};
use super::{RedisStore, SCAN_COUNT, SCRIPTS, script_ms};
use crate::key::Key;
use crate::store::budget::CounterId;
use crate::store::{
    Begin, BeginRequest, Charge, Exhausted, FirstResult, Lease, Record, Store, StoreFuture,
};
use crate::{Error, Result};

/// How `begin` reaches a turn's count of started actions.
enum TurnCount<'a> {
    /// The turn has no cap.
    Uncapped,
    /// The count's key shares the record's server or slot: the claim script charges it.
    InScript(TurnKey<'a>),
    /// The count is in another Cluster slot: charged by its own script between a check and the
    /// claim.
    Apart(TurnKey<'a>),
}

impl RedisStore {
    /// Where the turn count of `req` is, as seen from its record's key. Only a Cluster with a
    /// capped turn spells the keys out, to compare their slots.
    fn turn_count<'a>(&'a self, req: &'a BeginRequest<'_>, id: &'a CounterId) -> TurnCount<'a> {
        if req.charge.max_calls.is_none() {
            return TurnCount::Uncapped;
        }
        let turn_key = TurnKey {
            prefix: &self.prefix,
            namespace: req.namespace,
            id,
        };
        let apart = self.is_cluster()
            && layout::slot(&turn_key.text())
                != layout::slot(&self.record_key(req.namespace, req.key).text());
        if apart {
            TurnCount::Apart(turn_key)
        } else {
            TurnCount::InScript(turn_key)
        }
    }

    /// Runs `begin.lua` in `mode`, with the turn count's key if the script charges it.
    async fn begin_script(
        &self,
        req: &BeginRequest<'_>,
        turn_key: Option<TurnKey<'_>>,
        mode: &str,
    ) -> Result<Reply> {
        let record_key = self.record_key(req.namespace, req.key);
        let keys = 1 + usize::from(turn_key.is_some());
        let bytes = 2 * record_key.len() + req.tool.len() + 32 + 80;
        let mut cmd = call::evalsha(&SCRIPTS.begin, keys, keys + 8, bytes);
        cmd.arg(record_key);
        if let Some(turn_key) = turn_key {
            cmd.arg(turn_key);
        }
        cmd.arg(Token(req.token.0))
            .arg(req.fingerprint.as_bytes().as_slice())
            .arg(req.tool)
            .arg(script_ms(req.lease))
            .arg(req.charge.max_attempts)
            .arg(mode)
            .arg(req.charge.max_calls.unwrap_or(u32::MAX))
            .arg(script_ms(req.charge.window));
        let reply = match self.eval_raw(&SCRIPTS.begin, &cmd).await {
            Ok(reply) => reply,
            Err(error) if call::wrong_type(&error) => {
                return Err(wrong_type(req.key, &self.kind_of(record_key).await));
            }
            Err(error) => return Err(Error::store("begin", error)),
        };
        Reply::begun(reply)
    }

    /// Counts one more action against the turn at `turn_key` (its own Cluster slot) unless its
    /// cap is reached: `Ok(None)` if counted, else the calls it had.
    async fn charge_turn(&self, turn_key: TurnKey<'_>, charge: &Charge) -> Result<Option<u32>> {
        let mut cmd = call::evalsha(&SCRIPTS.turn, 1, 4, 120);
        cmd.arg(turn_key)
            .arg("charge")
            .arg(charge.max_calls.unwrap_or(u32::MAX))
            .arg(script_ms(charge.window));
        match self.eval("begin", &SCRIPTS.turn, &cmd).await? {
            Value::Array(reply) => match reply.as_slice() {
                [Value::Int(1), Value::Int(_)] => Ok(None),
                [Value::Int(0), Value::Int(calls)] => {
                    Ok(Some(u32::try_from((*calls).max(0)).unwrap_or(u32::MAX)))
                }
                _ => Err(Error::store("begin", "unexpected reply from Redis")),
            },
            other => Err(unexpected("begin", &other)),
        }
    }

    /// Gives back an action counted by [`charge_turn`](Self::charge_turn) that was not claimed.
    async fn refund_turn(&self, turn_key: TurnKey<'_>, key: &Key) {
        let mut cmd = call::evalsha(&SCRIPTS.turn, 1, 4, 120);
        cmd.arg(turn_key).arg("refund").arg(0).arg(0);
        if let Err(error) = self.eval("begin", &SCRIPTS.turn, &cmd).await {
            tracing::warn!(target: "idem", key = %key.short(), %error,
                "could not give back a turn count whose claim did not happen; the turn counts \
                 one action too many until its window ends");
        }
    }

    /// The answer of `begin` for a reply of `begin.lua`.
    fn begun(req: &BeginRequest<'_>, reply: Reply) -> Result<Begin> {
        match reply {
            Reply::Claimed => Ok(Begin::Claimed),
            Reply::Done {
                fingerprint,
                result,
            } => Ok(Begin::Completed(FirstResult {
                fingerprint: fingerprint_of(req.key, &fingerprint)?,
                result,
            })),
            Reply::Running(fingerprint) => Ok(Begin::InFlight {
                fingerprint: fingerprint_of(req.key, &fingerprint)?,
            }),
            Reply::Corrupt(what) => Err(corrupt(req.key, what)),
            Reply::RefusedKey(attempts) => Ok(Begin::Refused(Exhausted::Key {
                attempts,
                limit: req.charge.max_attempts,
            })),
            Reply::RefusedTurn(calls) => Ok(Begin::Refused(Exhausted::Turn {
                calls,
                limit: req.charge.max_calls.unwrap_or(u32::MAX),
            })),
            Reply::Free | Reply::None | Reply::Record(_) => {
                Err(Error::store("begin", "unexpected reply from Redis"))
            }
        }
    }

    /// `SCAN`s one master for records matching `pattern`, appending up to `limit` to `out`.
    async fn scan_node(
        &self,
        node: &Node,
        pattern: &str,
        namespace: Option<&str>,
        limit: usize,
        out: &mut Vec<Record>,
    ) -> Result<()> {
        const OP: &str = "list";
        let mut conn = self.conn.clone();
        let mut seen = HashSet::new();
        let mut cursor: u64 = 0;
        loop {
            let mut scan = ::redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let reply = conn
                .on_node(node, &scan)
                .await
                .map_err(|e| Error::store(OP, e))?;
            let (next, batch): (u64, Vec<Vec<u8>>) =
                ::redis::FromRedisValue::from_redis_value(reply)
                    .map_err(|e| Error::store(OP, e))?;
            for raw in batch {
                let Some((ns, key)) = parse_record_key(&self.prefix, &raw) else {
                    continue;
                };
                if namespace.is_some_and(|wanted| wanted != ns) || !seen.insert(raw.clone()) {
                    continue;
                }
                let redis_key = String::from_utf8_lossy(&raw).into_owned();
                match self.read(OP, &raw, &ns, &key).await {
                    Ok(Some(record)) => out.push(record),
                    Ok(None) => {} // expired or removed since the scan saw it
                    Err(error @ Error::CorruptRecord { .. }) => {
                        tracing::warn!(target: "idem", redis_key = %redis_key, %error,
                            "skipping a corrupt record");
                    }
                    Err(error) => return Err(error),
                }
                if out.len() >= limit {
                    return Ok(());
                }
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}

impl Store for RedisStore {
    /// One script call, which writes nothing for a live record (a replay or a wait). On a
    /// Redis Cluster whose turn count (of a turn with a cap) lies in another slot than the
    /// record, a claim takes three: a check, the turn's charge, the claim (and a refund if the
    /// claim lost a race meanwhile).
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        StoreFuture::new(async move {
            let id = req.charge.turn.turn_counter();
            let turn_key = match self.turn_count(&req, &id) {
                TurnCount::Uncapped => None,
                TurnCount::InScript(turn_key) => Some(turn_key),
                TurnCount::Apart(turn_key) => {
                    match self.begin_script(&req, None, "check").await? {
                        Reply::Free => {}
                        answer => return Self::begun(&req, answer),
                    }
                    if let Some(calls) = self.charge_turn(turn_key, &req.charge).await? {
                        return Ok(Begin::Refused(Exhausted::Turn {
                            calls,
                            limit: req.charge.max_calls.unwrap_or(u32::MAX),
                        }));
                    }
                    let reply = self.begin_script(&req, None, "claim").await;
                    let answer = reply.and_then(|reply| Self::begun(&req, reply));
                    if !matches!(answer, Ok(Begin::Claimed)) {
                        self.refund_turn(turn_key, req.key).await;
                    }
                    return answer;
                }
            };
            let reply = self.begin_script(&req, turn_key, "charge").await?;
            Self::begun(&req, reply)
        })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
            let ms = script_ms(duration);
            self.fenced(
                "renew",
                &SCRIPTS.renew,
                lease,
                |cmd| {
                    cmd.arg(ms);
                },
                20,
            )
            .await
        })
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
            let ms = script_ms(ttl);
            let args = |cmd: &mut ::redis::Cmd| {
                cmd.arg(ms).arg(result);
            };
            self.fenced(
                "complete",
                &SCRIPTS.complete,
                lease,
                args,
                20 + result.len(),
            )
            .await
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
            self.fenced("release", &SCRIPTS.release, lease, |_| {}, 0)
                .await
        })
    }

    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        StoreFuture::new(async move {
            self.read("get", self.record_key(namespace, key), namespace, key)
                .await
        })
    }

    /// Redis expires records itself (`PEXPIREAT`), and the scripts treat a record whose expiry
    /// has come as absent, so there is nothing to purge: returns 0 without contacting Redis.
    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        StoreFuture::ready(Ok(0))
    }

    /// `SCAN`s `<prefix>:<namespace>:{…}` (or `<prefix>:*}`) on every master and reads each
    /// record with one script call: an admin operation, not for hot paths. Records that fail
    /// to decode are skipped with a warning, so that one corrupt key does not hide the others.
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        StoreFuture::new(async move {
            let mut out = Vec::new();
            if limit == 0 {
                return Ok(out);
            }
            let pattern = record_pattern(&self.prefix, namespace);
            let mut conn = self.conn.clone();
            let masters = conn.masters().await.map_err(|e| Error::store("list", e))?;
            for node in masters {
                self.scan_node(&node, &pattern, namespace, limit, &mut out)
                    .await?;
                if out.len() >= limit {
                    break;
                }
            }
            Ok(out)
        })
    }

    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        StoreFuture::new(async move {
            let record_key = self.record_key(namespace, key);
            let mut cmd = call::evalsha(&SCRIPTS.remove, 1, 1, record_key.len());
            cmd.arg(record_key);
            match self.eval("remove", &SCRIPTS.remove, &cmd).await? {
                Value::Int(n) => Ok(n == 1),
                other => Err(unexpected("remove", &other)),
            }
        })
    }
}
