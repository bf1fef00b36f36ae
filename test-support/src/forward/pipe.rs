//! The threads that move a connection's bytes: one reads each direction, another writes it
//! when it is due and the way is open.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::sync::{Arc, PoisonError};
use std::thread;
use std::time::Instant;

use super::{Shared, close, lock};

/// A chunk read from one side, due on the other at `due`; `None` is the end of the stream.
struct Chunk {
    bytes: Option<Vec<u8>>,
    due: Instant,
    then_freeze: bool,
}

/// Moves bytes from `from` to `to` (`up`: client to server): one thread reads, another writes
/// when the chunk is due and the way is open.
pub(super) fn pipe(
    shared: &Arc<Shared>,
    id: u64,
    host: usize,
    from: TcpStream,
    to: TcpStream,
    up: bool,
) {
    let (send, receive) = mpsc::channel::<Chunk>();
    let reading = Arc::clone(shared);
    thread::spawn(move || read_side(&reading, id, from, &send, up));
    let writing = Arc::clone(shared);
    thread::spawn(move || write_side(&writing, id, host, to, &receive, up));
}

fn read_side(shared: &Shared, id: u64, mut from: TcpStream, send: &mpsc::Sender<Chunk>, up: bool) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = from.read(&mut buf).unwrap_or(0);
        let due = Instant::now() + shared.delay;
        if n == 0 {
            let _ = send.send(Chunk {
                bytes: None,
                due,
                then_freeze: false,
            });
            return;
        }
        let chunk = buf[..n].to_vec();
        let then_freeze = up && triggers(shared, id, &chunk);
        let chunk = Chunk {
            bytes: Some(chunk),
            due,
            then_freeze,
        };
        if send.send(chunk).is_err() {
            return;
        }
    }
}

/// Whether `chunk`, sent by the client of connection `id`, is the request whose answer the
/// armed trigger freezes (it is forwarded, then the connection freezes); a trigger that holds
/// its request back freezes the connection at once.
fn triggers(shared: &Shared, id: u64, chunk: &[u8]) -> bool {
    let mut state = lock(shared);
    let armed = state.conns.get(&id).is_some_and(|c| c.armed);
    let hit = armed
        || state.trigger.as_ref().is_some_and(|t| {
            chunk
                .windows(t.pattern.len().max(1))
                .any(|w| w == t.pattern.as_slice())
        });
    if !hit {
        return false;
    }
    let (forward, next) = if armed {
        (true, false)
    } else {
        match state.trigger.take() {
            Some(trigger) => (trigger.forward, trigger.next),
            None => return false,
        }
    };
    // Counted once the request is where it goes: at the server (see `write_side`), or held.
    state.triggered += usize::from(!forward);
    let Some(conn) = state.conns.get_mut(&id) else {
        return false;
    };
    if next {
        conn.armed = true;
        return false;
    }
    conn.armed = false;
    // Its answer never comes back; the request goes on only if `forward`.
    conn.down_frozen = true;
    conn.up_frozen = !forward;
    forward
}

fn write_side(
    shared: &Shared,
    id: u64,
    host: usize,
    mut to: TcpStream,
    receive: &mpsc::Receiver<Chunk>,
    up: bool,
) {
    while let Ok(chunk) = receive.recv() {
        let wait = chunk.due.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            thread::sleep(wait);
        }
        if !wait_open(shared, id, host, up, chunk.then_freeze) {
            return;
        }
        let Some(bytes) = chunk.bytes else {
            // One side ended: end the connection both ways.
            if let Some(conn) = lock(shared).conns.remove(&id) {
                close(&conn.sockets);
            }
            return;
        };
        if to.write_all(&bytes).is_err() {
            if let Some(conn) = lock(shared).conns.remove(&id) {
                close(&conn.sockets);
            }
            return;
        }
        if chunk.then_freeze {
            let mut state = lock(shared);
            state.triggered += 1;
            if let Some(conn) = state.conns.get_mut(&id) {
                conn.up_frozen = true;
            }
        }
    }
}

/// Waits until the connection may move bytes this way; `false` once it is closed. `once`: this
/// chunk goes even though the way is frozen behind it (the trigger's forwarded request).
fn wait_open(shared: &Shared, id: u64, host: usize, up: bool, once: bool) -> bool {
    let mut state = lock(shared);
    loop {
        if state.stopped {
            return false;
        }
        let Some(conn) = state.conns.get(&id) else {
            return false;
        };
        let frozen = state.hosts[host].frozen
            || (!once && if up { conn.up_frozen } else { conn.down_frozen });
        if !frozen {
            return true;
        }
        state = shared
            .moved
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
    }
}
