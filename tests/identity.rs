//! Two tools never share keys: a method is named after its type under `#[tool_impl]`, two
//! different tools that reach the engine under one name are refused at run time, and a
//! receiver that carries an identity puts it in the key with `self_key`. Every name is one a
//! model API accepts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use idem_tools::{Error, MemoryStore, ToolInfo, Turn, idempotent, tool_impl};

/// An agent framework's tool trait: one type per tool.
trait Tool {
    async fn call(&self, customer: String) -> Result<String, Error>;
}

static INVOICES: AtomicUsize = AtomicUsize::new(0);
static DELETIONS: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone)]
struct CreateInvoice;

#[tool_impl(same_service)]
impl Tool for CreateInvoice {
    #[idempotent]
    async fn call(&self, customer: String) -> Result<String, Error> {
        INVOICES.fetch_add(1, Ordering::SeqCst);
        Ok(format!("invoice created for {customer}"))
    }
}

#[derive(Clone)]
struct DeleteAccount;

#[tool_impl(same_service)]
impl Tool for DeleteAccount {
    #[idempotent]
    async fn call(&self, customer: String) -> Result<String, Error> {
        DELETIONS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("account {customer} deleted"))
    }
}

#[tokio::test]
async fn two_trait_impls_of_one_method_do_not_share_keys() {
    Turn::new("identity-1")
        .with_store(Arc::new(MemoryStore::new()))
        .scope(async {
            let invoice = CreateInvoice.call("cus_42".into()).await.unwrap();
            let deleted = DeleteAccount.call("cus_42".into()).await.unwrap();
            assert_eq!(invoice, "invoice created for cus_42");
            assert_eq!(deleted, "account cus_42 deleted");
        })
        .await;
    assert_eq!(INVOICES.load(Ordering::SeqCst), 1);
    assert_eq!(DELETIONS.load(Ordering::SeqCst), 1);
    assert_eq!(
        CreateInvoice::call__needs_idempotent_or_read_only.name,
        "CreateInvoice__call"
    );
    assert_eq!(
        DeleteAccount::call__needs_idempotent_or_read_only.name,
        "DeleteAccount__call"
    );
}

/// Two inherent `send` methods, one per type, and a generic type.
#[derive(Clone)]
struct Server;
#[derive(Clone)]
struct SmsGateway;
struct Wrapper<T>(T);

#[tool_impl(same_service)]
impl Server {
    #[idempotent]
    pub async fn send(&self, to: String) -> Result<String, Error> {
        Ok(format!("mail to {to}"))
    }

    /// An associated function (no receiver) is named after the type too.
    #[idempotent]
    pub async fn restart(region: String) -> Result<String, Error> {
        Ok(format!("restarted {region}"))
    }

    /// `name` always wins.
    #[idempotent(name = "broadcast")]
    async fn broadcast(&self, text: String) -> Result<String, Error> {
        Ok(text)
    }
}

#[tool_impl(same_service)]
impl SmsGateway {
    #[idempotent]
    pub async fn send(&self, to: String) -> Result<String, Error> {
        Ok(format!("sms to {to}"))
    }
}

#[tool_impl(self_key = "Wrapper")] // every `T` is one service, said so
impl<T: Sync> Tool for Wrapper<T> {
    #[idempotent(attached)] // a generic impl: attached, said so
    async fn call(&self, customer: String) -> Result<String, Error> {
        let _ = &self.0;
        Ok(customer)
    }
}

const TOOLS: &[ToolInfo] = idem_tools::tools![
    CreateInvoice::call,
    DeleteAccount::call,
    Server::send,
    Server::restart,
    Server::broadcast,
    SmsGateway::send,
    Wrapper::<u8>::call,
];

#[tokio::test]
async fn inherent_methods_are_named_after_their_type() {
    let names: Vec<_> = TOOLS.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "CreateInvoice__call",
            "DeleteAccount__call",
            "Server__send",
            "Server__restart",
            "broadcast",
            "SmsGateway__send",
            "Wrapper__call",
        ]
    );
    Turn::new("identity-2")
        .with_store(Arc::new(MemoryStore::new()))
        .scope(async {
            assert_eq!(Server.send("ada".into()).await.unwrap(), "mail to ada");
            assert_eq!(SmsGateway.send("ada".into()).await.unwrap(), "sms to ada");
            assert_eq!(Server::restart("eu".into()).await.unwrap(), "restarted eu");
            assert_eq!(Server.broadcast("hi".into()).await.unwrap(), "hi");
            assert_eq!(Wrapper(1_u8).call("x".into()).await.unwrap(), "x");
        })
        .await;
}

/// Two hand-written tools with one `name`: the same keys, so the second one to run is refused.
mod clash {
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub static FIRST_RUNS: AtomicUsize = AtomicUsize::new(0);
    pub static SECOND_RUNS: AtomicUsize = AtomicUsize::new(0);

    #[idem_tools::idempotent(name = "clashing_tool")]
    pub async fn first(n: u32) -> Result<u32, idem_tools::Error> {
        FIRST_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(n)
    }

    #[idem_tools::idempotent(name = "clashing_tool")]
    pub async fn second(n: u32) -> Result<u32, idem_tools::Error> {
        SECOND_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(n + 1000)
    }

    /// Same name, another version: other keys, so not a clash.
    #[idem_tools::idempotent(name = "clashing_tool", version = 2)]
    pub async fn second_v2(n: u32) -> Result<u32, idem_tools::Error> {
        Ok(n + 2000)
    }
}

#[tokio::test]
async fn two_tools_with_one_name_are_refused_at_run_time() {
    let turn = Turn::new("identity-3").with_store(Arc::new(MemoryStore::new()));
    turn.clone()
        .scope(async {
            assert_eq!(clash::first(1).await.unwrap(), 1);
            for _ in 0..2 {
                let error = clash::second(1).await.unwrap_err();
                assert!(
                    matches!(
                        error,
                        Error::DuplicateTool {
                            name: "clashing_tool"
                        }
                    ),
                    "{error}"
                );
                assert!(error.to_string().contains("name = "), "{error}");
            }
            // The first one keeps working, and another version is another tool.
            assert_eq!(clash::first(2).await.unwrap(), 2);
            assert_eq!(clash::second_v2(1).await.unwrap(), 2001);
        })
        .await;
    assert_eq!(clash::FIRST_RUNS.load(Ordering::SeqCst), 2);
    assert_eq!(clash::SECOND_RUNS.load(Ordering::SeqCst), 0);
    // Each refusal is one outcome of the turn it was made in.
    let stats = turn.stats();
    assert_eq!((stats.executed, stats.config_error), (3, 2), "{stats:?}");
}

/// A static in a generic function is shared by its instantiations: one tool, not a clash.
#[idempotent]
async fn generic_tool<T: serde::Serialize + Send>(value: T) -> Result<u32, Error> {
    let _ = value;
    Ok(1)
}

#[tokio::test]
async fn instantiations_of_a_generic_tool_are_one_tool() {
    Turn::new("identity-4")
        .with_store(Arc::new(MemoryStore::new()))
        .scope(async {
            assert_eq!(generic_tool(1_u8).await.unwrap(), 1);
            assert_eq!(generic_tool("x".to_owned()).await.unwrap(), 1);
            assert_eq!(generic_tool(vec![1_u64]).await.unwrap(), 1);
        })
        .await;
}

// ---------------------------------------------------------------------------------------------
// Names a model API accepts: every naming rule gives a name matching `^[a-zA-Z0-9_-]{1,64}$`
// (OpenAI's and Anthropic's pattern), and keeps the Rust item's name in `item`.

/// `^[a-zA-Z0-9_-]{1,64}$`.
fn valid_for_model_apis(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Tools listed for their names only.
#[allow(dead_code)]
mod naming {
    use idem_tools::{Error, idempotent, read_only, tool_impl};

    /// A free function.
    #[idempotent]
    pub async fn send_email(to: String) -> Result<String, Error> {
        Ok(to)
    }

    /// A raw identifier: named without `r#`.
    #[idempotent]
    pub async fn r#type(text: String) -> Result<String, Error> {
        Ok(text)
    }

    /// A read-only function.
    #[read_only]
    pub fn search_docs(query: &str) -> usize {
        query.len()
    }

    /// An explicit name, on both kinds.
    #[idempotent(name = "billing-refund_v2")]
    pub async fn refund(cents: u64) -> Result<u64, Error> {
        Ok(cents)
    }

    #[read_only(name = "lookup")]
    pub fn find(query: &str) -> usize {
        query.len()
    }

    #[derive(Clone)]
    pub struct Billing;

    #[tool_impl(same_service)]
    impl Billing {
        /// A method, an associated function and a read-only method.
        #[idempotent]
        pub async fn charge_card(&self, cents: u64) -> Result<u64, Error> {
            Ok(cents)
        }

        #[idempotent]
        pub async fn r#match(cents: u64) -> Result<u64, Error> {
            Ok(cents)
        }

        #[read_only]
        pub fn balance(&self) -> u64 {
            0
        }
    }

    pub trait Tool {
        async fn call(&self, input: String) -> Result<String, Error>;
    }

    /// A trait impl of a generic type: named without its arguments.
    pub struct Wrapper<T>(pub T);

    #[tool_impl(self_key = "Wrapper")]
    impl<T: Sync> Tool for Wrapper<T> {
        #[idempotent(attached)]
        async fn call(&self, input: String) -> Result<String, Error> {
            Ok(input)
        }
    }

    /// A raw type name.
    #[derive(Clone)]
    #[allow(non_camel_case_types)]
    pub struct r#async;

    #[tool_impl(same_service)]
    impl r#async {
        #[idempotent]
        pub async fn run(&self, input: String) -> Result<String, Error> {
            Ok(input)
        }
    }
}

const NAMED: &[ToolInfo] = idem_tools::tools![
    naming::send_email,
    naming::r#type,
    naming::search_docs,
    naming::refund,
    naming::find,
    naming::Billing::charge_card,
    naming::Billing::r#match,
    naming::Billing::balance,
    naming::Wrapper::<u8>::call,
    naming::r#async::run,
];

#[test]
fn every_naming_rule_gives_a_name_model_apis_accept() {
    let names: Vec<(&str, &str)> = NAMED.iter().map(|t| (t.name, t.item)).collect();
    assert_eq!(
        names,
        [
            ("send_email", "send_email"),
            ("type", "type"),
            ("search_docs", "search_docs"),
            ("billing-refund_v2", "refund"),
            ("lookup", "find"),
            ("Billing__charge_card", "charge_card"),
            ("Billing__match", "match"),
            ("Billing__balance", "balance"),
            ("Wrapper__call", "call"),
            ("async__run", "run"),
        ]
    );
    for tool in NAMED.iter().chain(TOOLS) {
        assert!(valid_for_model_apis(tool.name), "{}", tool.name);
    }
    // What the checker rejects, so that the loop above can fail.
    for bad in [
        "Billing::charge_card",
        "",
        "send email",
        "envoyer_réponse",
        &"x".repeat(65),
    ] {
        assert!(!valid_for_model_apis(bad), "{bad}");
    }
}

// ---------------------------------------------------------------------------------------------
// The receiver in the key: a method with `self` says what of it identifies the action,
// `self_key = …` (in the key) or `same_service` (nothing: every instance is one service), on
// itself or once on its `#[tool_impl]` block; saying neither does not compile
// (tests/ui/receiver_identity.rs).

/// What the outside world saw: (sender, recipient) of every message sent.
static OUTBOX: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// A receiver that carries an identity: the sender.
#[derive(Clone)]
struct Mailer {
    from: String,
}

#[tool_impl]
impl Mailer {
    #[idempotent(self_key = self.from)]
    pub async fn send(&self, to: String, text: String) -> Result<String, Error> {
        let _ = text;
        let mut outbox = OUTBOX.lock().unwrap();
        outbox.push((self.from.clone(), to.clone()));
        Ok(format!(
            "message {} from {} to {to}",
            outbox.len(),
            self.from
        ))
    }
}

/// The same shape, once for the block: `#[tool_impl(self_key = …)]`.
#[derive(Clone)]
struct BlockMailer {
    from: String,
}

#[tool_impl(self_key = self.from)]
impl BlockMailer {
    #[idempotent]
    pub async fn send(&self, to: String, text: String) -> Result<String, Error> {
        let _ = text;
        let mut outbox = OUTBOX.lock().unwrap();
        outbox.push((format!("block {}", self.from), to.clone()));
        Ok(format!(
            "message {} from {} to {to}",
            outbox.len(),
            self.from
        ))
    }
}

/// The same shape, wrongly said to be one service: the sender is not in the key, so two
/// senders are one action (what every method with `self` did before it had to say).
#[derive(Clone)]
struct CarelessMailer {
    from: String,
}

#[tool_impl(same_service)]
impl CarelessMailer {
    #[idempotent]
    pub async fn send(&self, to: String, text: String) -> Result<String, Error> {
        let _ = text;
        let mut outbox = OUTBOX.lock().unwrap();
        outbox.push((format!("careless {}", self.from), to.clone()));
        Ok(format!(
            "message {} from {} to {to}",
            outbox.len(),
            self.from
        ))
    }
}

/// A receiver that is a handle (an HTTP client, a pool): two instances are one sender, so
/// sharing keys is right.
#[derive(Clone)]
struct SmsClient {
    sent: Arc<AtomicUsize>,
}

#[tool_impl(same_service)]
impl SmsClient {
    #[idempotent]
    pub async fn send(&self, to: String) -> Result<usize, Error> {
        let _ = to;
        Ok(self.sent.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

/// A block generic over its currency: the type parameter, not a field, tells two refunders
/// apart, so it goes into the key (`same_service` here does not compile:
/// tests/ui/generic_same_service.rs).
trait Currency: Clone + Send + Sync + 'static {
    const CODE: &'static str;
}

#[derive(Clone)]
struct Usd;
#[derive(Clone)]
struct Eur;

impl Currency for Usd {
    const CODE: &'static str = "USD";
}

impl Currency for Eur {
    const CODE: &'static str = "EUR";
}

#[derive(Clone)]
struct Refunder<C>(std::marker::PhantomData<C>);

#[tool_impl(self_key = C::CODE)]
impl<C: Currency> Refunder<C> {
    #[idempotent(attached)]
    pub async fn refund(&self, order: u64) -> Result<String, Error> {
        let mut outbox = OUTBOX.lock().unwrap();
        outbox.push((format!("refund {}", C::CODE), order.to_string()));
        Ok(format!("refunded order {order} in {}", C::CODE))
    }
}

fn outbox_of(sender: &str) -> Vec<String> {
    let outbox = OUTBOX.lock().unwrap();
    outbox
        .iter()
        .filter(|(from, _)| from == sender)
        .map(|(_, to)| to.clone())
        .collect()
}

/// alice, then carol, then alice again send `send`'s message in one turn, each on an instance
/// of her own: the three receipts, and how many records the turn's store then holds.
async fn alice_carol_alice<F, Fut>(turn: &str, send: F) -> ([String; 3], usize)
where
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = Result<String, Error>>,
{
    let store = Arc::new(MemoryStore::new());
    let receipts = Turn::new(turn)
        .with_store(store.clone())
        .scope(async {
            let mut receipts = Vec::new();
            for from in ["alice", "carol", "alice"] {
                receipts.push(send(from).await.unwrap());
            }
            receipts
        })
        .await;
    (receipts.try_into().unwrap(), store.len())
}

#[tokio::test]
async fn self_key_puts_the_receivers_identity_in_the_key() {
    let ([a, c, retry], records) = alice_carol_alice("identity-self-key", |from| {
        let mailer = Mailer { from: from.into() };
        async move { mailer.send("dave".into(), "hi".into()).await }
    })
    .await;
    assert!(a.ends_with("from alice to dave"), "{a}");
    assert!(c.ends_with("from carol to dave"), "{c}");
    assert_eq!(retry, a, "alice's retry is a replay of her own");
    assert_eq!(outbox_of("alice"), ["dave"]);
    assert_eq!(outbox_of("carol"), ["dave"]);
    assert_eq!(records, 2);
}

#[tokio::test]
async fn a_block_self_key_puts_the_receivers_identity_in_the_key() {
    let ([a, c, retry], records) = alice_carol_alice("identity-block-self-key", |from| {
        let mailer = BlockMailer { from: from.into() };
        async move { mailer.send("frank".into(), "hi".into()).await }
    })
    .await;
    assert!(
        c.ends_with("from carol to frank"),
        "two senders, two actions: {c}"
    );
    assert_eq!(retry, a);
    assert_eq!(outbox_of("block alice"), ["frank"]);
    assert_eq!(outbox_of("block carol"), ["frank"]);
    assert_eq!(records, 2);
}

#[tokio::test]
async fn same_service_makes_two_receivers_one_action() {
    let ([a, c, _], records) = alice_carol_alice("identity-same-service", |from| {
        let mailer = CarelessMailer { from: from.into() };
        async move { mailer.send("erin".into(), "hi".into()).await }
    })
    .await;
    assert_eq!(c, a, "carol got alice's receipt");
    assert_eq!(outbox_of("careless alice"), ["erin"]);
    assert!(outbox_of("careless carol").is_empty());
    assert_eq!(records, 1);
}

#[tokio::test]
async fn a_generic_block_keys_its_type_parameter() {
    let store = Arc::new(MemoryStore::new());
    let [usd, eur, again] = Turn::new("identity-generic-block")
        .with_store(store.clone())
        .scope(async {
            let usd = Refunder::<Usd>(std::marker::PhantomData);
            let eur = Refunder::<Eur>(std::marker::PhantomData);
            [
                usd.refund(42).await.unwrap(),
                eur.refund(42).await.unwrap(),
                usd.refund(42).await.unwrap(),
            ]
        })
        .await;
    assert_eq!(
        eur, "refunded order 42 in EUR",
        "not the dollar refund's receipt"
    );
    assert_eq!(again, usd, "the dollar refund's retry is a replay");
    assert_eq!(outbox_of("refund USD"), ["42"]);
    assert_eq!(outbox_of("refund EUR"), ["42"]);
    assert_eq!(store.len(), 2);
}

#[tokio::test]
async fn a_client_handle_receiver_shares_keys_across_instances() {
    let sent = Arc::new(AtomicUsize::new(0));
    let first = SmsClient {
        sent: Arc::clone(&sent),
    };
    let second = SmsClient {
        sent: Arc::clone(&sent),
    };
    Turn::new("identity-handle")
        .with_store(Arc::new(MemoryStore::new()))
        .scope(async {
            assert_eq!(first.send("dave".into()).await.unwrap(), 1);
            // Another handle to the same service: the same action, replayed.
            assert_eq!(second.send("dave".into()).await.unwrap(), 1);
        })
        .await;
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

/// A tenant's account: its id is in the fingerprint of each call through `self_key`.
#[derive(Clone)]
struct Tenant {
    id: String,
}

#[tool_impl(self_key = self.id)]
impl Tenant {
    #[idempotent]
    pub async fn refund(&self, #[key] order: String, cents: u64) -> Result<String, Error> {
        Ok(format!("{} refunded {cents} for {order}", self.id))
    }
}

/// A caller-supplied key is the action's identity: the same key on another instance (its
/// `self_key` is in the fingerprint, not the key) is another action, refused — and the
/// refusal says so, to the developer and to the model, rather than "different arguments".
#[tokio::test]
async fn a_caller_key_reused_on_another_instance_is_refused_saying_so() {
    let acme = Tenant { id: "acme".into() };
    let globex = Tenant {
        id: "globex".into(),
    };
    Turn::new("t")
        .with_store(Arc::new(MemoryStore::new()))
        .scope(async {
            let first = acme.refund("order-1".into(), 500).await.unwrap();
            assert_eq!(first, "acme refunded 500 for order-1");
            let again = acme.refund("order-1".into(), 500).await.unwrap();
            assert_eq!(again, first, "a retry replays");
            let error = globex.refund("order-1".into(), 500).await.unwrap_err();
            assert!(matches!(error, Error::PayloadMismatch { .. }), "{error:?}");
            assert!(error.to_string().contains("the same instance"), "{error}");
            assert!(
                error.model_text().contains("another account or object"),
                "{error:?}"
            );
        })
        .await;
}
