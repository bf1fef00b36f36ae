//! The runner of transactional tools (a `#[transaction]` parameter, feature `postgres`), and
//! the checks that say what to do when the feature is off or the parameter's type is wrong.

#[cfg(feature = "postgres")]
use idem_tools_runtime::engine::transactional;
/// The connection a transactional tool's body gets.
#[cfg(feature = "postgres")]
pub use idem_tools_runtime::store::postgres::PgConnection;

/// Without the `postgres` feature: a stand-in, so that a transactional tool's expansion
/// type-checks and the one error is [`PostgresFeature`]'s.
#[cfg(not(feature = "postgres"))]
pub struct PgConnection(());

use super::{Arc, Digest, Records, Store, ToolErr, ToolOk, ToolReturn};

/// Implemented (for `()`) only with idem's `postgres` feature.
#[diagnostic::on_unimplemented(
    message = "a `#[transaction]` parameter needs idem-tools' `postgres` feature",
    label = "the tool runs in a PostgreSQL transaction",
    note = "enable it: add `features = [\"postgres\"]` to the `idem-tools` line of Cargo.toml"
)]
pub trait PostgresFeature {}

#[cfg(feature = "postgres")]
impl PostgresFeature for () {}

/// Called by a transactional tool: a compile error without the `postgres` feature.
pub const fn transactional_enabled<T: PostgresFeature>() {}

/// The type of a `#[transaction]` parameter: the body's binding is made from the connection
/// with [`TransactionParam::from_conn`].
#[diagnostic::on_unimplemented(
    message = "a `#[transaction]` parameter must be `&mut sqlx::PgConnection`, found `{Self}`",
    label = "the connection of the transaction the engine opens for the tool",
    note = "the engine opens a transaction on the tool's PostgresStore, claims the key in it, \
            and passes its connection: run the tool's statements through it \
            (`sqlx::query(…).execute(&mut *tx)`), with sqlx 0.8"
)]
pub trait TransactionParam<'a>: Sized {
    /// The parameter, from the transaction's connection.
    fn from_conn(conn: &'a mut PgConnection) -> Self;
}

#[cfg(feature = "postgres")]
impl<'a> TransactionParam<'a> for &'a mut PgConnection {
    fn from_conn(conn: &'a mut PgConnection) -> Self {
        conn
    }
}

// Without the feature nothing that names this compiles (`PostgresFeature` is not implemented),
// so this is never called; it keeps that the one error.
#[cfg(not(feature = "postgres"))]
impl<'a, T> TransactionParam<'a> for T {
    fn from_conn(_: &'a mut PgConnection) -> Self {
        unreachable!("a transactional tool does not compile without the `postgres` feature")
    }
}

/// Runs a transactional tool's body through
/// [`transactional::execute`](idem_tools_runtime::engine::transactional::execute): in the
/// caller's task, inside one transaction with the claim and the recorded result.
///
/// # Errors
/// The tool's own errors, and any [`Error`](super::Error) converted with `E: From<Error>`.
#[cfg(feature = "postgres")]
pub async fn run_transactional<R, F, C>(
    digest: Digest,
    store: Option<Arc<dyn Store>>,
    records: C,
    body: F,
) -> R
where
    R: ToolReturn,
    R::Ok: ToolOk + Send,
    R::Err: ToolErr + Send,
    C: Records<R>,
    F: AsyncFnOnce(&mut PgConnection) -> R,
{
    let mut digest = digest;
    digest.body_is(::std::any::type_name::<F>());
    match super::prepare(digest, store) {
        Ok(call) => {
            let body = async move |conn: &mut PgConnection| body(conn).await.into_result();
            R::from_result(transactional::execute(call, records.codec(), body).await)
        }
        Err(error) => R::from_result(Err(R::Err::from(error))),
    }
}

/// Without the `postgres` feature: never called (the tool does not compile, see
/// [`PostgresFeature`]), but it type-checks so that the one error is that one.
#[cfg(not(feature = "postgres"))]
pub async fn run_transactional<R, F, C>(_: Digest, _: Option<Arc<dyn Store>>, _: C, _: F) -> R
where
    R: ToolReturn,
    R::Ok: ToolOk,
    R::Err: ToolErr,
    C: Records<R>,
    F: AsyncFnOnce(&mut PgConnection) -> R,
{
    std::future::pending().await
}
