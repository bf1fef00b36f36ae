//! [`Store`] for [`RedisStore`]: each operation one script call (two or three for a charged
//! `begin` in a turn with `max_calls`).

use std::collections::HashSet;
use std::time::Duration;

use ::redis::Value;

use super::conn::Node;
use super::layout::{self, parse_record_key, record_pattern};
use super::reply::{Reply, decode_record, unexpected, wrong_type};
use super::{RedisStore, SCAN_COUNT, SCRIPTS, script_ms};
use crate::key::Key;
use crate::store::{Begin, BeginRequest, Charge, Exhausted, Lease, Record, Store, StoreFuture};
use crate::{Error, Result};

/// What the turn-wide step decided before the claim script runs.
enum TurnStep {
    /// No turn-wide cap.
    Uncapped,
    /// The call was counted in the turn count at this Redis key.
    Counted(String),
    /// The turn count refused the call: `calls` with this one, over `limit`.
    Refused { calls: u32, limit: u32 },
}

impl RedisStore {
    /// Counts the call against its turn's `max_calls`, in the turn's own slot.
    async fn charge_turn(&self, namespace: &str, charge: &Charge) -> Result<TurnStep> {
        let Some(limit) = charge.max_calls else {
            return Ok(TurnStep::Uncapped);
        };
        let id = charge.turn.turn_counter();
        let turn_key = layout::turn_counter_key(&self.prefix, namespace, &id);
        let mut invocation = SCRIPTS.turn.prepare_invoke();
        invocation
            .key(&turn_key)
            .arg("charge")
            .arg(limit)
            .arg(script_ms(charge.window));
        match self.invoke("begin", invocation).await? {
            Value::Array(reply) => match reply.as_slice() {
                [Value::Int(1), Value::Int(_)] => Ok(TurnStep::Counted(turn_key)),
                [Value::Int(0), Value::Int(calls)] => Ok(TurnStep::Refused {
                    calls: u32::try_from((*calls).max(0)).unwrap_or(u32::MAX),
                    limit,
                }),
                _ => Err(Error::store("begin", "unexpected reply from Redis")),
            },
            other => Err(unexpected("begin", &other)),
        }
    }

    /// Gives back a turn-wide call whose per-key attempt was refused.
    async fn refund_turn(&self, turn_key: &str, key: &Key) {
        let mut invocation = SCRIPTS.turn.prepare_invoke();
        invocation.key(turn_key).arg("refund").arg(0).arg(0);
        if let Err(error) = self.invoke("begin", invocation).await {
            tracing::warn!(target: "idem", key = %key.short(), %error,
                "could not give back a turn-wide call refused by its per-key budget; the turn \
                 counts one call too many until its window ends");
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
                let redis_key = String::from_utf8_lossy(&raw);
                match self.read(OP, &redis_key, &ns, &key).await {
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
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        StoreFuture::new(async move {
            const OP: &str = "begin";
            let record_key = self.redis_key(req.namespace, req.key);
            let turn = match &req.charge {
                Some(charge) => self.charge_turn(req.namespace, charge).await?,
                None => TurnStep::Uncapped,
            };
            let mut invocation = SCRIPTS.begin.prepare_invoke();
            invocation.key(&record_key);
            let mode = match (&req.charge, &turn) {
                (None, _) => "",
                (Some(_), TurnStep::Refused { .. }) => "turn_refused",
                (Some(_), _) => "charge",
            };
            if let Some(charge) = &req.charge {
                let id = charge.key_counter(req.key);
                invocation.key(layout::key_counter_key(&record_key, &id));
            }
            invocation
                .arg(req.token.0.to_string())
                .arg(req.fingerprint.as_bytes().as_slice())
                .arg(req.tool)
                .arg(script_ms(req.lease))
                .arg(mode)
                .arg(req.charge.map_or(0, |c| c.max_attempts))
                .arg(req.charge.map_or(0, |c| script_ms(c.window)));
            let reply = self.invoke(OP, invocation).await?;
            match Reply::parse(OP, reply)? {
                Reply::Tag(tag) if tag == b"claimed" => Ok(Begin::Claimed),
                Reply::Record(fields) => {
                    Begin::found(decode_record(req.namespace, req.key, &fields)?)
                }
                Reply::WrongType(kind) => Err(wrong_type(req.key, &kind)),
                Reply::ExhaustedKey {
                    attempts,
                    completed,
                } => {
                    if let TurnStep::Counted(turn_key) = &turn {
                        self.refund_turn(turn_key, req.key).await;
                    }
                    Ok(Begin::Exhausted(Exhausted::Key {
                        attempts,
                        limit: req.charge.map_or(0, |c| c.max_attempts),
                        completed,
                    }))
                }
                Reply::ExhaustedTurn => match turn {
                    TurnStep::Refused { calls, limit } => {
                        Ok(Begin::Exhausted(Exhausted::Turn { calls, limit }))
                    }
                    _ => Err(Error::store(OP, "unexpected reply from Redis")),
                },
                Reply::Tag(_) => Err(Error::store(OP, "unexpected reply from Redis")),
            }
        })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
            let mut invocation = SCRIPTS.renew.prepare_invoke();
            invocation
                .key(self.redis_key(&lease.namespace, &lease.key))
                .arg(lease.token.0.to_string())
                .arg(script_ms(duration));
            self.fenced("renew", invocation, &lease.key).await
        })
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
            let mut invocation = SCRIPTS.complete.prepare_invoke();
            invocation
                .key(self.redis_key(&lease.namespace, &lease.key))
                .arg(lease.token.0.to_string())
                .arg(script_ms(ttl))
                .arg(result);
            self.fenced("complete", invocation, &lease.key).await
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
            let mut invocation = SCRIPTS.release.prepare_invoke();
            invocation
                .key(self.redis_key(&lease.namespace, &lease.key))
                .arg(lease.token.0.to_string());
            self.fenced("release", invocation, &lease.key).await
        })
    }

    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        StoreFuture::new(async move {
            self.read("get", &self.redis_key(namespace, key), namespace, key)
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
            let mut conn = self.conn.clone();
            let removed: u64 = ::redis::cmd("DEL")
                .arg(self.redis_key(namespace, key))
                .query_async(&mut conn)
                .await
                .map_err(|e| Error::store("remove", e))?;
            Ok(removed > 0)
        })
    }
}
