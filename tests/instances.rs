//! One tool's code compiled for several types — a trait's default method on each implementing
//! type, a method of a generic `impl` block on each of its parameters — has one `static` slot
//! and one name, so nothing of the type is in its key unless a `self_key` puts it there. A
//! second type's call is refused (`Error::SharedAcrossTypes`) instead of replaying the first
//! type's result — also with a `self_key` of the receiver's identity alone, which two types
//! share, or one computed without `self` (`tenant()`); a `self_key` that names the type
//! (`Self`, or a parameter of the `#[tool_impl]` block) or is a literal (every type one
//! service), and a function generic itself (its instantiations are one tool told apart by
//! their arguments), go on working.
#![allow(clippy::unused_async)]

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_tools::{Error, MemoryStore, Turn, idempotent, tool_impl};

fn turn(id: &str) -> Turn {
    Turn::new(id).with_store(Arc::new(MemoryStore::new()))
}

fn ok(result: &Result<String, Error>) -> Option<&str> {
    result.as_ref().ok().map(String::as_str)
}

fn refused_as_shared(result: &Result<String, Error>) -> bool {
    matches!(result, Err(Error::SharedAcrossTypes { .. }))
}

trait Currency: Send + Sync + 'static {
    const CODE: &'static str;
}

struct Usd;
struct Eur;

impl Currency for Usd {
    const CODE: &'static str = "USD";
}

impl Currency for Eur {
    const CODE: &'static str = "EUR";
}

// A trait's default method without `self`: every implementing type shares its slot and name.
static CHARGES: AtomicUsize = AtomicUsize::new(0);

trait Billing {
    fn provider() -> &'static str;

    #[idempotent]
    async fn charge(cents: u64) -> Result<String, Error> {
        CHARGES.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{} charged {cents}", Self::provider()))
    }
}

struct Stripe;
struct Paypal;

impl Billing for Stripe {
    fn provider() -> &'static str {
        "stripe"
    }
}

impl Billing for Paypal {
    fn provider() -> &'static str {
        "paypal"
    }
}

#[tokio::test]
async fn a_trait_default_method_is_refused_for_a_second_implementing_type() {
    let (stripe, paypal, again) = turn("instances-1")
        .scope(async {
            let stripe = <Stripe as Billing>::charge(500).await;
            let paypal = <Paypal as Billing>::charge(500).await;
            let again = <Stripe as Billing>::charge(500).await;
            (stripe, paypal, again)
        })
        .await;
    assert_eq!(ok(&stripe), Some("stripe charged 500"));
    assert!(
        refused_as_shared(&paypal),
        "not stripe's receipt: {paypal:?}"
    );
    assert_eq!(
        ok(&again),
        Some("stripe charged 500"),
        "the first type keeps it"
    );
    assert_eq!(CHARGES.load(Ordering::SeqCst), 1);
    let message = paypal.unwrap_err().to_string();
    assert!(
        message.contains("Paypal as") && message.contains("Stripe as"),
        "{message}"
    );
}

// The same with a receiver that says every instance is the same service.
static NOTICES: AtomicUsize = AtomicUsize::new(0);

trait Notifier: Sync {
    #[idempotent(name = "notify", same_service, attached)]
    async fn notify(&self, to: String) -> Result<String, Error> {
        NOTICES.fetch_add(1, Ordering::SeqCst);
        Ok(format!("notified {to}"))
    }
}

struct Mail;
struct Sms;

impl Notifier for Mail {}
impl Notifier for Sms {}

#[tokio::test]
async fn a_trait_default_method_with_self_is_refused_for_a_second_type() {
    let (mail, sms) = turn("instances-2")
        .scope(async {
            (
                Mail.notify("ada".into()).await,
                Sms.notify("ada".into()).await,
            )
        })
        .await;
    assert_eq!(ok(&mail), Some("notified ada"));
    assert!(refused_as_shared(&sms), "not mail's receipt: {sms:?}");
    assert_eq!(NOTICES.load(Ordering::SeqCst), 1);
}

// A function without `self` in a generic block, under `#[tool_impl]` and outside it.
static REFUNDS: AtomicUsize = AtomicUsize::new(0);

struct Refund<C>(PhantomData<C>);

#[tool_impl]
impl<C: Currency> Refund<C> {
    #[idempotent]
    pub async fn issue(order: u64, amount: u64) -> Result<String, Error> {
        REFUNDS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("refunded {amount} {} on order {order}", C::CODE))
    }
}

struct Payout<C>(PhantomData<C>);

impl<C: Currency> Payout<C> {
    #[idempotent]
    pub async fn pay_out(order: u64) -> Result<String, Error> {
        Ok(format!("paid out order {order} in {}", C::CODE))
    }
}

#[tokio::test]
async fn a_function_of_a_generic_block_is_refused_for_a_second_parameter() {
    let (usd, eur, out_eur, out_usd) = turn("instances-3")
        .scope(async {
            (
                Refund::<Usd>::issue(7, 100).await,
                Refund::<Eur>::issue(7, 100).await,
                Payout::<Eur>::pay_out(7).await,
                Payout::<Usd>::pay_out(7).await,
            )
        })
        .await;
    assert_eq!(ok(&usd), Some("refunded 100 USD on order 7"));
    assert!(refused_as_shared(&eur), "not the USD receipt: {eur:?}");
    assert_eq!(REFUNDS.load(Ordering::SeqCst), 1);
    assert_eq!(ok(&out_eur), Some("paid out order 7 in EUR"), "{out_eur:?}");
    assert!(refused_as_shared(&out_usd), "{out_usd:?}");
}

// `same_service` on a generic block outside `#[tool_impl]`, which would refuse it at compile
// time: the method cannot see its block's parameters, so the check happens at the call.
struct Reversal<C>(PhantomData<C>);

impl<C: Currency> Reversal<C> {
    #[idempotent(name = "reverse", same_service, attached)]
    pub async fn reverse(&self, order: u64) -> Result<String, Error> {
        Ok(format!("reversed order {order} in {}", C::CODE))
    }
}

#[tokio::test]
async fn same_service_on_a_generic_block_without_tool_impl_is_refused_at_the_call() {
    let (usd, eur) = turn("instances-4")
        .scope(async {
            (
                Reversal::<Usd>(PhantomData).reverse(7).await,
                Reversal::<Eur>(PhantomData).reverse(7).await,
            )
        })
        .await;
    assert_eq!(ok(&usd), Some("reversed order 7 in USD"));
    assert!(refused_as_shared(&eur), "{eur:?}");
}

// What stays allowed: a `self_key` that names the type, and a function generic itself.
#[derive(Clone)]
struct Refunder<C>(PhantomData<C>);

#[tool_impl(self_key = C::CODE)]
impl<C: Currency> Refunder<C> {
    #[idempotent(attached)]
    pub async fn refund(&self, order: u64) -> Result<String, Error> {
        Ok(format!("refunded order {order} in {}", C::CODE))
    }
}

static SENT: AtomicUsize = AtomicUsize::new(0);

#[idempotent]
async fn send<T: serde::Serialize + Send + 'static>(message: T) -> Result<usize, Error> {
    let _ = message;
    Ok(SENT.fetch_add(1, Ordering::SeqCst))
}

#[tokio::test]
async fn a_self_key_that_names_the_type_and_a_generic_function_still_run_per_type() {
    let (usd, eur, text, number) = turn("instances-5")
        .scope(async {
            (
                Refunder::<Usd>(PhantomData).refund(7).await,
                Refunder::<Eur>(PhantomData).refund(7).await,
                send("hello".to_owned()).await,
                send(42_u64).await,
            )
        })
        .await;
    assert_eq!(ok(&usd), Some("refunded order 7 in USD"));
    assert_eq!(ok(&eur), Some("refunded order 7 in EUR"));
    assert_eq!((text.ok(), number.ok()), (Some(0), Some(1)));
}

// A function generic over a type it takes as an argument compiles (the parameter is in the
// key: tests/ui/generic_not_in_key.rs is the one that is not) and is one tool: the same
// argument replays, whatever the instantiation that asks; another argument runs.
static STORED: AtomicUsize = AtomicUsize::new(0);

#[idempotent]
async fn store<T: serde::Serialize + Send + 'static>(items: Vec<T>) -> Result<String, Error> {
    let run = STORED.fetch_add(1, Ordering::SeqCst);
    Ok(format!("stored {} items (run {run})", items.len()))
}

#[tokio::test]
async fn a_generic_function_with_its_parameter_in_an_argument_replays_the_same_argument() {
    let (first, retry, other, words) = turn("instances-generic-replay")
        .scope(async {
            (
                store(vec![1_u8, 2]).await,
                store(vec![1_u8, 2]).await,
                store(vec![3_u8]).await,
                store(vec!["a".to_owned()]).await,
            )
        })
        .await;
    assert_eq!(ok(&first), Some("stored 2 items (run 0)"));
    assert_eq!(ok(&retry), Some("stored 2 items (run 0)"), "replayed");
    assert_eq!(ok(&other), Some("stored 1 items (run 1)"));
    assert_eq!(ok(&words), Some("stored 1 items (run 2)"));
    assert_eq!(STORED.load(Ordering::SeqCst), 3);
}

// A `self_key` of the receiver's identity alone, as the README advises for a receiver that
// carries one, does not tell the types apart: `Account::<Usd>` and `Account::<Eur>` of one
// account share it. Found by a review: any `self_key` turned the check off, and the EUR call
// got the USD receipt, its refund never made.
static ACCOUNT_REFUNDS: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone)]
struct Account<C> {
    id: String,
    currency: PhantomData<C>,
}

impl<C> Account<C> {
    fn new(id: &str) -> Self {
        Account {
            id: id.to_owned(),
            currency: PhantomData,
        }
    }
}

#[tool_impl(self_key = self.id)]
impl<C: Currency> Account<C> {
    #[idempotent(attached)]
    pub async fn refund(&self, cents: u64) -> Result<String, Error> {
        ACCOUNT_REFUNDS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("refunded {cents} {} to {}", C::CODE, self.id))
    }
}

// The same on a trait's default method, with a `self_key` that names `Self` next to it.
static NOTIFIED: AtomicUsize = AtomicUsize::new(0);

trait Channel: Sync {
    const CHANNEL: &'static str;

    fn account(&self) -> &str {
        "acme"
    }

    #[idempotent(name = "post", self_key = self.account(), attached)]
    async fn post(&self, text: String) -> Result<String, Error> {
        NOTIFIED.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{} posted {text}", Self::CHANNEL))
    }

    #[idempotent(name = "post_per_channel", self_key = (Self::CHANNEL, self.account()), attached)]
    async fn post_per_channel(&self, text: String) -> Result<String, Error> {
        Ok(format!("{} posted {text}", Self::CHANNEL))
    }
}

struct Slack;
struct Email;

impl Channel for Slack {
    const CHANNEL: &'static str = "slack";
}

impl Channel for Email {
    const CHANNEL: &'static str = "email";
}

#[tokio::test]
async fn a_self_key_that_does_not_name_the_type_is_refused_for_a_second_type() {
    let (usd, eur, slack, email) = turn("instances-6")
        .scope(async {
            (
                Account::<Usd>::new("acme").refund(500).await,
                Account::<Eur>::new("acme").refund(500).await,
                Slack.post("hi".into()).await,
                Email.post("hi".into()).await,
            )
        })
        .await;
    assert_eq!(ok(&usd), Some("refunded 500 USD to acme"));
    assert!(refused_as_shared(&eur), "not the USD receipt: {eur:?}");
    assert_eq!(ACCOUNT_REFUNDS.load(Ordering::SeqCst), 1);
    assert_eq!(ok(&slack), Some("slack posted hi"));
    assert!(refused_as_shared(&email), "not slack's receipt: {email:?}");
    assert_eq!(NOTIFIED.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_self_key_that_names_self_runs_per_type() {
    let (slack, email) = turn("instances-7")
        .scope(async {
            (
                Slack.post_per_channel("hi".into()).await,
                Email.post_per_channel("hi".into()).await,
            )
        })
        .await;
    assert_eq!(ok(&slack), Some("slack posted hi"));
    assert_eq!(ok(&email), Some("email posted hi"));
}

// A literal `self_key` says every type is one service (what `generic_same_service`'s error
// suggests where no parameter changes what the tool does): the second type replays the
// first's result, as asked.
static POSTED: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone)]
struct Ledger<C>(PhantomData<C>);

#[tool_impl(self_key = "ledger")]
impl<C: Currency> Ledger<C> {
    #[idempotent(attached)]
    pub async fn post(&self, entry: u64) -> Result<String, Error> {
        POSTED.fetch_add(1, Ordering::SeqCst);
        Ok(format!("posted entry {entry}"))
    }
}

#[tokio::test]
async fn a_literal_self_key_makes_every_type_one_service() {
    let (usd, eur) = turn("instances-8")
        .scope(async {
            (
                Ledger::<Usd>(PhantomData).post(3).await,
                Ledger::<Eur>(PhantomData).post(3).await,
            )
        })
        .await;
    assert_eq!(ok(&usd), Some("posted entry 3"));
    assert_eq!(ok(&eur), Some("posted entry 3"), "{eur:?}");
    assert_eq!(POSTED.load(Ordering::SeqCst), 1);
}

// Only a literal says that: a `self_key` computed without `self` — a function's result, a
// task-local read — is not a statement that every type is one service, and may be the same
// for two. Found by a review: any `self_key` without `self` turned the check off, and
// Paypal's charge got Stripe's receipt, never made.
static TENANT_CHARGES: AtomicUsize = AtomicUsize::new(0);

fn tenant() -> &'static str {
    "acme"
}

trait TenantBilling: Sync {
    #[idempotent(name = "tenant_charge", self_key = tenant(), attached)]
    async fn charge(&self, cents: u64) -> Result<String, Error> {
        TENANT_CHARGES.fetch_add(1, Ordering::SeqCst);
        Ok(format!("charged {cents} for {}", tenant()))
    }
}

impl TenantBilling for Stripe {}
impl TenantBilling for Paypal {}

static TENANT_POSTS: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone)]
struct TenantLedger<C>(PhantomData<C>);

#[tool_impl(self_key = tenant())]
impl<C: Currency> TenantLedger<C> {
    #[idempotent(attached)]
    pub async fn post(&self, entry: u64) -> Result<String, Error> {
        TENANT_POSTS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("posted entry {entry} in {}", C::CODE))
    }
}

#[tokio::test]
async fn a_self_key_computed_without_self_is_refused_for_a_second_type() {
    let (stripe, paypal, usd, eur) = turn("instances-tenant")
        .scope(async {
            (
                Stripe.charge(500).await,
                Paypal.charge(500).await,
                TenantLedger::<Usd>(PhantomData).post(3).await,
                TenantLedger::<Eur>(PhantomData).post(3).await,
            )
        })
        .await;
    assert_eq!(ok(&stripe), Some("charged 500 for acme"));
    assert!(
        refused_as_shared(&paypal),
        "not stripe's receipt: {paypal:?}"
    );
    assert_eq!(TENANT_CHARGES.load(Ordering::SeqCst), 1);
    assert_eq!(ok(&usd), Some("posted entry 3 in USD"));
    assert!(refused_as_shared(&eur), "not the USD entry: {eur:?}");
    assert_eq!(TENANT_POSTS.load(Ordering::SeqCst), 1);
}

// A trait's default method that runs detached (`self: Arc<Self>`): the same check.
static ARCHIVED: AtomicUsize = AtomicUsize::new(0);

trait Archive: Send + Sync + 'static {
    #[idempotent(name = "archive", same_service)]
    async fn archive(self: Arc<Self>, id: u64) -> Result<String, Error> {
        ARCHIVED.fetch_add(1, Ordering::SeqCst);
        Ok(format!("archived {id}"))
    }
}

struct Cold;
struct Warm;

impl Archive for Cold {}
impl Archive for Warm {}

#[tokio::test]
async fn a_detached_trait_default_method_is_refused_for_a_second_type() {
    let (cold, warm) = turn("instances-9")
        .scope(async {
            (
                Arc::new(Cold).archive(4).await,
                Arc::new(Warm).archive(4).await,
            )
        })
        .await;
    assert_eq!(ok(&cold), Some("archived 4"));
    assert!(refused_as_shared(&warm), "not cold's receipt: {warm:?}");
    assert_eq!(ARCHIVED.load(Ordering::SeqCst), 1);
}

// A block generic over lifetimes alone is one type for the check (found by a review: its
// `#[tool_impl]` stopped compiling when the block's parameters were first passed on).
struct Greeter<'a> {
    name: &'a str,
}

#[tool_impl]
impl<'a> Greeter<'a> {
    #[idempotent(attached, self_key = self.name)]
    pub async fn greet(&self, n: u32) -> Result<String, Error> {
        Ok(format!("{} {n}", self.name))
    }

    #[idempotent]
    pub async fn count(n: u32) -> Result<u32, Error> {
        Ok(n)
    }
}

struct Echo<'a>(&'a str);

#[tool_impl(self_key = self.0)]
impl Echo<'_> {
    #[idempotent(attached)]
    pub async fn echo(&self, n: u32) -> Result<String, Error> {
        Ok(format!("{} {n}", self.0))
    }
}

#[tokio::test]
async fn a_block_generic_over_lifetimes_alone_runs() {
    let (ada, bob, count, echo) = turn("instances-10")
        .scope(async {
            let (ada, bob) = (String::from("ada"), String::from("bob"));
            (
                Greeter { name: &ada }.greet(1).await,
                Greeter { name: &bob }.greet(1).await,
                Greeter::count(3).await,
                Echo(&ada).echo(2).await,
            )
        })
        .await;
    assert_eq!(ok(&ada), Some("ada 1"));
    assert_eq!(ok(&bob), Some("bob 1"));
    assert_eq!(count.ok(), Some(3));
    assert_eq!(ok(&echo), Some("ada 2"));
}

// Tools made from closures: every closure made in one function has the same type name
// (`instances::…::{{closure}}`), yet two of them are two types, and two tools. Named alike,
// they cannot be told apart, so such a tool is refused until its `self_key` tells them apart.
#[derive(Clone)]
struct FnTool<F> {
    account: String,
    run: F,
}

#[tool_impl(self_key = self.account)]
impl<F: Fn(u64) -> String + Clone + Send + Sync + 'static> FnTool<F> {
    #[idempotent(attached)]
    async fn act(&self, cents: u64) -> Result<String, Error> {
        Ok((self.run)(cents))
    }
}

fn refused_as_a_closure(result: &Result<String, Error>) -> bool {
    matches!(result, Err(Error::Config(message)) if message.contains("closure's type")
        && message.contains("PhantomData::<F>") && message.contains("PhantomData::<Self>"))
}

#[tokio::test]
async fn a_tool_of_a_closure_type_is_refused_until_its_self_key_tells_it_apart() {
    // Built side by side, as a registry of tools is.
    let charge = FnTool {
        account: "acme".to_owned(),
        run: |cents| format!("charged {cents}"),
    };
    let refund = FnTool {
        account: "acme".to_owned(),
        run: |cents| format!("refunded {cents}"),
    };
    let (charged, refunded) = turn("instances-closures")
        .scope(async { (charge.act(500).await, refund.act(500).await) })
        .await;
    assert!(refused_as_a_closure(&charged), "{charged:?}");
    assert!(refused_as_a_closure(&refunded), "{refunded:?}");
}

// A trait's default method implemented for every closure (a blanket impl).
trait Hook: Fn(&str) -> String + Sync {
    fn account(&self) -> &str {
        "acme"
    }

    #[idempotent(name = "fire_hook", self_key = self.account(), attached)]
    async fn fire(&self, event: String) -> Result<String, Error> {
        Ok(self(&event))
    }
}

impl<F: Fn(&str) -> String + Sync> Hook for F {}

#[tokio::test]
async fn a_default_method_on_a_closure_is_refused() {
    let page = |e: &str| format!("paged about {e}");
    let paged = turn("instances-hooks")
        .scope(page.fire("outage".to_owned()))
        .await;
    assert!(refused_as_a_closure(&paged), "{paged:?}");
}

// A default method with an argument of its own generic type (`impl Trait`): its
// instantiations for one implementing type are one tool, but another implementing type is
// still another tool.
static PROVIDED: AtomicUsize = AtomicUsize::new(0);

trait Provider {
    fn provider() -> &'static str;

    #[idempotent(name = "provider_charge", ignore(trace))]
    async fn charge(
        cents: u64,
        trace: impl std::fmt::Display + Send + 'static,
    ) -> Result<String, Error> {
        let _ = trace.to_string();
        PROVIDED.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{} charged {cents}", Self::provider()))
    }
}

impl Provider for Stripe {
    fn provider() -> &'static str {
        "stripe"
    }
}

impl Provider for Paypal {
    fn provider() -> &'static str {
        "paypal"
    }
}

#[tokio::test]
async fn an_impl_trait_argument_does_not_turn_the_check_off() {
    let (first, other_trace_type, paypal) = turn("instances-impl-trait")
        .scope(async {
            let first = <Stripe as Provider>::charge(500, "trace-1").await;
            let other = <Stripe as Provider>::charge(500, 7_u32).await;
            (
                first,
                other,
                <Paypal as Provider>::charge(500, "trace-2").await,
            )
        })
        .await;
    assert_eq!(ok(&first), Some("stripe charged 500"));
    assert_eq!(
        ok(&other_trace_type),
        Some("stripe charged 500"),
        "the function's own type argument is the same tool: replayed"
    );
    assert!(refused_as_shared(&paypal), "{paypal:?}");
    assert_eq!(PROVIDED.load(Ordering::SeqCst), 1);
}

// Closure tools told apart by a name of their own, which the `self_key` says names the type.
#[derive(Clone)]
struct NamedFnTool<F> {
    name: &'static str,
    run: F,
}

#[tool_impl(self_key = (self.name, std::marker::PhantomData::<F>))]
impl<F: Fn(u64) -> String + Clone + Send + Sync + 'static> NamedFnTool<F> {
    #[idempotent(attached)]
    async fn act(&self, cents: u64) -> Result<String, Error> {
        Ok((self.run)(cents))
    }
}

#[tokio::test]
async fn closure_tools_with_names_of_their_own_run_each() {
    let charge = NamedFnTool {
        name: "charge",
        run: |cents| format!("charged {cents}"),
    };
    let refund = NamedFnTool {
        name: "refund",
        run: |cents| format!("refunded {cents}"),
    };
    let (charged, refunded) = turn("instances-named-closures")
        .scope(async { (charge.act(500).await, refund.act(500).await) })
        .await;
    assert_eq!(ok(&charged), Some("charged 500"));
    assert_eq!(ok(&refunded), Some("refunded 500"));
}

// A trait's default method on types made from closures, with a `self_key` that tells them
// apart and names `Self`.
trait LabelledHook: Sync {
    fn label(&self) -> &'static str;
    fn run(&self, event: &str) -> String;

    #[idempotent(
        name = "fire_labelled_hook",
        self_key = (self.label(), std::marker::PhantomData::<Self>),
        attached
    )]
    async fn fire(&self, event: String) -> Result<String, Error> {
        Ok(self.run(&event))
    }
}

struct Labelled<F>(&'static str, F);

impl<F: Fn(&str) -> String + Sync> LabelledHook for Labelled<F> {
    fn label(&self) -> &'static str {
        self.0
    }

    fn run(&self, event: &str) -> String {
        (self.1)(event)
    }
}

#[tokio::test]
async fn a_default_method_on_closures_runs_each_with_a_self_key_naming_self() {
    let page = Labelled("page", |e: &str| format!("paged about {e}"));
    let email = Labelled("email", |e: &str| format!("emailed about {e}"));
    let (paged, emailed) = turn("instances-labelled-hooks")
        .scope(async {
            let paged = page.fire("outage".to_owned()).await;
            (paged, email.fire("outage".to_owned()).await)
        })
        .await;
    assert_eq!(ok(&paged), Some("paged about outage"));
    assert_eq!(ok(&emailed), Some("emailed about outage"));
}

// A negative number, or a tuple of literals, is a literal too.
static SIGNED_POSTS: AtomicUsize = AtomicUsize::new(0);

trait SignedLedger: Sync {
    #[idempotent(name = "signed_post", self_key = (-1, "books"), attached)]
    async fn post(&self, cents: u64) -> Result<String, Error> {
        SIGNED_POSTS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("posted {cents}"))
    }
}

impl SignedLedger for Stripe {}
impl SignedLedger for Paypal {}

#[tokio::test]
async fn a_negative_literal_or_a_tuple_of_literals_makes_every_type_one_service() {
    let (stripe, paypal) = turn("instances-signed")
        .scope(async { (Stripe.post(5).await, Paypal.post(5).await) })
        .await;
    assert_eq!(ok(&stripe), Some("posted 5"));
    assert_eq!(ok(&paypal), Some("posted 5"), "{paypal:?}");
    assert_eq!(SIGNED_POSTS.load(Ordering::SeqCst), 1);
}

/// A trait-per-tool framework's generic adapter, as docs/adopting.md describes it: one tool,
/// `Idem__call`, for every type it wraps, told apart by a `self_key` that names the type
/// parameter — each type's call runs, none is refused, each replays its own result.
mod generic_adapter {
    use super::*;

    pub trait Tool: Send + Sync + 'static {
        fn run(&self, to: &str) -> String;
    }

    pub struct Sms;
    pub struct Fax;

    impl Tool for Sms {
        fn run(&self, to: &str) -> String {
            format!("sms to {to}")
        }
    }

    impl Tool for Fax {
        fn run(&self, to: &str) -> String {
            format!("fax to {to}")
        }
    }

    static RUNS: AtomicUsize = AtomicUsize::new(0);

    pub struct Idem<T>(pub T);

    #[tool_impl(self_key = std::any::type_name::<T>())]
    impl<T: Tool> Idem<T> {
        #[idempotent(attached)]
        pub async fn call(&self, to: String) -> Result<String, Error> {
            RUNS.fetch_add(1, Ordering::SeqCst);
            Ok(self.0.run(&to))
        }
    }

    #[tokio::test]
    async fn a_self_key_naming_the_type_parameter_tells_the_wrapped_tools_apart() {
        let turn = turn("adapter");
        let (sms, fax) = (Idem(Sms), Idem(Fax));
        turn.scope(async {
            for _ in 0..2 {
                let (a, b) = (sms.call("ada".into()).await, fax.call("ada".into()).await);
                assert_eq!((ok(&a), ok(&b)), (Some("sms to ada"), Some("fax to ada")));
            }
        })
        .await;
        assert_eq!(
            RUNS.load(Ordering::SeqCst),
            2,
            "each ran once, then replayed"
        );
    }
}
