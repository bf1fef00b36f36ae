//! The generated code needs nothing in scope: no prelude, no imports. It is also clean under
//! `#![deny(warnings)]` and, in the clippy CI step (`--all-targets`), `clippy::pedantic` and the
//! shadowing lints (a tool that returns its future binds its parameters again in its body).
#![no_implicit_prelude]
#![deny(
    warnings,
    clippy::pedantic,
    clippy::shadow_same,
    clippy::shadow_reuse,
    clippy::shadow_unrelated,
    clippy::redundant_locals
)]

/// A tool with every kind of parameter and option, in a module without a prelude.
mod tools {
    /// Not `Serialize`: skipped.
    pub struct Client;

    #[::idem_tools::idempotent(
        name = "hygienic_send",
        version = 3,
        ttl = "90s",
        budget = 4,
        skip(client, note)
    )]
    pub async fn send(
        client: &Client,
        to: ::std::string::String,
        #[key] request_id: &str,
        (a, b): (u32, u32),
        note: u64,
    ) -> ::std::result::Result<u64, ::idem_tools::Error> {
        let _ = (client, to, request_id, note);
        ::std::result::Result::Ok(::std::convert::From::from(a + b))
    }

    /// A cached error type.
    #[derive(::serde::Serialize, ::serde::Deserialize, Debug)]
    pub struct Failure(pub ::std::string::String);

    impl ::std::convert::From<::idem_tools::Error> for Failure {
        fn from(error: ::idem_tools::Error) -> Self {
            Failure(::std::string::ToString::to_string(&error))
        }
    }

    #[::idem_tools::idempotent(cache_errors, store = crate::tools::STORE)]
    pub async fn with_turn(
        turn: &::idem_tools::Turn,
        n: u32,
    ) -> ::std::result::Result<u32, Failure> {
        let _ = turn;
        ::std::result::Result::Ok(n)
    }

    /// Detached, owned arguments: returns its call's future. `_`-prefixed parameters in the key
    /// and skipped, unused by the body (reading them for the key is not the user's use of an
    /// `_` binding), and a `mut` one changed by it.
    #[::idem_tools::idempotent(skip(_trace))]
    pub async fn append(
        mut text: ::std::string::String,
        _origin: u32,
        _trace: u64,
        #[key] request: ::std::string::String,
    ) -> ::std::result::Result<::std::string::String, ::idem_tools::Error> {
        let _ = request;
        text.push('!');
        ::std::result::Result::Ok(text)
    }

    pub static STORE: ::std::sync::LazyLock<::std::sync::Arc<::idem_tools::MemoryStore>> =
        ::std::sync::LazyLock::new(|| ::std::sync::Arc::new(::idem_tools::MemoryStore::new()));

    #[::idem_tools::read_only]
    pub fn search(query: &str) -> usize {
        query.len()
    }

    /// `Clone`: its `&self` tool runs detached, on a clone.
    #[derive(::std::clone::Clone)]
    pub struct Mailer;

    #[::idem_tools::tool_impl(same_service)]
    impl Mailer {
        #[::idem_tools::idempotent]
        pub async fn deliver(&self, to: u32) -> ::std::result::Result<u32, ::idem_tools::Error> {
            ::std::result::Result::Ok(to)
        }
    }

    /// Visibility-less methods, listed through `#[tool_impl]`.
    pub struct Server(pub u32);

    #[::idem_tools::tool_impl(same_service)]
    impl Server {
        #[::idem_tools::idempotent(budget = 2, attached)]
        async fn open(&self, id: u32) -> ::std::result::Result<u32, ::idem_tools::Error> {
            ::std::result::Result::Ok(id + self.0)
        }

        #[::idem_tools::read_only]
        fn peek(&self) -> u32 {
            self.0
        }

        /// Calls both tools.
        pub async fn open_and_peek(
            &self,
            id: u32,
        ) -> ::std::result::Result<u32, ::idem_tools::Error> {
            ::std::result::Result::Ok(self.open(id).await? + self.peek())
        }
    }
}

const TOOLS: &[::idem_tools::ToolInfo] =
    ::idem_tools::tools![tools::send, tools::search, tools::Mailer::deliver];

const SERVER_TOOLS: &[::idem_tools::ToolInfo] =
    ::idem_tools::tools![tools::Server::open, tools::Server::peek];

#[test]
fn generated_code_compiles_without_a_prelude() {
    use ::std::{assert_eq, clone::Clone, convert::Into};
    let runtime = ::tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let turn = ::idem_tools::Turn::new("hygiene");
    let sum = runtime.block_on(
        turn.clone()
            .scope(async { tools::send(&tools::Client, "ada".into(), "req-1", (1, 2), 0).await }),
    );
    assert_eq!(sum.unwrap(), 3);
    assert_eq!(runtime.block_on(tools::with_turn(&turn, 5)).unwrap(), 5);
    let appended =
        runtime.block_on(
            turn.clone()
                .scope(tools::append("hi".into(), 1, 2, "req-2".into())),
        );
    assert_eq!(appended.unwrap(), "hi!");
    assert_eq!(tools::STORE.len(), 1);
    assert_eq!(TOOLS.len(), 3);
    assert_eq!(TOOLS[0].name, "hygienic_send");
    assert_eq!(TOOLS[0].version, 3);
    assert_eq!(TOOLS[0].budget, ::std::option::Option::Some(4));
    assert_eq!(
        TOOLS[0].ttl,
        ::std::option::Option::Some(::std::time::Duration::from_secs(90))
    );
    assert_eq!(tools::search("abc"), 3);
    let _ = runtime.block_on(::idem_tools::Turn::new("h2").scope(tools::Mailer.deliver(1)));
    assert_eq!(SERVER_TOOLS[0].budget, ::std::option::Option::Some(2));
    assert_eq!(SERVER_TOOLS[1].kind, ::idem_tools::ToolKind::ReadOnly);
    let opened =
        runtime.block_on(::idem_tools::Turn::new("h3").scope(tools::Server(1).open_and_peek(2)));
    assert_eq!(opened.unwrap(), 4);
}
