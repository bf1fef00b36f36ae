//! Make LLM-agent tool calls safe to retry: idempotency keys, dedup stores and retry budgets.
//!
//! Annotate each tool: `#[idempotent]` for tools that change the world (a retry in the same
//! turn replays the first result instead of acting twice), `#[read_only]` for tools that only
//! read (zero cost, classification only). List them with [`tools!`] to get a catalog that fails
//! to compile if any tool is unclassified.
//!
//! ```
//! use idem_tools::{Turn, idempotent, read_only};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Receipt { id: u64 }
//!
//! /// Sends a message: runs once per turn and arguments, replays afterwards.
//! #[idempotent(ttl = "1h")]
//! async fn send_message(to: String, body: String) -> Result<Receipt, idem_tools::Error> {
//!     Ok(Receipt { id: 7 })
//! }
//!
//! /// Searches the docs: no key, no store, no budget.
//! #[read_only]
//! async fn search_docs(query: &str) -> Vec<String> {
//!     vec![query.to_owned()]
//! }
//!
//! const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![send_message, search_docs];
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_tools::Error> {
//! Turn::new("conv-1/turn-1")
//!     .scope(async {
//!         let first = send_message("ada".into(), "hi".into()).await?;
//!         let retry = send_message("ada".into(), "hi".into()).await?; // replayed
//!         assert_eq!(first.id, retry.id);
//!         Ok::<_, idem_tools::Error>(())
//!     })
//!     .await?;
//! assert!(TOOLS[1].read_only_hint() && !TOOLS[0].read_only_hint());
//! # Ok(()) }
//! ```
//!
//! See the `#[idempotent]` docs for every option and for how it stacks with other attributes.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

/// Makes an `async fn` tool safe to retry: a second call with the same arguments in the same
/// turn replays the first result instead of running the body again.
///
/// ```
/// use idem_tools::{Turn, idempotent};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Receipt { id: u64 }
///
/// #[idempotent(ttl = "1h", budget = 3)]
/// async fn send_message(to: String, text: String) -> Result<Receipt, idem_tools::Error> {
///     Ok(Receipt { id: 1 }) // the side effect goes here
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_tools::Error> {
/// Turn::new("conv-1/turn-3")
///     .scope(async {
///         send_message("ada".into(), "hi".into()).await?; // runs
///         send_message("ada".into(), "hi".into()).await?; // replayed: the body is not polled
///         Ok::<_, idem_tools::Error>(())
///     })
///     .await
/// # }
/// ```
///
/// The function keeps its signature, visibility, attributes, doc comments and generics. Its
/// body becomes an `async move` block handed to [`execute`]: the key is derived from the
/// arguments, the turn's retry budget is charged, the store is asked, and only then is the body
/// run — or the recorded result returned without polling it.
///
/// # Requirements (each a compile error spanned at the offending tokens)
///
/// - an `async fn` (free function, inherent or trait method: `&self`, `&mut self`,
///   `self: Arc<Self>`; generics and `impl Trait` arguments are fine, each type or const
///   parameter in the type of an argument (not only `T::Id`), or its instantiations would share keys);
///   a method with a receiver needs [`#[tool_impl]`](macro@tool_impl) on its `impl` block or
///   a `name = "…"` (see
///   [the name](#the-name)), and says what of `self` identifies the action, `self_key = …` or
///   `same_service`, on itself or on its `#[tool_impl]` block (see
///   [the receiver](#the-receiver-in-the-key)); the name is one model APIs accept;
/// - returns `Result<T, E>` (or an alias, such as `anyhow::Result<T>`) with
///   `T: Serialize + DeserializeOwned` (recorded and replayed) and `E: From<idem_tools::Error>`
///   (budget, store and turn failures come out as the tool's own error; `idem_tools::Error` and
///   `anyhow::Error` qualify); `T` is owned (`String`, not `&str`): a replay has nothing to
///   borrow from;
/// - every argument in the key is `Serialize`; leave others out with `skip(..)`.
///
/// # The key
///
/// Each argument enters the key under its name; a `Turn`/`&Turn` parameter never does, nor does
/// `self` unless `self_key = …` says what identifies the receiver (see
/// [the receiver](#the-receiver-in-the-key)). A pattern parameter (`(a, b): (u32, u32)`) is hashed whole under its position, `argN`
/// (counting parameters after `self` from 0), and can be skipped by that name. Renaming or
/// reordering such parameters therefore changes keys, like renaming a named one.
///
/// # The name
///
/// The name is part of every key, so two tools must never share one. A free function is named
/// after itself. A method is named after its type too, `Type__method`, when its `impl` block is
/// under [`#[tool_impl]`](macro@tool_impl) (`Type` is the last segment of the self type,
/// without generic arguments: `impl<T> Tool for Wrapper<T>` gives `Wrapper__call`). A method
/// with a `self` receiver outside such a block must be given `name = "…"`: otherwise
/// `CreateInvoice::call` and `DeleteAccount::call` would both be `call` and replay each other's
/// results; it is a compile error that says so. `name = "…"` always wins.
///
/// A model is shown the name, and OpenAI and Anthropic accept only `^[a-zA-Z0-9_-]{1,64}$`:
/// the final name is checked at compile time, and one that does not match (a non-ASCII
/// function name, a `Type__method` over 64 characters, `name = "billing.charge"`) is an error
/// that says to give one that does. [`ToolInfo::item`] keeps the Rust name (`charge_card`).
///
/// Two listed tools with one name are a compile error of [`tools!`]. Two different tools that
/// reach the engine under one name (and version) in one process are refused at run time with
/// [`Error::DuplicateTool`]: each tool has a `static` slot that registers its name on the first
/// call, after which the check is one atomic load.
///
/// # The receiver in the key
///
/// Two instances of one type are one action unless something of `self` is in the key: right
/// for a receiver that is a client handle (two handles to one service), silently wrong for one
/// that carries an identity. With `Mailer { from: "alice" }` and `Mailer { from: "carol" }`,
/// carol's `send("dave", …)` in the turn where alice sent the same would get alice's receipt,
/// and carol's message would never be sent. So a method with a receiver does not compile until
/// it says which, on itself or once on its [`#[tool_impl]`](macro@tool_impl) block (a method's
/// own wins); the error, at the receiver, shows both:
///
/// - `self_key = EXPR` puts the identity in the key, as the argument `self`; `EXPR` is
///   evaluated with `self` in scope before the body runs and must be `Serialize` (a field, a
///   tuple of fields);
/// - `same_service` says that every instance is the same service: `self` stays out of the key.
///
/// ```
/// # use idem_tools::{Turn, idempotent, tool_impl};
/// #[derive(Clone)]
/// struct Mailer { from: String }
///
/// #[tool_impl]
/// impl Mailer {
///     #[idempotent(self_key = self.from)]
///     async fn send(&self, to: String) -> Result<String, idem_tools::Error> {
///         Ok(format!("{} -> {to}", self.from))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_tools::Error> {
/// let (alice, carol) = (Mailer { from: "alice".into() }, Mailer { from: "carol".into() });
/// Turn::new("conv-1/turn-4")
///     .scope(async {
///         assert_eq!(alice.send("dave".into()).await?, "alice -> dave");
///         assert_eq!(carol.send("dave".into()).await?, "carol -> dave"); // another action
///         Ok::<_, idem_tools::Error>(())
///     })
///     .await
/// # }
/// ```
///
/// # Detached and attached tools
///
/// When a caller gives up on a call (a `tokio::time::timeout`, a `select!`), an attached body
/// is cancelled mid-flight: its key is kept as interrupted, and every retry is refused (the
/// outcome is unknown) until the record expires. So a tool whose body owns everything it uses
/// runs **detached**: its body runs in a task of its own and finishes, records its result and
/// serves retries even if the caller goes away. The macro decides from the signature: detached
/// when no parameter type has a reference or a lifetime, no parameter is `impl Trait`, the
/// function has no type parameters, it is an `async fn` (native or `#[async_trait]`), and the
/// receiver is none, `self: Arc<Self>`, or `&self` on a type the task can own a clone of.
///
/// A **`&self` method** runs detached **on a clone of `self`** when its type is
/// `Clone + Send + Sync + 'static` (checked at compile time) and its `impl` block is a
/// non-generic one under [`#[tool_impl]`](macro@tool_impl): every `self` in the body means the
/// clone. State behind an `Arc` is shared with the original; a field that `Clone` copies
/// belongs to the clone. Otherwise it runs attached and the compiler **warns**, once per
/// `#[tool_impl]` block at its type (at `&self` outside one), with the fixes: derive `Clone`
/// (cheap when the clients are behind `Arc`), take `self: Arc<Self>`, or write `attached` to
/// accept it. `&mut self` always runs attached,
/// without a warning.
///
/// Every body is a `Send` future, and a detached one is also `'static`. When a body is not
/// `Send` (a `std::sync::MutexGuard`, an `Rc` or a `RefCell` borrow held across `.await`), the
/// error's note says to drop it before the `.await` or use `tokio::sync::Mutex`; when a
/// detached body borrows, to write `attached`.
///
/// Every other tool, and one marked `attached`, runs **attached**, in the caller's task. If
/// it is cancelled after it started, its key is kept as interrupted (a retry gets an error
/// saying the outcome is unknown), unless it is marked `release_on_cancel`, which releases the
/// key so a retry runs the body again.
///
/// ```
/// # use idem_tools::idempotent;
/// #[idempotent(attached)] // runs in the caller's task, although it could be detached
/// async fn count(n: u32) -> Result<u32, idem_tools::Error> {
///     tokio::task::yield_now().await;
///     Ok(n)
/// }
/// ```
///
/// ```compile_fail
/// # use idem_tools::idempotent;
/// # use std::rc::Rc;
/// #[idempotent(attached)] // attached or not, a body must be `Send`
/// async fn count(n: u32) -> Result<u32, idem_tools::Error> {
///     let shared = Rc::new(n);
///     tokio::task::yield_now().await;
///     Ok(*shared)
/// }
/// ```
///
/// # Transactional tools (feature `postgres`)
///
/// A tool that writes to the application's PostgreSQL database declares a parameter
/// `#[transaction] tx: &mut sqlx::PgConnection`. The parameter leaves the signature callers see
/// (they call `transfer(from, to, cents)`); the engine opens a transaction on the tool's
/// `PostgresStore`, claims the key inside it, runs the body with
/// its connection, records the result and commits — once. Either everything commits (a retry
/// replays) or nothing does (a retry runs afresh): an `Err`, a panic, a caller that drops the
/// call or times out, a killed process or a lost connection all roll back the tool's rows and
/// the claim alike, so a transactional tool is never *interrupted* (unless its body commits
/// the transaction itself, a misuse reported as `Error::TransactionEnded`), and it runs in its
/// caller's task. A concurrent duplicate waits for the transaction, then replays its result. See
/// `idem_tools::engine::transactional` (with the `postgres` feature) and the README's "Exactly
/// once for database writes".
///
/// **Not covered by the transaction:** whatever the body does outside the database. An HTTP
/// call, an email or a message sent before the commit happens again if the process dies before
/// the commit and the tool is retried. Forward the key to such APIs so that they deduplicate:
///
/// ```ignore
/// #[idempotent]
/// async fn refund(#[transaction] tx: &mut sqlx::PgConnection, order: i64) -> Result<i64, AppError> {
///     let id = sqlx::query_scalar("UPDATE orders SET refunded = true WHERE id = $1 RETURNING id")
///         .bind(order).fetch_one(&mut *tx).await?;
///     // With the `IdempotencyKey` middleware (feature `reqwest`) on `payments`, the request
///     // carries `Idempotency-Key: <this call's key>`: deduplicated there.
///     payments.post(refund_url(order)).send().await?;
///     Ok(id)
/// }
/// ```
///
/// One `#[transaction]` parameter at most; it cannot be the `#[key]`, and `cache_errors` and
/// `release_on_cancel` do not apply (an `Err` and a cancellation roll back). Without the
/// `postgres` feature, or with another type than `&mut sqlx::PgConnection`, it is a compile
/// error that says so; a tool whose store at run time is not a `PostgresStore` fails with
/// [`Error::Config`].
///
/// # The turn
///
/// From a `Turn` or `&Turn` parameter if there is one, else from the task-local scope
/// ([`Turn::scope`]). With neither, the call fails with [`Error::NoTurn`] and the body does not
/// run: running unprotected would silently turn every retry into a duplicate side effect, which
/// is the bug this crate exists to prevent.
///
/// # Options
///
#[doc = include_str!("../docs/options.md")]
///
/// Unknown and duplicate options, a `skip` of a parameter that does not exist, two `#[key]`
/// parameters, a malformed `ttl`, a `lease` out of bounds and `release_on_cancel` on a detached
/// tool are compile errors, all reported at once, each at the option that caused it.
///
/// **`skip` and the fingerprint.** A skipped argument is not part of the key, but if it
/// implements `Serialize` it is part of the fingerprint: replaying a recorded key for a call
/// whose skipped argument differs is refused with [`Error::PayloadMismatch`]. An argument that
/// does not implement `Serialize` (a client, a connection) can be skipped too; it is then in
/// neither (autoref specialization picks between the two at compile time).
///
/// ```
/// # use idem_tools::idempotent;
/// struct Http; // not Serialize
///
/// #[idempotent(skip(http))]
/// async fn charge(http: &Http, #[key] request_id: &str, cents: u64) -> Result<u64, idem_tools::Error> {
///     Ok(cents)
/// }
/// ```
///
/// # The descriptor
///
/// Next to the function the macro emits its classification, a `const` [`ToolInfo`] named
/// `<fn>__needs_idempotent_or_read_only`: a module-level constant for a function, an associated constant for a
/// method. [`tools!`] reads it. A method with a `self` receiver and no visibility gets none,
/// since it may sit in a trait impl, which cannot hold extra items: put
/// [`#[tool_impl]`](macro@tool_impl) on its `impl` block (trait or inherent), which emits it
/// after the block, or give an inherent method a visibility (`pub`, `pub(crate)`, even
/// `pub(self)`). So does every function with no visibility in a `#[tool_impl]` block, an
/// associated function of a trait impl included (outside one, rustc reports its descriptor as
/// "not a member of trait").
///
/// # Stacking with other attributes
///
/// Attribute macros expand outermost first, each seeing the output of none of those below it.
///
/// - `#[tracing::instrument]`: both orders compile. Put `#[idempotent]` **above** it: the span
///   then wraps the whole call, so the engine's `tool call` events (with key and outcome) land
///   in the span, replays included. Below it, the span is created inside the body and only
///   covers executions.
/// - `#[async_trait]`: it sits on the `impl` (or `trait`) block, so it always expands first and
///   `#[idempotent]` sees its output: a non-`async` `fn` returning
///   `Pin<Box<dyn Future<Output = R> + Send + '_>>` whose body is `Box::pin(async move { … })`.
///   `#[idempotent]` recognises that shape and wraps the inner block; nothing to do but keep
///   `#[async_trait]` on the block and `#[idempotent]` on the method, and add
///   [`#[tool_impl]`](macro@tool_impl) to the block, above or below `#[async_trait]`: it names
///   the method `Type__method` and emits its descriptor for [`tools!`]. An `#[async_trait]`
///   tool runs detached or attached by the same rules as a native one.
/// - any macro that turns the `async fn` into something else must go **below** `#[idempotent]`
///   unless it produces the `#[async_trait]` shape.
///
/// ```
/// use idem_tools::idempotent;
///
/// #[async_trait::async_trait]
/// trait Payments {
///     async fn pay(&self, cents: u64) -> Result<u64, idem_tools::Error>;
/// }
///
/// #[derive(Clone)] // its `&self` tool runs detached, on a clone
/// struct Bank;
///
/// #[idem_tools::tool_impl(same_service)] // every `Bank` is the same bank
/// #[async_trait::async_trait]
/// impl Payments for Bank {
///     #[idempotent]
///     #[tracing::instrument(skip(self))]
///     async fn pay(&self, cents: u64) -> Result<u64, idem_tools::Error> {
///         Ok(cents)
///     }
/// }
/// ```
pub use idem_tools_macros::idempotent;

/// Classifies a tool as read-only: it changes nothing, so it needs no key, store or budget.
///
/// Zero runtime cost: the function (sync or async) is emitted untouched; only a `const`
/// [`ToolInfo`] descriptor is added next to it (see [`idempotent`](macro@idempotent#the-descriptor)),
/// for [`tools!`] and the MCP `readOnlyHint`.
///
/// ```
/// #[idem_tools::read_only]
/// async fn search_docs(query: &str) -> Vec<String> {
///     vec![format!("results for {query}")]
/// }
/// # let _ = search_docs("x");
/// ```
///
/// Compile errors: a `&mut` parameter (including `&mut self`: it could change state through
/// it), any option but `name = "…"` (the name a model is shown, checked like
/// [`idempotent`](macro@idempotent#the-name)'s) and `crate = "…"` (for a renamed `idem_tools`),
/// and `#[idempotent]` on the same function, in either order.
///
/// ```compile_fail
/// #[idem_tools::read_only]
/// fn remember(cache: &mut Vec<String>, query: &str) {}
/// ```
pub use idem_tools_macros::read_only;

/// Names the tool methods of an `impl` block after its type (`Type__method`), and emits the
/// descriptors of those that cannot carry their own (every one with no visibility: a method of
/// a trait impl, with `self` or without, or of an rmcp-style server), so that [`tools!`] can
/// list them.
///
/// **Names.** Every `#[idempotent]` / `#[read_only]` method or associated function of the block
/// gets the default name `Type__method` (see [`idempotent`](macro@idempotent#the-name)): two
/// trait impls' `call` methods are two tools with different keys. `#[tool_impl]` expands first
/// and passes the type name to the methods' attributes; an explicit `name = "…"` still wins.
///
/// **The receiver.** `#[tool_impl(self_key = EXPR)]` or `#[tool_impl(same_service)]` says,
/// once for the block, what of `self` identifies the action of each `#[idempotent]` method
/// with a receiver that does not say it itself (see
/// [`idempotent`](macro@idempotent#the-receiver-in-the-key)); a method's own wins.
///
/// **Descriptors.**
/// `#[idempotent]` and `#[read_only]` put a method's descriptor (see
/// [`idempotent`](macro@idempotent#the-descriptor)) next to the method, as an associated
/// constant. A trait impl cannot hold extra items, so a method with a receiver and no
/// visibility — every method of a trait impl (`impl Tool for X { async fn call(&self, …) }`),
/// and the usual `#[tool]` method of an rmcp-style MCP server — gets none. Put `#[tool_impl]`
/// on the `impl` block: it adds after it an inherent
/// `impl SelfTy { pub const <method>__needs_idempotent_or_read_only: ToolInfo = …; }` with those descriptors,
/// the same ones the method-level attribute would have built from its options.
///
/// ```
/// use idem_tools::{ToolInfo, ToolKind, Turn, idempotent, read_only, tool_impl};
///
/// trait Tool {
///     async fn call(&self, to: String) -> Result<u64, idem_tools::Error>;
/// }
///
/// #[derive(Clone)]
/// struct SendEmail;
///
/// #[tool_impl(same_service)] // a trait impl; every `SendEmail` is one service
/// impl Tool for SendEmail {
///     #[idempotent(name = "send_email", budget = 2)]
///     async fn call(&self, to: String) -> Result<u64, idem_tools::Error> {
///         Ok(to.len() as u64)
///     }
/// }
///
/// struct Server;
///
/// #[tool_impl] // an inherent impl whose methods have no visibility
/// impl Server {
///     #[read_only]
///     fn search(&self, query: &str) -> usize {
///         query.len()
///     }
/// }
///
/// const TOOLS: &[ToolInfo] = idem_tools::tools![SendEmail::call, Server::search];
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_tools::Error> {
/// assert_eq!(TOOLS[0].name, "send_email"); // `name` wins
/// assert_eq!(TOOLS[0].budget, Some(2));
/// assert_eq!(TOOLS[1].name, "Server__search"); // and `item` is `search`
/// assert_eq!(TOOLS[1].kind, ToolKind::ReadOnly);
///
/// // The methods themselves are unchanged: still deduplicated.
/// Turn::new("conv-1/turn-1")
///     .scope(async {
///         SendEmail.call("ada".into()).await?;
///         SendEmail.call("ada".into()).await?; // replayed
///         Ok::<_, idem_tools::Error>(())
///     })
///     .await?;
/// # assert_eq!(Server.search("x"), 1);
/// # Ok(()) }
/// ```
///
/// Methods are recognised by their attribute's last path segment (`#[idempotent]`,
/// `#[idem_tools::idempotent]`, `#[my_idem::read_only]`; a renamed `idem_tools` is given, as always, by the
/// method's own `crate = "…"` option). Methods that already emit their descriptor (with a
/// visibility, or without a receiver) are left to it, so nothing is defined twice. Errors in a
/// method's options are reported once, by the method's attribute; that method then gets no
/// descriptor here.
///
/// `#[tool_impl]` must be above any attribute of the block that removes the methods'
/// attributes; `#[async_trait]` may be above or below it, and so may an rmcp-style
/// `#[tool_router]`, which leaves the methods' attributes alone. It takes no other options,
/// and anything but an `impl` block of a named type is a compile error.
///
/// Limits: the descriptors live in an inherent impl of the self type, so that type must be
/// local to the crate (not `Vec<X>` nor `&X`), and two listed methods of one type cannot share
/// a name (two trait impls each with `call`: one `call__needs_idempotent_or_read_only`). Type and const parameters
/// of the impl that the self type does not use are left off the inherent impl; a generic type is
/// listed with its arguments: `tools![Wrapper::<u8>::call]`.
pub use idem_tools_macros::tool_impl;
// The public surface: what a tool author, a store author and an operator name (see
// ARCHITECTURE.md, "The public API"). The runtime crate's other items are its own; what the
// generated code needs goes through `__private`.
pub use idem_tools_runtime::engine::ToolResult;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use idem_tools_runtime::store::SqliteStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use idem_tools_runtime::store::{PostgresStore, postgres::PostgresStoreBuilder};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use idem_tools_runtime::store::{RedisStore, redis::RedisStoreBuilder};
pub use idem_tools_runtime::{
    Call, Codec, Conversation, Earlier, Error, Key, KeyKept, MemoryStore, Mismatch, Outcome,
    Result, Stats, Store, ToolInfo, ToolKind, Turn, Unkeyed, current_key, default_store, execute,
    execute_detached, set_default_store, stats,
};
pub use idem_tools_runtime::{clock, key};

/// Spawns `future` on the current Tokio runtime *inside this task's turn and tool calls*: in
/// the new task, [`Turn::current`] is this task's turn, [`current_key`] this task's key while
/// its tool runs, and a tool called there with a key a caller holds fails at once with
/// [`Error::Reentrant`] instead of waiting for itself. Inside an MCP tool call routed by an
/// `IdemServer` (feature `rmcp`), the client's idempotency key is shared with it: whichever
/// `#[idempotent]` tool of the call runs first, here or in the new task, is keyed by it.
/// `tokio::spawn` carries none of these (task-locals do not follow a spawn): use this for work
/// a tool, or a handler, hands to a task of its own.
///
/// ```
/// use idem_tools::{Turn, spawn};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// Turn::new("turn-1")
///     .scope(async {
///         let id = spawn(async { Turn::current().map(|t| t.id().to_owned()) }).await.unwrap();
///         assert_eq!(id.as_deref(), Some("turn-1"));
///     })
///     .await;
/// # }
/// ```
///
/// # Panics
/// Outside a Tokio runtime, as `tokio::spawn` does.
pub fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    #[cfg(feature = "rmcp")]
    let future = mcp::carry_routed_key(future);
    idem_tools_runtime::spawn(future)
}

pub mod engine {
    //! The engine, for tools written by hand: [`execute`] and [`execute_detached`] run a body
    //! at most once per key, as `#[idempotent]` does, and `transactional` inside a PostgreSQL
    //! transaction (feature `postgres`); [`telemetry`] names the span fields and metrics.
    pub use crate::spawn;
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub use idem_tools_runtime::engine::transactional;
    pub use idem_tools_runtime::engine::{
        Call, Codec, ToolResult, current_key, execute, execute_detached, telemetry,
    };
}

pub mod turn {
    //! A turn's defaults — what a [`Turn`] allows unless it, or the tool, says otherwise — and
    //! its limits.
    pub use idem_tools_runtime::turn::{
        DEFAULT_ACTIONS_PER_TOOL, DEFAULT_ATTEMPTS_PER_KEY, DEFAULT_IN_FLIGHT_WAIT,
        DEFAULT_MODEL_STEPS, MAX_IN_FLIGHT_WAIT, MAX_NAMESPACE_LEN, MAX_TURN_ID_LEN, Turn,
    };
}

pub mod conversation {
    //! Durable model steps: a [`Conversation`] records what the model answered, and a
    //! restarted run replays it.
    pub use idem_tools_runtime::conversation::{Conversation, DEFAULT_STEP_LEASE};
}

pub mod store {
    //! What a store of one's own implements — the [`Store`] trait, its requests and answers, the
    //! budget rule ([`budget::charge`]), and the conformance suite that checks a store against
    //! the contract (feature `conformance`). idem's own stores are at the top level.
    #[cfg(feature = "conformance")]
    #[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
    pub use idem_tools_runtime::store::conformance;
    pub use idem_tools_runtime::store::{
        Begin, BeginRequest, Bytes, Charge, DEFAULT_BUDGET_WINDOW, DEFAULT_LEASE, DEFAULT_TTL,
        Exhausted, FirstResult, Lease, LeaseToken, MAX_DURATION, MAX_LEASE, MIN_LEASE, Record,
        RecordState, Removed, Store, StoreFuture, budget,
    };
}

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

#[cfg(feature = "rmcp")]
pub mod mcp;

#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod http;

#[cfg(feature = "rig")]
#[cfg_attr(docsrs, doc(cfg(feature = "rig")))]
pub mod rig;

/// The README's Rust examples, run as doctests so that they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// A `&'static [ToolInfo]` catalog of annotated tools, in the order given; **fails to compile if
/// a listed tool is not annotated** with `#[idempotent]` or `#[read_only]` (the error names it).
///
/// Entries are paths to free functions (`send_email`, `mail::send_email`) or to methods
/// (`Mailer::send`) that have a visibility or sit in an `impl` block under [`tool_impl`]. It is a constant expression, so it can initialise a `const`.
///
/// ```
/// use idem_tools::{ToolInfo, ToolKind, idempotent, read_only};
///
/// #[idempotent(budget = 2)]
/// async fn send_email(to: String) -> Result<(), idem_tools::Error> { Ok(()) }
///
/// mod docs {
///     #[idem_tools::read_only]
///     pub fn search(query: &str) -> usize { query.len() }
/// }
///
/// const TOOLS: &[ToolInfo] = idem_tools::tools![send_email, docs::search];
/// for tool in TOOLS {
///     // MCP tool annotations
///     println!(
///         "{}: readOnlyHint={} idempotentHint={} destructiveHint={}",
///         tool.name, tool.read_only_hint(), tool.idempotent_hint(), tool.destructive_hint(),
///     );
/// }
/// assert_eq!(TOOLS[0].kind, ToolKind::Idempotent);
/// assert_eq!(TOOLS[0].budget, Some(2));
/// assert_eq!(TOOLS[1].kind, ToolKind::ReadOnly);
/// ```
///
/// An unannotated function is rejected: rustc reports that it cannot find the value
/// `not_annotated__needs_idempotent_or_read_only` (the descriptor `#[idempotent]` or `#[read_only]` would have
/// emitted next to it). Annotate the function, or take it out of the catalog. A method without
/// a descriptor gets a message of its own, naming `#[idem_tools::tool_impl]`, and so does a
/// method listed like a function (`tools![charge_card]`): it says to write
/// `tools![Billing::charge_card]`.
///
/// ```compile_fail
/// async fn not_annotated() {}
/// const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![not_annotated];
/// ```
///
/// So are two entries with one name (they would share keys); the error names both:
///
/// ```compile_fail,E0080
/// #[idem_tools::idempotent(name = "charge")]
/// async fn charge(cents: u64) -> Result<u64, idem_tools::Error> { Ok(cents) }
/// #[idem_tools::idempotent(name = "charge")]
/// async fn charge_card(cents: u64) -> Result<u64, idem_tools::Error> { Ok(cents) }
/// const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![charge, charge_card];
/// ```
#[macro_export]
macro_rules! tools {
    ($($tool:tt)*) => {
        $crate::__private::tools_impl!($crate; $($tool)*)
    };
}
