//! One script call, built straight into the command buffer: the Redis keys are written piece
//! by piece (prefix, namespace, the key's hex; see [`RecordKey`]) and numbers in place, so
//! building a call allocates the command's two buffers and nothing else.

use ::redis::{Cmd, RedisError, RedisWrite, Script, ToRedisArgs, Value};

use super::RedisStore;
use super::layout::RecordKey;
use crate::key::Key;
use crate::{Error, Result};

/// A lease token as a script argument: its decimal digits, written in place.
pub(super) struct Token(pub(super) u64);

impl ToRedisArgs for Token {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        // As digits, by the integer's own (`itoa`) path, not `fmt`'s.
        self.0.write_redis_args(out);
    }
}

/// `EVALSHA <script> <number of keys>`, with room for `args` more arguments of `bytes` bytes
/// in all; add the keys, then the arguments.
pub(super) fn evalsha(script: &Script, keys: usize, args: usize, bytes: usize) -> Cmd {
    let mut cmd = Cmd::with_capacity(3 + args, 7 + 40 + 2 + bytes);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
    cmd
}

impl RedisStore {
    /// Runs `cmd` (built by [`evalsha`] for `script`); if the server lost its script cache,
    /// loads the script and runs it again. A key of another type than the script expects
    /// fails it: [`wrong_type`] tells.
    pub(super) async fn eval_raw(
        &self,
        script: &Script,
        cmd: &Cmd,
    ) -> std::result::Result<Value, RedisError> {
        let mut conn = self.conn.clone();
        match cmd.query_async(&mut conn).await {
            Err(error)
                if error.kind()
                    == ::redis::ErrorKind::Server(::redis::ServerErrorKind::NoScript) =>
            {
                script.load_async(&mut conn).await?;
                cmd.query_async(&mut conn).await
            }
            answer => answer,
        }
    }

    /// [`eval_raw`](Self::eval_raw), every failure an [`Error::Store`] of `operation`.
    pub(super) async fn eval(
        &self,
        operation: &'static str,
        script: &Script,
        cmd: &Cmd,
    ) -> Result<Value> {
        self.eval_raw(script, cmd)
            .await
            .map_err(|e| Error::store(operation, e))
    }

    /// The Redis type of the key at `redis_key` (`string`, `list`, ...), for a message.
    pub(super) async fn kind_of(&self, redis_key: impl ToRedisArgs) -> String {
        let mut conn = self.conn.clone();
        ::redis::cmd("TYPE")
            .arg(redis_key)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|_| "value of another type".to_owned())
    }

    /// The Redis key of `key` in `namespace`, as an argument.
    pub(super) fn record_key<'a>(&'a self, namespace: &'a str, key: &'a Key) -> RecordKey<'a> {
        RecordKey {
            prefix: &self.prefix,
            namespace,
            key,
        }
    }
}

/// Whether a script failed because a key holds another Redis type than it reads (Redis 7
/// passes the command's error code on; older servers wrap it in the script's error).
pub(super) fn wrong_type(error: &RedisError) -> bool {
    error.code() == Some("WRONGTYPE") || error.to_string().contains("WRONGTYPE")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_tokens_are_written_in_place() {
        let key = Key::from_bytes([0xab; 32]);
        let record = RecordKey {
            prefix: "idem",
            namespace: "a:b",
            key: &key,
        };
        let mut cmd = Cmd::new();
        cmd.arg(record).arg(Token(42));
        let packed = String::from_utf8(cmd.get_packed_command()).unwrap_or_default();
        let text = record.text();
        assert!(
            packed.starts_with(&format!("*2\r\n${}\r\n{text}\r\n", text.len())),
            "{packed}"
        );
        assert!(packed.ends_with("$2\r\n42\r\n"), "{packed}");
    }
}
