//! The call's key on HTTP requests: `Idempotency-Key` from inside a tool, with `reqwest` (the
//! `reqwest` feature).
//!
//! idem cannot close one window alone: a process that dies after the downstream system did the
//! work and before the result was recorded. Once the lease ends, a retry runs the tool again.
//! An API that deduplicates on a key (payment APIs do, on an `Idempotency-Key` header) closes
//! it, if the retry sends the key the first attempt sent. [`IdempotencyKey`] does that for
//! every request a tool makes through the client, with one line where the client is built:
//!
//! ```no_run
//! use idem_tools::{Turn, http::IdempotencyKey, idempotent};
//! use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
//!
//! #[idempotent(skip(http))]
//! async fn refund(http: ClientWithMiddleware, charge: String) -> anyhow::Result<String> {
//!     // Sent with `Idempotency-Key: <this call's key>`: a retry after a crash sends the same.
//!     let response = http
//!         .post("https://payments.example/v1/refunds")
//!         .body(format!("charge={charge}"))
//!         .send()
//!         .await?
//!         .error_for_status()?;
//!     Ok(response.text().await?)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
//! let http = ClientBuilder::new(reqwest::Client::new()).with(IdempotencyKey).build();
//! Turn::new("conv-1/turn-2")
//!     .scope(refund(http, "ch_42".into()))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! **The value** is the key's 64 lowercase hex digits ([`Key::to_hex`](crate::Key::to_hex);
//! the key is derived as `docs/key-spec.md` specifies), sent as a bare token, the form payment
//! APIs document (the IETF draft's structured-field form would quote it). It is the same in
//! every process, so the retry of a call killed midway reaches the API with the header of the
//! first attempt, and the API answers with the response it stored instead of doing the work
//! again.
//!
//! **Which requests.** Every request the client sends from inside an `#[idempotent]` tool (the
//! key of the innermost one), whatever its method; a request outside a tool goes out untouched.
//! The key is found where [`current_key`] finds it, in the task that runs
//! the tool: a request sent from a plain `tokio::spawn` inside the tool has none (use
//! [`idem_tools::spawn`](crate::spawn)). A request that already has an `Idempotency-Key`
//! header keeps it: the caller's choice wins.
//!
//! **A tool that sends several requests** sends one key on each. That suits a tool that makes
//! one deduplicated request and reads around it. An API that compares a repeated key's request
//! with the first one (Stripe does, and refuses a key reused with other parameters) needs a key
//! per request: set the header yourself, from the call's key and a fixed suffix per request, and
//! the middleware leaves it alone. The suffix must be the same in every attempt:
//!
//! ```no_run
//! # use anyhow::Context as _;
//! # use idem_tools::http::IDEMPOTENCY_KEY;
//! # async fn body(http: reqwest_middleware::ClientWithMiddleware, customers: &str, charges: &str) -> anyhow::Result<()> {
//! let key = idem_tools::current_key().context("not inside a tool")?;
//! http.post(customers).header(IDEMPOTENCY_KEY, format!("{key}-customer")).send().await?;
//! http.post(charges).header(IDEMPOTENCY_KEY, format!("{key}-charge")).send().await?;
//! # Ok(()) }
//! ```
//!
//! (`Display` of a [`Key`](crate::Key) is its hex digits; 64 + 1 + the suffix's length must fit
//! the API's limit, 255 characters at Stripe.)

use idem_tools_runtime::current_key;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

/// The `Idempotency-Key` request header (HTTP header names are case-insensitive; `http` spells
/// them in lowercase).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// A [`reqwest_middleware::Middleware`] that sends `Idempotency-Key: <the call's key>` on the
/// requests made inside an `#[idempotent]` tool (see [the module](self)).
///
/// Inside a tool, it adds the header with the key's 64 hex digits unless the request already
/// has one; outside a tool, it leaves the request as it is. Add it where the client is built:
///
/// ```no_run
/// let http = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(idem_tools::http::IdempotencyKey)
///     .build();
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct IdempotencyKey;

#[async_trait::async_trait]
impl Middleware for IdempotencyKey {
    async fn handle(
        &self,
        mut request: Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        if let Some(key) = current_key()
            && !request.headers().contains_key(IDEMPOTENCY_KEY)
        {
            // 64 hex digits are always a valid header value.
            if let Ok(value) = HeaderValue::from_str(&key.to_hex()) {
                request.headers_mut().insert(IDEMPOTENCY_KEY, value);
            }
        }
        next.run(request, extensions).await
    }
}
