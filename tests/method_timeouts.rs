//! The shape of a first real agent: `charge_card` is a `&self` method of `Billing { client }`
//! that forwards `current_key()` to the payment provider, and the transport gives each send
//! 50 ms and sends up to three times. The provider charges at once but answers slowly (a lost
//! response). A `Clone` receiver runs the tool detached, on a clone: the charge is made once,
//! the retries get its receipt, and no key is left interrupted; on the memory store and on
//! SQLite. Run without `Clone` (attached), the same program leaves the key interrupted.
#![deny(deprecated)] // the detached tools here must not warn

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_tools::{Error, MemoryStore, Store, Turn, current_key, idempotent, tool_impl};

/// How long the transport waits for an answer, and how often it sends.
const TRANSPORT_TIMEOUT: Duration = Duration::from_millis(50);
const SENDS: usize = 3;
/// How long the provider's answer takes: more than two sends' timeouts, less than three.
const PROVIDER_LATENCY: Duration = Duration::from_millis(120);

/// The payment provider: it records each charge with its idempotency key at once, and answers
/// after [`PROVIDER_LATENCY`].
#[derive(Default)]
struct PaymentClient {
    charges: Mutex<Vec<String>>,
}

impl PaymentClient {
    async fn charge(&self, idempotency_key: String, cents: u64) -> u64 {
        let id = {
            let mut charges = self.charges.lock().unwrap();
            charges.push(format!("{idempotency_key}:{cents}"));
            charges.len() as u64
        };
        tokio::time::sleep(PROVIDER_LATENCY).await;
        id
    }

    fn charges(&self) -> Vec<String> {
        self.charges.lock().unwrap().clone()
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Receipt {
    charge: u64,
    cents: u64,
}

/// The tool's work: the charge, with the call's idempotency key forwarded to the provider.
async fn charge_forwarding_the_key(client: &PaymentClient, cents: u64) -> Result<Receipt, Error> {
    let key = current_key().ok_or_else(|| Error::Config("not in a tool".into()))?;
    let charge = client.charge(key.to_string(), cents).await;
    Ok(Receipt { charge, cents })
}

/// The natural layout: a struct holding a client, cheap to clone.
#[derive(Clone)]
struct Billing {
    client: Arc<PaymentClient>,
}

#[tool_impl(same_service)]
impl Billing {
    #[idempotent]
    pub async fn charge_card(&self, customer: String, cents: u64) -> Result<Receipt, Error> {
        let _ = customer;
        charge_forwarding_the_key(&self.client, cents).await
    }
}

/// The same, marked `attached`: how every `&self` tool ran before.
#[derive(Clone)]
struct AttachedBilling {
    client: Arc<PaymentClient>,
}

#[tool_impl(same_service)]
impl AttachedBilling {
    #[idempotent(attached)]
    pub async fn charge_card(&self, customer: String, cents: u64) -> Result<Receipt, Error> {
        let _ = customer;
        charge_forwarding_the_key(&self.client, cents).await
    }
}

/// Not `Clone`: it runs attached too, and says so with a warning (allowed here).
struct UnclonableBilling {
    client: Arc<PaymentClient>,
}

#[tool_impl(same_service)]
impl UnclonableBilling {
    #[allow(deprecated)]
    #[idempotent]
    pub async fn charge_card(&self, customer: String, cents: u64) -> Result<Receipt, Error> {
        let _ = customer;
        charge_forwarding_the_key(&self.client, cents).await
    }
}

/// What each send of the transport got: `None` for a timeout.
type Sends = Vec<Option<Result<Receipt, Error>>>;

/// The transport: up to [`SENDS`] sends of one tool call, each given [`TRANSPORT_TIMEOUT`],
/// until one answers.
async fn transport<F, Fut>(call: F) -> Sends
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Receipt, Error>>,
{
    let mut sends = Vec::new();
    for _ in 0..SENDS {
        let answer = tokio::time::timeout(TRANSPORT_TIMEOUT, call()).await.ok();
        let answered = answer.is_some();
        sends.push(answer);
        if answered {
            break;
        }
    }
    sends
}

/// The records of `store`, rendered (`Ok(…)`, `Interrupted { … }`).
async fn records(store: &dyn Store) -> Vec<String> {
    let records = store.list(None, 10).await.unwrap();
    records
        .iter()
        .map(|r| {
            idem_tools_runtime::replay::render(r.result.as_deref().unwrap_or_default()).unwrap()
        })
        .collect()
}

/// The program on `store`: one charge, the retries get its receipt, the key is
/// completed.
async fn one_charge_and_no_interrupted_key(store: Arc<dyn Store>, turn: &str) {
    let client = Arc::new(PaymentClient::default());
    let billing = Billing {
        client: Arc::clone(&client),
    };
    let sends = Turn::new(turn)
        .with_store(Arc::clone(&store))
        .scope(transport(|| billing.charge_card("cus_42".into(), 500)))
        .await;
    assert!(sends[0].is_none(), "the first send timed out: {sends:?}");
    let Some(Some(Ok(receipt))) = sends.last() else {
        panic!("a retry got the receipt: {sends:?}");
    };
    assert_eq!(
        *receipt,
        Receipt {
            charge: 1,
            cents: 500
        }
    );
    let charges = client.charges();
    assert_eq!(charges.len(), 1, "charged once: {charges:?}");
    let records = records(&*store).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records[0].starts_with("Ok("), "completed: {records:?}");
}

#[tokio::test]
async fn a_timed_out_clone_receiver_tool_charges_once_on_the_memory_store() {
    one_charge_and_no_interrupted_key(Arc::new(MemoryStore::new()), "timeouts/memory").await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_timed_out_clone_receiver_tool_charges_once_on_sqlite() {
    let path = std::env::temp_dir().join(format!("idem-method-timeouts-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let store = idem_tools::SqliteStore::open(&path).unwrap();
    one_charge_and_no_interrupted_key(Arc::new(store), "timeouts/sqlite").await;
    let _ = std::fs::remove_file(&path);
}

/// What an attached `&self` tool does in the same program: the charge is made, the key is
/// kept as interrupted, and every retry is refused.
async fn the_retries_are_refused<F, Fut>(client: &PaymentClient, call: F, turn: &str)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Receipt, Error>>,
{
    let store = Arc::new(MemoryStore::new());
    let sends = Turn::new(turn)
        .with_store(store.clone())
        .scope(transport(call))
        .await;
    assert!(sends[0].is_none(), "{sends:?}");
    for send in &sends[1..] {
        assert!(
            matches!(send, Some(Err(Error::Interrupted { .. }))),
            "refused: {sends:?}"
        );
    }
    assert_eq!(client.charges().len(), 1);
    let records = records(&*store).await;
    assert!(records[0].starts_with("Interrupted"), "{records:?}");
}

#[tokio::test]
async fn the_same_program_attached_leaves_the_key_interrupted() {
    let client = Arc::new(PaymentClient::default());
    let billing = AttachedBilling {
        client: Arc::clone(&client),
    };
    let call = || billing.charge_card("cus_42".into(), 500);
    the_retries_are_refused(&client, call, "timeouts/attached").await;
}

#[tokio::test]
async fn a_receiver_that_is_not_clone_runs_attached() {
    let client = Arc::new(PaymentClient::default());
    let billing = UnclonableBilling {
        client: Arc::clone(&client),
    };
    let call = || billing.charge_card("cus_42".into(), 500);
    the_retries_are_refused(&client, call, "timeouts/unclonable").await;
}
