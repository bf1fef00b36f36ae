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
/// Version 2: each record keeps the id of the turn that claimed it (whose claims its attempt
/// count counts), indexed with its namespace and claim time; `idem_budgets` keeps tools' counts
/// of started actions too; `idem_begin` and `idem_claim` take the turn (and the tool's count).
/// Version 3: each claim names the process that holds it (`holder`,
/// [`Holder`](crate::store::holder::Holder)), which `idem_begin` takes and answers, so that a
/// claim whose process is certainly gone is freed at once; the turn index is on
/// `(turn, namespace, created_at_ms)`.
/// Version 4: a transactional claim is written, inside its transaction, as the record of an
/// interrupted call until the call's result replaces it (`idem_claim` takes the marker and
/// its TTL instead of a lease), so that a transaction the tool's body commits itself leaves
/// that record, not a claim that expires.
pub const SCHEMA_VERSION: i32 = 4;

/// The version table, created first so that its row can be read under the lock.
const VERSION_TABLE: &str = "
CREATE TABLE IF NOT EXISTS {s}idem_schema (
    version integer NOT NULL
);
";

/// Version 1's tables (its functions are replaced by version 2's).
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

"#;

/// From version 1 to 2: the turn column and its index; version 1's functions of other
/// signatures dropped (a process of an older build then fails closed: its calls find no
/// function). Rows written before have the turn `''` (unknown): their attempt counts belong to
/// no turn, so the next claim of such a key counts from 0.
const SCHEMA_V2: &str = r#"
ALTER TABLE {s}idem_records ADD COLUMN IF NOT EXISTS turn text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS idem_records_turn ON {s}idem_records (namespace, turn, created_at_ms);
DROP FUNCTION IF EXISTS {s}idem_begin(text, bytea, text, bytea, bigint, bigint, bigint, bytea,
    bigint, bigint, boolean, bigint);
DROP FUNCTION IF EXISTS {s}idem_claim(text, bytea, text, bytea, bigint, bigint, bigint, bigint);
"#;

/// From version 2 to 3: the holder column; version 2's `idem_begin` (another signature and
/// answer) dropped, so that a process of an older build fails closed; and the turn index led by
/// the turn, not the namespace: led by the namespace, it was a prefix match for the lookups of
/// one key (`namespace = $1 AND key = $2`), which PostgreSQL's generic plans — made while the
/// table was empty — then ran as a scan of the namespace's records (a replay grew to 7× its
/// floor over a few thousand records).
const SCHEMA_V3: &str = r#"
ALTER TABLE {s}idem_records ADD COLUMN IF NOT EXISTS holder text;
DROP INDEX IF EXISTS {s}idem_records_turn;
CREATE INDEX idem_records_turn ON {s}idem_records (turn, namespace, created_at_ms);
DROP FUNCTION IF EXISTS {s}idem_begin(text, bytea, text, bytea, bigint, bigint, bigint, bytea,
    bigint, bigint, boolean, bigint, text, bytea, bigint);
"#;

/// From version 3 to 4: version 3's `idem_claim` (another signature) dropped, so that a process
/// of an older build fails closed.
const SCHEMA_V4: &str = r#"
DROP FUNCTION IF EXISTS {s}idem_claim(text, bytea, text, bytea, bigint, bigint, bigint, bigint,
    text);
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
        old @ 0..=3 => {
            if old == 0 {
                let v1 = qualify(SCHEMA_V1, prefix);
                tx.execute(v1.as_str()).await.map_err(fail)?;
            }
            if old <= 1 {
                let v2 = qualify(SCHEMA_V2, prefix);
                tx.execute(v2.as_str()).await.map_err(fail)?;
            }
            if old <= 2 {
                let v3 = qualify(SCHEMA_V3, prefix);
                tx.execute(v3.as_str()).await.map_err(fail)?;
            }
            let v4 = qualify(SCHEMA_V4, prefix);
            tx.execute(v4.as_str()).await.map_err(fail)?;
            let functions = super::functions::FUNCTIONS.replace("$$", &dollar_tag(prefix));
            let functions = qualify(&functions, prefix);
            tx.execute(functions.as_str()).await.map_err(fail)?;
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

/// The tag that quotes the functions' bodies (written `$$` in
/// [`FUNCTIONS`](super::functions::FUNCTIONS)), which hold the schema's prefix: one the prefix
/// does not hold, so that a schema named with `$$` in it does not end a body early.
fn dollar_tag(prefix: &str) -> String {
    (0u32..)
        .map(|n| format!("$idem{n}$"))
        .find(|tag| !prefix.contains(tag.as_str()))
        .unwrap_or_else(|| unreachable!("a prefix holds finitely many tags"))
}

/// `name` as a quoted SQL identifier.
pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
