//! Two tools never share keys: a method is named after its type under `#[tool_impl]`, and two
//! different tools that reach the engine under one name are refused at run time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_tools::{Error, MemoryStore, ToolInfo, Turn, idempotent, tool_impl};

/// An agent framework's tool trait: one type per tool.
trait Tool {
    async fn call(&self, customer: String) -> Result<String, Error>;
}

static INVOICES: AtomicUsize = AtomicUsize::new(0);
static DELETIONS: AtomicUsize = AtomicUsize::new(0);

struct CreateInvoice;

#[tool_impl]
impl Tool for CreateInvoice {
    #[idempotent]
    async fn call(&self, customer: String) -> Result<String, Error> {
        INVOICES.fetch_add(1, Ordering::SeqCst);
        Ok(format!("invoice created for {customer}"))
    }
}

struct DeleteAccount;

#[tool_impl]
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
    assert_eq!(CreateInvoice::call__needs_idem.name, "CreateInvoice::call");
    assert_eq!(DeleteAccount::call__needs_idem.name, "DeleteAccount::call");
}

/// Two inherent `send` methods, one per type, and a generic type.
struct Server;
struct SmsGateway;
struct Wrapper<T>(T);

#[tool_impl]
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

#[tool_impl]
impl SmsGateway {
    #[idempotent]
    pub async fn send(&self, to: String) -> Result<String, Error> {
        Ok(format!("sms to {to}"))
    }
}

#[tool_impl]
impl<T: Sync> Tool for Wrapper<T> {
    #[idempotent]
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
            "CreateInvoice::call",
            "DeleteAccount::call",
            "Server::send",
            "Server::restart",
            "broadcast",
            "SmsGateway::send",
            "Wrapper::call",
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
    Turn::new("identity-3")
        .with_store(Arc::new(MemoryStore::new()))
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
