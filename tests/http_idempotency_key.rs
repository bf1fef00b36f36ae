//! `idem_tools::http::IdempotencyKey` (feature `reqwest`) against a payment API on loopback that
//! deduplicates on `Idempotency-Key`, as payment APIs do: the first request with a key does the
//! work and stores its response; a repeat gets the stored response and does nothing; a repeat
//! with other parameters is refused (422), and so is a request without the header (400).
//!
//! The crash test re-executes this test binary as a worker running only the [`child`] test,
//! with `IDEM_HTTP_CHILD` telling it what to do; without that variable [`child`] does nothing.
#![cfg(unix)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use idem_test_support::{Kid, TempDir};
use idem_tools::http::{IDEMPOTENCY_KEY, IdempotencyKey};
use idem_tools::store::{RecordState, Store};
use idem_tools::{SqliteStore, Turn, current_key, idempotent};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

const CHILD_ENV: &str = "IDEM_HTTP_CHILD";
const DB_ENV: &str = "IDEM_HTTP_DB";
const URL_ENV: &str = "IDEM_HTTP_URL";

/// The turn every worker process uses, so that they all derive the same key.
const TURN_ID: &str = "conversation-9/turn-2";

/// How long anyone waits for a signal (a child's line, the API's charge) before failing.
const TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The payment API

/// What the API saw and did.
#[derive(Default)]
struct Ledger {
    /// Every request that reached the API, as its `Idempotency-Key` values (none, one or more).
    requests: Vec<Vec<String>>,
    /// The work done: one line per charge made (`<key> <request body>`).
    charges: Vec<String>,
    /// Per key, the body of the request that did the work and the response stored for it.
    stored: HashMap<String, (Bytes, String)>,
}

/// A payment API on `127.0.0.1`, served from a thread of its own.
struct PaymentApi {
    url: String,
    ledger: Arc<Mutex<Ledger>>,
    /// The key of each charge, sent once the charge is made and before the response is.
    charged: mpsc::Receiver<String>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl PaymentApi {
    fn start() -> PaymentApi {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/v1/charges", listener.local_addr().unwrap());
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let (charged_tx, charged) = mpsc::channel();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let served = Arc::clone(&ledger);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let stream = tokio::select! {
                        accepted = listener.accept() => accepted.unwrap().0,
                        _ = &mut stopped => return,
                    };
                    let (ledger, charged) = (Arc::clone(&served), charged_tx.clone());
                    let service = hyper::service::service_fn(move |request| {
                        let (ledger, charged) = (Arc::clone(&ledger), charged.clone());
                        async move { Ok::<_, Infallible>(answer(request, &ledger, &charged).await) }
                    });
                    tokio::spawn(async move {
                        // A worker killed mid-connection ends it with an error: nothing to do.
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        PaymentApi {
            url,
            ledger,
            charged,
            stop: Some(stop),
        }
    }

    fn requests(&self) -> Vec<Vec<String>> {
        self.ledger.lock().unwrap().requests.clone()
    }

    fn charges(&self) -> Vec<String> {
        self.ledger.lock().unwrap().charges.clone()
    }

    /// The response stored for `key`.
    fn stored(&self, key: &str) -> Option<String> {
        let ledger = self.ledger.lock().unwrap();
        ledger.stored.get(key).map(|(_, response)| response.clone())
    }
}

impl Drop for PaymentApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// `POST /v1/charges`, deduplicated on `Idempotency-Key`.
async fn answer(
    request: Request<Incoming>,
    ledger: &Mutex<Ledger>,
    charged: &mpsc::Sender<String>,
) -> Response<Full<Bytes>> {
    let keys: Vec<String> = request
        .headers()
        .get_all("idempotency-key")
        .iter()
        .map(|value| value.to_str().unwrap_or("<not ASCII>").to_owned())
        .collect();
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return reply(StatusCode::BAD_REQUEST, "unreadable body".to_owned()),
    };
    let mut ledger = ledger.lock().unwrap();
    ledger.requests.push(keys.clone());
    let [key] = keys.as_slice() else {
        return reply(
            StatusCode::BAD_REQUEST,
            format!("exactly one Idempotency-Key header is required, got {keys:?}"),
        );
    };
    if let Some((first_body, response)) = ledger.stored.get(key) {
        if *first_body != body {
            return reply(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Idempotency-Key reused with other parameters".to_owned(),
            );
        }
        // A repeat: the stored response, and no work.
        return reply(StatusCode::OK, response.clone());
    }
    // The work: a charge, made once per key.
    ledger
        .charges
        .push(format!("{key} {}", String::from_utf8_lossy(&body)));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let response = format!("ch_{}_{nanos}", ledger.charges.len());
    ledger.stored.insert(key.clone(), (body, response.clone()));
    let _ = charged.send(key.clone());
    reply(StatusCode::OK, response)
}

fn reply(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response
}

/// A client with the middleware, and no proxy between it and loopback.
fn client() -> ClientWithMiddleware {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    ClientBuilder::new(client).with(IdempotencyKey).build()
}

/// Sends the request and returns the response's body, or an error with the API's answer.
async fn send(request: reqwest_middleware::RequestBuilder) -> anyhow::Result<String> {
    let response = request.send().await?;
    let status = response.status();
    let text = response.text().await?;
    anyhow::ensure!(status.is_success(), "the API answered {status}: {text}");
    Ok(text)
}

// ---------------------------------------------------------------------------------------------
// A worker killed after the API did the work, and its retry in another process

/// Charges an order. In the first worker, the process is killed after the API made the charge
/// and before the result is recorded: the body waits forever once it has the response.
#[idempotent(lease = "1s", skip(http, url))]
async fn charge(
    http: ClientWithMiddleware,
    url: String,
    order: String,
    cents: u64,
) -> anyhow::Result<String> {
    let key = current_key().context("inside a tool")?;
    println!("KEY {key}");
    let receipt = send(http.post(&url).body(format!("order={order}&cents={cents}"))).await?;
    println!("RESPONSE {receipt}");
    if std::env::var(CHILD_ENV).as_deref() == Ok("die_before_recording") {
        std::future::pending::<()>().await;
    }
    Ok(receipt)
}

/// The worker's side of the crash test: a no-op unless run by the parent below.
#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let db = PathBuf::from(std::env::var_os(DB_ENV).unwrap());
    let url = std::env::var(URL_ENV).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let receipt = runtime
        .block_on(async {
            let store = Arc::new(SqliteStore::open(&db)?);
            // The first worker holds the key until its lease ends: wait for that, then claim it.
            let turn = Turn::new(TURN_ID)
                .with_store(store)
                .with_in_flight_wait(TIMEOUT);
            turn.scope(charge(client(), url, "order-7".to_owned(), 4200))
                .await
        })
        .unwrap_or_else(|error| panic!("{mode}: {error:#}"));
    println!("RESULT {receipt}");
}

/// The documented crash window, closed by the header: the worker is killed (SIGKILL) after the
/// API made the charge and before the result was recorded; once its lease ends, another process
/// runs the tool again, reaches the API with the same `Idempotency-Key`, and gets the first
/// charge's stored response instead of a second charge.
#[test]
fn a_worker_killed_after_the_api_charged_is_retried_and_the_api_charges_once() {
    let api = PaymentApi::start();
    let dir = TempDir::new("http-key");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let mut first = worker("die_before_recording", &dir, &api.url);
    let key = first.expect("KEY ");
    let charged = first.wait_for(&api.charged, "the API to make the charge");
    assert_eq!(charged, key, "the charge was made under another key");
    first.kill();

    // Killed before the result was recorded: the store has no result for the key.
    let store = SqliteStore::open(dir.db()).unwrap();
    let records = runtime.block_on(store.list(None, 10)).unwrap();
    assert!(
        records
            .iter()
            .all(|record| record.state != RecordState::Completed),
        "the killed worker recorded its result"
    );

    let mut retry = worker("retry", &dir, &api.url);
    assert_eq!(retry.expect("KEY "), key, "the retry derived another key");
    let receipt = retry.expect("RESULT ");
    retry.finish();

    // The retry reached the API (the tool ran again), with the same header, and the API
    // charged once and answered the retry with the first charge's response.
    assert_eq!(api.requests(), vec![vec![key.clone()], vec![key.clone()]]);
    let charges = api.charges();
    assert_eq!(charges, vec![format!("{key} order=order-7&cents=4200")]);
    assert_eq!(Some(receipt.clone()), api.stored(&key));
    assert!(receipt.starts_with("ch_1_"), "{receipt}");
    assert!(api.charged.try_recv().is_err(), "a second charge was made");

    // And the retry recorded it.
    let records = runtime.block_on(store.list(None, 10)).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].key.to_hex(), key);
    assert_eq!(records[0].state, RecordState::Completed);
}

// ---------------------------------------------------------------------------------------------
// Which requests get the header

/// Posts `bodies` in order from inside one tool call, each with the explicit header given
/// (`{key}` replaced by the call's key); returns the call's key and the API's answers.
#[idempotent(skip(http, url))]
async fn post_all(
    http: ClientWithMiddleware,
    url: String,
    bodies: Vec<(String, Option<String>)>,
) -> anyhow::Result<(String, Vec<Result<String, String>>)> {
    let key = current_key().context("inside a tool")?.to_hex();
    let mut answers = Vec::new();
    for (body, explicit) in bodies {
        let mut request = http.post(&url).body(body);
        if let Some(value) = explicit {
            request = request.header(IDEMPOTENCY_KEY, value.replace("{key}", &key));
        }
        answers.push(send(request).await.map_err(|error| format!("{error:#}")));
    }
    Ok((key, answers))
}

#[tokio::test]
async fn a_request_outside_a_tool_goes_out_without_a_key() {
    let api = PaymentApi::start();
    let error = send(client().post(&api.url).body("order=1"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("400"), "{error:#}");
    assert_eq!(api.requests(), vec![Vec::<String>::new()]);
    assert!(api.charges().is_empty());
}

#[tokio::test]
async fn inside_a_tool_a_request_gets_the_calls_key_and_a_repeat_is_not_charged_again() {
    let api = PaymentApi::start();
    let bodies = vec![("order=2".to_owned(), None)];
    let (key, answers) = Turn::new("turn-inside")
        .scope(post_all(client(), api.url.clone(), bodies.clone()))
        .await
        .unwrap();
    assert_eq!(key.len(), 64);
    assert!(
        key.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    let receipt = answers[0].clone().unwrap();
    assert_eq!(api.requests(), vec![vec![key.clone()]]);

    // The same call in another turn value with the same id (a restarted orchestrator on a
    // fresh in-memory store would run the body again): the same key reaches the API.
    let store = Arc::new(idem_tools::MemoryStore::new());
    let (again, answers) = Turn::new("turn-inside")
        .with_store(store)
        .scope(post_all(client(), api.url.clone(), bodies))
        .await
        .unwrap();
    assert_eq!(again, key);
    assert_eq!(answers[0].as_ref().unwrap(), &receipt);
    assert_eq!(api.charges().len(), 1);
}

#[tokio::test]
async fn an_explicit_header_is_kept_and_suffixes_give_each_request_its_own_key() {
    let api = PaymentApi::start();
    let bodies = vec![
        ("customer=ada".to_owned(), Some("{key}-customer".to_owned())),
        ("charge=500".to_owned(), Some("{key}-charge".to_owned())),
        (
            "caller=1".to_owned(),
            Some("chosen-by-the-caller".to_owned()),
        ),
    ];
    let (key, answers) = Turn::new("turn-explicit")
        .scope(post_all(client(), api.url.clone(), bodies))
        .await
        .unwrap();
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    // One value each: the middleware neither replaced the caller's header nor added its own.
    assert_eq!(
        api.requests(),
        vec![
            vec![format!("{key}-customer")],
            vec![format!("{key}-charge")],
            vec!["chosen-by-the-caller".to_owned()],
        ]
    );
    assert_eq!(api.charges().len(), 3);
}

/// Why the docs say to give each request its own key when a tool sends several: the API
/// compares a repeated key's request with the first and refuses a different one.
#[tokio::test]
async fn two_different_requests_under_the_calls_one_key_are_refused_by_the_api() {
    let api = PaymentApi::start();
    let bodies = vec![
        ("customer=ada".to_owned(), None),
        ("charge=500".to_owned(), None),
    ];
    let (key, answers) = Turn::new("turn-one-key")
        .scope(post_all(client(), api.url.clone(), bodies))
        .await
        .unwrap();
    assert!(answers[0].is_ok(), "{answers:?}");
    let refused = answers[1].as_ref().unwrap_err();
    assert!(refused.contains("422"), "{refused}");
    assert_eq!(api.requests(), vec![vec![key.clone()], vec![key]]);
    assert_eq!(api.charges().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Processes and files

/// A worker running `mode` on `dir`'s database against the API at `url`.
fn worker(mode: &str, dir: &TempDir, url: &str) -> Kid {
    Kid::spawn(
        "child",
        [
            (CHILD_ENV, PathBuf::from(mode)),
            (DB_ENV, dir.db()),
            (URL_ENV, PathBuf::from(url)),
        ],
        TIMEOUT,
    )
}
