//! [`Store`] for [`RedisStore`]: each operation one script call (see `begin` for the one
//! exception, on a Redis Cluster).

use std::collections::HashSet;
use std::time::Duration;

use ::redis::Value;

use super::call;
use super::claim::{Begun, TurnHash};
use super::conn::Node;
use super::layout::{TurnKey, parse_record_key, record_pattern};
use super::reply::unexpected;
use super::{RedisStore, SCAN_COUNT, SCRIPTS, script_ms};
use crate::key::Key;
use crate::store::{Begin, BeginRequest, Lease, Record, Removed, Store, StoreFuture};
use crate::{Error, Result};

impl RedisStore {
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

impl RedisStore {
    /// The keys the turn's hash at `turn_key` indexes (its `k` fields), read with `HSCAN`.
    async fn indexed(&self, turn_key: TurnKey<'_>) -> Result<Vec<Key>> {
        const OP: &str = "list_turn";
        let mut conn = self.conn.clone();
        let mut keys = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let mut scan = ::redis::cmd("HSCAN");
            scan.arg(turn_key)
                .arg(cursor)
                .arg("MATCH")
                .arg("k*")
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let reply: std::result::Result<(u64, Vec<Vec<u8>>), _> =
                scan.query_async(&mut conn).await;
            let (next, fields) = match reply {
                Ok(reply) => reply,
                Err(error) if call::wrong_type(&error) => return Ok(keys),
                Err(error) => return Err(Error::store(OP, error)),
            };
            // Field, value, field, value: a field `k` + 32 bytes names a key.
            for field in fields.iter().step_by(2) {
                if let Some(bytes) = field.strip_prefix(b"k")
                    && let Ok(bytes) = <[u8; 32]>::try_from(bytes)
                {
                    keys.push(Key::from_bytes(bytes));
                }
            }
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }
}

impl Store for RedisStore {
    /// One script call, which writes nothing for a live record (a replay or a wait). On a
    /// Redis Cluster whose turn hash lies in another slot than the record, a new action takes
    /// three: a check, the turn's charge, the claim (and a refund if the claim lost a race
    /// meanwhile); a retry two (a check and the claim).
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        StoreFuture::new(async move {
            let id = req.charge.turn.turn_counter();
            let pass = async || match self.turn_hash(&req, &id) {
                TurnHash::InScript(turn_key) => {
                    let reply = self.begin_script(&req, Some(turn_key), "charge").await?;
                    Self::begun(&req, reply)
                }
                TurnHash::Apart(turn_key) => self.begin_apart(&req, turn_key).await,
            };
            // A claim whose process is certainly gone ends a reply timeout from now (or
            // sooner, with its lease), so that a request it sent before it died (its result)
            // lands first; then the key is claimed. Until then it is in flight.
            let (token, holder) = match pass().await? {
                Begun::Answer(answer) => return Ok(answer),
                Begun::Abandoned { token, holder, .. } => (token, holder),
            };
            self.free_abandoned(&req, &token, &holder).await?;
            match pass().await? {
                Begun::Answer(answer) => Ok(answer),
                Begun::Abandoned { fingerprint, .. } => Ok(Begin::InFlight { fingerprint }),
            }
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

    /// `HSCAN`s the turn's index (the `k` fields of its hash) and reads each record it names
    /// with one script call, keeping those the turn still holds: an admin operation.
    fn list_turn<'a>(
        &'a self,
        namespace: &'a str,
        turn: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        StoreFuture::new(async move {
            let id = crate::store::budget::TurnIdentity::new(namespace, turn).turn_counter();
            let turn_key = TurnKey {
                prefix: &self.prefix,
                namespace,
                id: &id,
            };
            let mut out = Vec::new();
            for key in self.indexed(turn_key).await? {
                let redis_key = self.record_key(namespace, &key);
                match self.read("list_turn", redis_key, namespace, &key).await {
                    Ok(Some(record)) if record.turn == turn => out.push(record),
                    Ok(_) => {} // expired, removed, or claimed by another turn since
                    Err(error @ Error::CorruptRecord { .. }) => {
                        tracing::warn!(target: "idem", redis_key = %redis_key.text(), %error,
                            "skipping a corrupt record");
                    }
                    Err(error) => return Err(error),
                }
            }
            Ok(crate::store::in_claim_order(out, limit))
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

    fn remove_shown<'a>(&'a self, shown: &'a Record) -> StoreFuture<'a, Removed> {
        StoreFuture::new(async move {
            let record_key = self.record_key(&shown.namespace, &shown.key);
            let mut cmd = call::evalsha(&SCRIPTS.remove_shown, 1, 3, record_key.len() + 40);
            cmd.arg(record_key)
                .arg(shown.state.as_str())
                .arg(shown.created_at_ms);
            match self.eval("remove", &SCRIPTS.remove_shown, &cmd).await? {
                Value::Int(2) => Ok(Removed::Deleted { live: true }),
                Value::Int(1) => Ok(Removed::Deleted { live: false }),
                Value::Int(0) => Ok(Removed::Changed),
                Value::Int(-1) => Ok(Removed::Gone),
                other => Err(unexpected("remove", &other)),
            }
        })
    }
}
