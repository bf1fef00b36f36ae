//! The forwarder against an echo server: forwarding, freezing, switching, cutting, triggers
//! and delays.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use idem_test_support::Forwarder;

/// An echo server: answers every chunk with itself.
fn echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for conn in listener.incoming().map_while(Result::ok) {
            thread::spawn(move || {
                let mut conn = conn;
                let mut buf = [0u8; 1024];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    if conn.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn ask(conn: &mut TcpStream, what: &[u8]) -> std::io::Result<Vec<u8>> {
    conn.write_all(what)?;
    let mut buf = vec![0u8; what.len()];
    conn.read_exact(&mut buf)?;
    Ok(buf)
}

fn client(forwarder: &Forwarder) -> TcpStream {
    let conn = TcpStream::connect(forwarder.addr()).expect("connect");
    conn.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    conn
}

#[test]
fn it_forwards_freezes_and_switches() {
    let forwarder = Forwarder::start(echo());
    let mut first = client(&forwarder);
    assert_eq!(ask(&mut first, b"hello").expect("echo"), b"hello");
    forwarder.freeze();
    assert!(ask(&mut first, b"again").is_err(), "frozen: no answer");
    let mut waiting = client(&forwarder);
    assert!(
        ask(&mut waiting, b"new").is_err(),
        "a frozen host accepts, never answers"
    );
    forwarder.switch(echo());
    let mut after = client(&forwarder);
    assert_eq!(ask(&mut after, b"moved").expect("echo"), b"moved");
    assert!(
        ask(&mut first, b"still").is_err(),
        "old connections stay frozen"
    );
    assert_eq!(forwarder.open_connections(), 3);
}

#[test]
fn a_cut_ends_every_connection_and_a_thaw_resumes() {
    let forwarder = Forwarder::start(echo());
    let mut conn = client(&forwarder);
    forwarder.freeze();
    assert!(ask(&mut conn, b"held").is_err());
    forwarder.thaw();
    let mut buf = [0u8; 4];
    conn.read_exact(&mut buf).expect("the held bytes arrive");
    assert_eq!(&buf, b"held");
    forwarder.cut();
    assert!(ask(&mut conn, b"gone").is_err());
    assert_eq!(forwarder.open_connections(), 0);
}

#[test]
fn a_trigger_freezes_the_answer_of_the_request_it_recognises() {
    let forwarder = Forwarder::start(echo());
    let mut conn = client(&forwarder);
    forwarder.freeze_on(b"COMMIT", true);
    assert_eq!(ask(&mut conn, b"SELECT").expect("echo"), b"SELECT");
    assert!(ask(&mut conn, b"COMMIT").is_err(), "its answer never comes");
    assert_eq!(forwarder.triggered(), 1);
    let mut other = client(&forwarder);
    assert_eq!(ask(&mut other, b"COMMIT").expect("one shot"), b"COMMIT");
    forwarder.freeze_after(b"PREPARE");
    assert_eq!(ask(&mut other, b"PREPARE").expect("answered"), b"PREPARE");
    assert!(
        ask(&mut other, b"EXECUTE").is_err(),
        "the next answer never comes"
    );
    assert_eq!(forwarder.triggered(), 2);
}

#[test]
fn a_delay_holds_every_byte_back() {
    let forwarder = Forwarder::with_delay(echo(), Duration::from_millis(50));
    let mut conn = client(&forwarder);
    let started = Instant::now();
    assert_eq!(ask(&mut conn, b"slow").expect("echo"), b"slow");
    assert!(started.elapsed() >= Duration::from_millis(100), "both ways");
}
