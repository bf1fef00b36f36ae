//! The schema: tables, the server-side functions behind `begin` and transactional claims, and
//! the migration that brings a database to this build's version under an advisory lock.
//!
//! Every name is written `{s}name` here; `{s}` becomes the schema prefix chosen with
//! [`PostgresStoreBuilder::schema`](super::PostgresStoreBuilder::schema) (`"my_schema".`), or
//! nothing (the connection's `search_path`).

use sqlx::{Connection, Executor, PgConnection, Row};

use crate::store::StoreFuture;
use crate::{Error, Result};

/// The schema version this build writes, kept in the table `idem_schema`.
///
/// Version 1: `idem_records` (one row per key, with its attempt count), `idem_budgets` (turn
/// counts), and the functions `idem_now_ms`, `idem_begin`, `idem_claim` and `idem_record`.
pub const SCHEMA_VERSION: i32 = 1;

/// The version table, created first so that its row can be read under the lock.
const VERSION_TABLE: &str = "
CREATE TABLE IF NOT EXISTS {s}idem_schema (
    version integer NOT NULL
);
";

/// Version 1.
const SCHEMA_V1: &str = r#"
CREATE TABLE IF NOT EXISTS {s}idem_records (
    namespace          text   NOT NULL,
    key                bytea  NOT NULL,
    tool               text   NOT NULL,
    state              text   NOT NULL CHECK (state IN ('in_progress', 'completed')),
    fingerprint        bytea  NOT NULL,
    result             bytea,
    created_at_ms      bigint NOT NULL,
    expires_at_ms      bigint NOT NULL,
    token              bigint,
    attempts           bigint NOT NULL DEFAULT 0,
    attempts_expire_ms bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS idem_records_expires_at ON {s}idem_records (expires_at_ms);

CREATE TABLE IF NOT EXISTS {s}idem_budgets (
    id            bytea  NOT NULL PRIMARY KEY,
    count         bigint NOT NULL,
    expires_at_ms bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS idem_budgets_expires_at ON {s}idem_budgets (expires_at_ms);

-- The database server's clock, in milliseconds since the Unix epoch: every host sharing the
-- database agrees on it. `clock_timestamp()`, not `now()`: inside a tool's transaction,
-- `now()` is the time the transaction began.
CREATE OR REPLACE FUNCTION {s}idem_now_ms() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

-- `Store::begin` (p_claim) and the charge of a transactional call (not p_claim), in one call:
-- 1. a live record answers, read without a lock or a write (a replay, a wait);
-- 2. a key without a row gets its claimed (or charged) row in one insert; a key with a row has
--    it locked (waiting for a transaction that holds it, for at most p_lock_timeout_ms) and
--    read again: live, it answers; else its live attempts go through the per-key limit;
-- 3. the turn's count when p_max_calls is not NULL (the budget rule of
--    `store::budget::charge`); refused, every change of this call is undone;
-- 4. p_claim: the key is claimed with p_token for p_lease_ms; else it is only charged (its row
--    stays not live, like a released claim), committed asynchronously.
-- Answers: ('live', state, fingerprint, result, token, attempts, NULL), ('claimed' | 'charged',
-- NULL, NULL, NULL, NULL, attempts, NULL), ('refused_key' | 'refused_turn', NULL, NULL, NULL,
-- NULL, count, limit).
CREATE OR REPLACE FUNCTION {s}idem_begin(
    p_namespace text, p_key bytea, p_tool text, p_fingerprint bytea, p_lease_ms bigint,
    p_token bigint, p_max_attempts bigint, p_turn bytea, p_max_calls bigint,
    p_window_ms bigint, p_claim boolean, p_lock_timeout_ms bigint)
RETURNS TABLE (o_answer text, o_state text, o_fingerprint bytea, o_result bytea,
               o_token bigint, o_n bigint, o_lim bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r {s}idem_records%ROWTYPE;
    v_now bigint;
    v_found boolean;
    v_written boolean := false;
    v_inserted boolean := false;
    v_attempts bigint := 0;
    v_calls bigint;
BEGIN
    v_now := {s}idem_now_ms();
    SELECT * INTO r FROM {s}idem_records t WHERE t.namespace = p_namespace AND t.key = p_key;
    v_found := FOUND;
    IF v_found AND r.expires_at_ms > v_now THEN
        RETURN QUERY SELECT 'live'::text, r.state, r.fingerprint, r.result, r.token,
                            r.attempts, NULL::bigint;
        RETURN;
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF NOT v_found AND p_max_attempts > 0 THEN
        -- No row: the claim (or charge) in one insert, unless another caller inserted first.
        INSERT INTO {s}idem_records (namespace, key, tool, state, fingerprint, result,
                                     created_at_ms, expires_at_ms, token, attempts,
                                     attempts_expire_ms)
            VALUES (p_namespace, p_key, p_tool, 'in_progress', p_fingerprint, NULL, v_now,
                    CASE WHEN p_claim THEN v_now + p_lease_ms ELSE 0 END, p_token, 1,
                    v_now + p_window_ms)
            ON CONFLICT DO NOTHING;
        v_written := FOUND;
    END IF;
    IF NOT v_written THEN
        LOOP
            SELECT * INTO r FROM {s}idem_records t
                WHERE t.namespace = p_namespace AND t.key = p_key FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO {s}idem_records (namespace, key, tool, state, fingerprint, result,
                                         created_at_ms, expires_at_ms, token, attempts,
                                         attempts_expire_ms)
                VALUES (p_namespace, p_key, p_tool, 'in_progress', p_fingerprint, NULL, 0, 0,
                        p_token, 0, 0)
                ON CONFLICT DO NOTHING;
            v_inserted := FOUND;
        END LOOP;
        v_now := {s}idem_now_ms();
        IF r.expires_at_ms > v_now THEN
            RETURN QUERY SELECT 'live'::text, r.state, r.fingerprint, r.result, r.token,
                                r.attempts, NULL::bigint;
            RETURN;
        END IF;
        v_attempts := CASE WHEN r.attempts_expire_ms > v_now THEN r.attempts ELSE 0 END;
        IF v_attempts >= p_max_attempts THEN
            IF v_inserted THEN
                DELETE FROM {s}idem_records t
                    WHERE t.namespace = p_namespace AND t.key = p_key;
            END IF;
            RETURN QUERY SELECT 'refused_key'::text, NULL::text, NULL::bytea, NULL::bytea,
                                NULL::bigint, v_attempts, p_max_attempts;
            RETURN;
        END IF;
    END IF;
    IF p_max_calls IS NOT NULL THEN
        v_calls := NULL;
        IF p_max_calls > 0 THEN
            INSERT INTO {s}idem_budgets AS b (id, count, expires_at_ms)
                VALUES (p_turn, 1, v_now + p_window_ms)
                ON CONFLICT (id) DO UPDATE
                    SET count = CASE WHEN b.expires_at_ms > v_now THEN b.count + 1 ELSE 1 END,
                        expires_at_ms = EXCLUDED.expires_at_ms
                    WHERE b.expires_at_ms <= v_now OR b.count < p_max_calls
                RETURNING b.count INTO v_calls;
        END IF;
        IF v_calls IS NULL THEN
            SELECT CASE WHEN b.expires_at_ms > v_now THEN b.count ELSE 0 END INTO v_calls
                FROM {s}idem_budgets b WHERE b.id = p_turn;
            IF v_written OR v_inserted THEN
                DELETE FROM {s}idem_records t
                    WHERE t.namespace = p_namespace AND t.key = p_key;
            END IF;
            RETURN QUERY SELECT 'refused_turn'::text, NULL::text, NULL::bytea, NULL::bytea,
                                NULL::bigint, coalesce(v_calls, 0), p_max_calls;
            RETURN;
        END IF;
    END IF;
    IF NOT v_written THEN
        UPDATE {s}idem_records t
            SET tool = p_tool, state = 'in_progress', fingerprint = p_fingerprint,
                result = NULL, created_at_ms = v_now,
                expires_at_ms = CASE WHEN p_claim THEN v_now + p_lease_ms ELSE 0 END,
                token = p_token, attempts = v_attempts + 1,
                attempts_expire_ms = v_now + p_window_ms
            WHERE t.namespace = p_namespace AND t.key = p_key;
    END IF;
    IF p_claim THEN
        RETURN QUERY SELECT 'claimed'::text, NULL::text, NULL::bytea, NULL::bytea,
                            NULL::bigint, v_attempts + 1, NULL::bigint;
    ELSE
        -- The charge needs no flush of its own: the tool's transaction, committed after it,
        -- flushes the log up to its own commit, this one included.
        PERFORM set_config('synchronous_commit', 'off', true);
        RETURN QUERY SELECT 'charged'::text, NULL::text, NULL::bytea, NULL::bytea,
                            NULL::bigint, v_attempts + 1, NULL::bigint;
    END IF;
END
$$;

-- A transactional call's claim, inside the tool's transaction, after its charge: takes the
-- key's row (waiting for a transaction that holds it, for at most p_lock_timeout_ms), if no
-- live record holds it. Raises ID001 when a live record does (completed or held meanwhile: the
-- caller rolls back and asks again). The lock timeout applies to this call only.
CREATE OR REPLACE FUNCTION {s}idem_claim(
    p_namespace text, p_key bytea, p_tool text, p_fingerprint bytea, p_lease_ms bigint,
    p_token bigint, p_window_ms bigint, p_lock_timeout_ms bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    previous text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    UPDATE {s}idem_records t
        SET tool = p_tool, state = 'in_progress', fingerprint = p_fingerprint, result = NULL,
            created_at_ms = {s}idem_now_ms(), expires_at_ms = {s}idem_now_ms() + p_lease_ms,
            token = p_token
        WHERE t.namespace = p_namespace AND t.key = p_key
          AND t.expires_at_ms <= {s}idem_now_ms();
    IF NOT FOUND THEN
        -- The charged row was deleted meanwhile (an operator, a purge): claim a new one.
        INSERT INTO {s}idem_records (namespace, key, tool, state, fingerprint, result,
                                     created_at_ms, expires_at_ms, token, attempts,
                                     attempts_expire_ms)
            VALUES (p_namespace, p_key, p_tool, 'in_progress', p_fingerprint, NULL,
                    {s}idem_now_ms(), {s}idem_now_ms() + p_lease_ms, p_token, 1,
                    {s}idem_now_ms() + p_window_ms)
            ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'idem: the key is live' USING ERRCODE = 'ID001';
        END IF;
    END IF;
    PERFORM set_config('lock_timeout', previous, true);
END
$$;

-- A transactional call's record, inside the tool's transaction: the result of the claim made
-- with p_token, kept p_ttl_ms, its attempts reset. Raises ID002 if the claim is gone (the
-- tool's own statements changed it).
CREATE OR REPLACE FUNCTION {s}idem_record(
    p_namespace text, p_key bytea, p_token bigint, p_result bytea, p_ttl_ms bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE {s}idem_records t
        SET state = 'completed', result = p_result,
            expires_at_ms = {s}idem_now_ms() + p_ttl_ms, attempts = 0, attempts_expire_ms = 0
        WHERE t.namespace = p_namespace AND t.key = p_key AND t.token = p_token
          AND t.state = 'in_progress';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idem: the claim was changed inside the transaction'
            USING ERRCODE = 'ID002';
    END IF;
END
$$;
"#;

/// The SQL state `idem_claim` raises when a live record holds the key.
pub(crate) const KEY_IS_LIVE: &str = "ID001";

/// The SQL state `idem_record` raises when the claim is gone.
pub(crate) const CLAIM_GONE: &str = "ID002";

/// PostgreSQL's `lock_not_available`: a lock wait ran past `lock_timeout`.
pub(crate) const LOCK_TIMEOUT: &str = "55P03";

/// `sql` with `{s}` replaced by the schema prefix.
pub(super) fn qualify(sql: &str, prefix: &str) -> String {
    sql.replace("{s}", prefix)
}

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction, under an advisory lock named
/// after the schema, so that processes opening one database at once migrate it once. (Boxed:
/// `sqlx`'s executor-generic futures are not provably `Send` in callers generic over
/// lifetimes, and opening a store must work in any spawned task.)
pub(super) fn migrate<'a>(
    conn: &'a mut PgConnection,
    schema: Option<&'a str>,
    prefix: &'a str,
) -> StoreFuture<'a, ()> {
    StoreFuture::new(migrate_now(conn, schema, prefix))
}

async fn migrate_now(conn: &mut PgConnection, schema: Option<&str>, prefix: &str) -> Result<()> {
    let fail = |e: sqlx::Error| Error::store("migrate", e);
    let mut tx = conn.begin().await.map_err(fail)?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('idem schema ' || $1, 0))")
        .bind(schema.unwrap_or(""))
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    if let Some(schema) = schema {
        let create = format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(schema));
        tx.execute(create.as_str()).await.map_err(fail)?;
    }
    let table = qualify(VERSION_TABLE, prefix);
    tx.execute(table.as_str()).await.map_err(fail)?;
    let version: Option<i32> =
        sqlx::query(&qualify("SELECT max(version) FROM {s}idem_schema", prefix))
            .fetch_one(&mut *tx)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(fail)?;
    match version.unwrap_or(0) {
        SCHEMA_VERSION => return Ok(()),
        0 => {
            let v1 = qualify(SCHEMA_V1, prefix);
            tx.execute(v1.as_str()).await.map_err(fail)?;
            sqlx::query(&qualify("DELETE FROM {s}idem_schema", prefix))
                .execute(&mut *tx)
                .await
                .map_err(fail)?;
            sqlx::query(&qualify(
                "INSERT INTO {s}idem_schema (version) VALUES ($1)",
                prefix,
            ))
            .bind(SCHEMA_VERSION)
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
        }
        newer if newer > SCHEMA_VERSION => {
            return Err(Error::Config(format!(
                "the idem tables in PostgreSQL have schema version {newer}, but this build of \
                 idem only knows versions up to {SCHEMA_VERSION}: upgrade idem, or give this \
                 build a schema of its own (PostgresStore::builder().schema(\"…\"))"
            )));
        }
        unknown => {
            return Err(Error::Config(format!(
                "the idem tables in PostgreSQL have an unknown schema version {unknown} \
                 (table idem_schema); give idem a schema of its own \
                 (PostgresStore::builder().schema(\"…\"))"
            )));
        }
    }
    tx.commit().await.map_err(fail)
}

/// The version of the idem tables, without creating or changing anything: `None` if there are
/// none (for the CLI, which never creates tables). Boxed, as [`migrate`] is.
pub(super) fn existing_version<'a>(
    conn: &'a mut PgConnection,
    prefix: &'a str,
) -> StoreFuture<'a, Option<i32>> {
    StoreFuture::new(existing_version_now(conn, prefix))
}

async fn existing_version_now(conn: &mut PgConnection, prefix: &str) -> Result<Option<i32>> {
    let table = qualify("{s}idem_schema", prefix);
    let found: Option<String> = sqlx::query("SELECT to_regclass($1)::text")
        .bind(&table)
        .fetch_one(&mut *conn)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| Error::store("open", e))?;
    if found.is_none() {
        return Ok(None);
    }
    sqlx::query(&qualify("SELECT max(version) FROM {s}idem_schema", prefix))
        .fetch_one(&mut *conn)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| Error::store("open", e))
}

/// `name` as a quoted SQL identifier.
pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
