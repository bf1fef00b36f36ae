//! [`Forwarder`]: a TCP forwarder on loopback in front of a server, as a DNS name or a virtual
//! IP is in front of a database host. Tests switch it to another host (a failover), cut its
//! connections (a killed host: every client sees its connection end), or **freeze** it: bytes
//! stop moving but every socket stays open, so clients wait for answers that never come — a
//! frozen host, or a partition after the switch. It can also hold back every byte for a while
//! (a slow link: replication lag) and freeze one connection after a request it recognises (a
//! reply lost on the wire).
//!
//! Plain threads and blocking sockets: it runs the same under any runtime a test uses, and a
//! test can stop its runtime while connections are frozen.

mod pipe;

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

/// A TCP forwarder on `127.0.0.1`, stopped (every connection closed) when dropped.
pub struct Forwarder {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// A one-shot trigger: the first chunk a client sends that contains `pattern` freezes its
/// connection.
struct Trigger {
    pattern: Vec<u8>,
    forward: bool,
    /// The request after the matching one is the one frozen (forwarded, its answer held).
    next: bool,
}

struct Shared {
    state: Mutex<State>,
    moved: Condvar,
    delay: Duration,
}

/// A host the forwarder sends new connections to (a generation: switching makes a new one).
#[derive(Clone, Copy)]
struct Host {
    addr: SocketAddr,
    frozen: bool,
}

/// One client connection: which host it went to, its sockets, and whether each direction is
/// frozen on its own (after a trigger).
struct Conn {
    host: usize,
    sockets: Vec<TcpStream>,
    up_frozen: bool,
    down_frozen: bool,
    /// A trigger matched this connection's previous request and freezes the answer to its
    /// next one.
    armed: bool,
}

#[derive(Default)]
struct State {
    hosts: Vec<Host>,
    conns: HashMap<u64, Conn>,
    next: u64,
    trigger: Option<Trigger>,
    triggered: usize,
    stopped: bool,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Forwarder {
    /// Forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Forwarder {
        Forwarder::with_delay(upstream, Duration::ZERO)
    }

    /// Forwards every connection to `upstream`, each byte held back `delay` (in both
    /// directions) before it moves on.
    pub fn with_delay(upstream: SocketAddr, delay: Duration) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("the forwarder's address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                hosts: vec![Host {
                    addr: upstream,
                    frozen: false,
                }],
                ..State::default()
            }),
            moved: Condvar::new(),
            delay,
        });
        let accepting = Arc::clone(&shared);
        thread::spawn(move || accept(&listener, &accepting));
        Forwarder { addr, shared }
    }

    /// The forwarder's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The forwarder's port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// New connections go to `upstream` from now on; open ones stay where they are (frozen
    /// ones stay frozen).
    pub fn switch(&self, upstream: SocketAddr) {
        let mut state = lock(&self.shared);
        state.hosts.push(Host {
            addr: upstream,
            frozen: false,
        });
        self.shared.moved.notify_all();
    }

    /// Freezes the current host: no byte moves on its open connections any more, in either
    /// direction (a client closing its end is not passed on either), and new connections are
    /// accepted and left waiting — until [`thaw`](Self::thaw); a [`switch`](Self::switch) sends
    /// new connections elsewhere and leaves these frozen.
    pub fn freeze(&self) {
        self.set_frozen(true);
    }

    /// Lets the current host's connections move again.
    pub fn thaw(&self) {
        self.set_frozen(false);
    }

    fn set_frozen(&self, frozen: bool) {
        let mut state = lock(&self.shared);
        if let Some(host) = state.hosts.last_mut() {
            host.frozen = frozen;
        }
        self.shared.moved.notify_all();
    }

    /// Closes every connection to the current host, both ways (a killed host: clients see
    /// their connections end).
    pub fn cut(&self) {
        let mut state = lock(&self.shared);
        let current = state.hosts.len() - 1;
        let ids: Vec<u64> = state
            .conns
            .iter()
            .filter(|(_, c)| c.host == current)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some(conn) = state.conns.remove(&id) {
                close(&conn.sockets);
            }
        }
        self.shared.moved.notify_all();
    }

    /// Arms a one-shot trigger: the first chunk a client sends that contains `pattern`
    /// freezes its connection — after the chunk reaches the server if `forward` (the request
    /// is served, its answer never arrives), else before (the request never arrives).
    pub fn freeze_on(&self, pattern: &[u8], forward: bool) {
        lock(&self.shared).trigger = Some(Trigger {
            pattern: pattern.to_vec(),
            forward,
            next: false,
        });
    }

    /// Arms a one-shot trigger for a prepared statement: the first connection that sends
    /// `pattern` gets its *next* request forwarded and that request's answer frozen. (A client
    /// that prepares a statement sends its text in a request of its own first, then executes
    /// it in another: this lets the execution land and loses its answer.)
    pub fn freeze_after(&self, pattern: &[u8]) {
        lock(&self.shared).trigger = Some(Trigger {
            pattern: pattern.to_vec(),
            forward: true,
            next: true,
        });
    }

    /// How many connections a [`freeze_on`](Self::freeze_on) trigger froze so far (counted once
    /// a forwarded request was written to the server).
    pub fn triggered(&self) -> usize {
        lock(&self.shared).triggered
    }

    /// Connections open now (frozen ones included).
    pub fn open_connections(&self) -> usize {
        lock(&self.shared).conns.len()
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        let mut state = lock(&self.shared);
        state.stopped = true;
        for conn in state.conns.values() {
            close(&conn.sockets);
        }
        state.conns.clear();
        self.shared.moved.notify_all();
        drop(state);
        // Wakes the accepting thread, which then sees `stopped`.
        let _ = TcpStream::connect(self.addr);
    }
}

fn close(sockets: &[TcpStream]) {
    for socket in sockets {
        let _ = socket.shutdown(Shutdown::Both);
    }
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if lock(shared).stopped {
            return;
        }
        let Ok(client) = client else { continue };
        let shared = Arc::clone(shared);
        thread::spawn(move || connect(client, &shared));
    }
}

/// Registers `client`, waits while its host is frozen, connects it upstream and moves bytes
/// both ways.
fn connect(client: TcpStream, shared: &Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let Ok(registered) = client.try_clone() else {
        return;
    };
    let (id, host) = {
        let mut state = lock(shared);
        let (id, host) = (state.next, state.hosts.len() - 1);
        state.next += 1;
        state.conns.insert(
            id,
            Conn {
                host,
                sockets: vec![registered],
                up_frozen: false,
                down_frozen: false,
                armed: false,
            },
        );
        (id, host)
    };
    // A frozen host accepts and never answers.
    let addr = {
        let mut state = lock(shared);
        loop {
            if state.stopped || !state.conns.contains_key(&id) {
                return;
            }
            if !state.hosts[host].frozen {
                break state.hosts[host].addr;
            }
            state = shared
                .moved
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    };
    let Ok(server) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        // A host that is down: the client's connection ends at once.
        if let Some(conn) = lock(shared).conns.remove(&id) {
            close(&conn.sockets);
        }
        return;
    };
    let _ = server.set_nodelay(true);
    let clones = (
        client.try_clone(),
        server.try_clone(),
        server.try_clone(),
        client.try_clone(),
    );
    let (Ok(client_out), Ok(server_in), Ok(server_registered), Ok(client_in)) = clones else {
        return;
    };
    match lock(shared).conns.get_mut(&id) {
        Some(conn) => conn.sockets.push(server_registered),
        None => {
            close(&[client, server]);
            return;
        }
    }
    pipe::pipe(shared, id, host, client_in, server_in, true);
    pipe::pipe(shared, id, host, server, client_out, false);
}
