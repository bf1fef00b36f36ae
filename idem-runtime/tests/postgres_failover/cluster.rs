//! The servers: a primary and a streaming standby, each a server of the test's own started by
//! `scripts/postgres-test-server.sh`. Clients reach the primary through a forwarder (the
//! virtual IP a failover switches); the standby replicates through another (the primary's
//! link: a lag in the asynchronous mode, and what a dead or frozen host no longer sends).

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use idem_test_support::Forwarder;

use crate::postgres_common::server_script;

/// How the primary fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL of every process of the server: its connections end.
    Kill,
    /// SIGSTOP of every process of the server: its connections stay open and nothing answers.
    Freeze,
}

/// One server of the test's own, stopped (and its files deleted) when dropped.
pub struct Node {
    dir: String,
    port: u16,
}

fn script(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(server_script())
        .args(args)
        .output()
        .expect("run the server script");
    assert!(
        out.status.success(),
        "scripts/postgres-test-server.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Node {
    fn primary() -> Node {
        let text = script(&["start"]);
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .map(str::to_owned)
                .unwrap_or_else(|| panic!("no {name} in {text}"))
        };
        let url = value("IDEM_POSTGRES_URL");
        let port = url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next())
            .and_then(|p| p.parse().ok())
            .expect("a port in the URL");
        Node {
            dir: value("IDEM_POSTGRES_DIR"),
            port,
        }
    }

    /// A standby of `primary`, replicating through `127.0.0.1:via`.
    fn standby_of(primary: &Node, via: u16) -> Node {
        let text = script(&["standby", &primary.dir, &via.to_string()]);
        let mut words = text.split_whitespace();
        let (Some(dir), Some(port)) = (words.next(), words.next()) else {
            panic!("no standby in {text:?}");
        };
        Node {
            dir: dir.to_owned(),
            port: port.parse().expect("a port"),
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn run(&self, what: &str) {
        script(&[what, &self.dir]);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(server_script())
            .args(["stop", &self.dir])
            .status();
    }
}

/// A primary with one streaming standby, behind the clients' forwarder.
pub struct Cluster {
    /// The address clients connect to (first field: dropped first, it closes every client
    /// connection, frozen ones too, before the servers stop).
    pub vip: Forwarder,
    link: Forwarder,
    primary: Node,
    standby: Node,
    /// Failed primaries (killed or frozen) and their links, kept until the end: connections to
    /// a frozen one hang until then.
    retired: Vec<(Forwarder, Node)>,
    sync: bool,
    lag: Duration,
}

impl Cluster {
    /// A primary; `prepare` runs on it (by URL) before its standby is made; then a standby,
    /// synchronous if `sync`, replicating through a link that holds every byte back `lag`.
    pub fn start(sync: bool, lag: Duration, prepare: impl FnOnce(&str)) -> Cluster {
        let primary = Node::primary();
        let vip = Forwarder::start(primary.addr());
        prepare(&url(primary.port));
        let link = Forwarder::with_delay(primary.addr(), lag);
        let standby = Node::standby_of(&primary, link.port());
        let mut cluster = Cluster {
            vip,
            link,
            primary,
            standby,
            retired: Vec::new(),
            sync,
            lag,
        };
        cluster.keep_in_step();
        cluster
    }

    /// The URL clients use (through the forwarder).
    pub fn url(&self) -> String {
        url(self.vip.port())
    }

    /// Waits until the standby streams (and, with `sync`, is synchronous).
    fn keep_in_step(&mut self) {
        self.primary.run("wait-standby");
        if self.sync {
            script(&["sync", &self.primary.dir, "on"]);
            self.primary.run("wait-standby");
        }
    }

    /// Fails the primary with `fault` (its link too: what it had not sent is gone, or stuck),
    /// waits `detection` (the time a real failover takes to notice), promotes the standby and
    /// switches the clients' address to it. Then makes a new standby of the new primary and
    /// waits until it is in step. Returns when the switch happened.
    pub fn fail_over(&mut self, fault: Fault, detection: Duration) -> Instant {
        match fault {
            Fault::Kill => {
                self.primary.run("kill");
                self.link.cut();
            }
            Fault::Freeze => {
                self.primary.run("freeze");
                self.link.freeze();
            }
        }
        std::thread::sleep(detection);
        self.standby.run("promote");
        self.vip.switch(self.standby.addr());
        let switched = Instant::now();
        let link = Forwarder::with_delay(self.standby.addr(), self.lag);
        let standby = Node::standby_of(&self.standby, link.port());
        let old_link = std::mem::replace(&mut self.link, link);
        let old_primary = std::mem::replace(
            &mut self.primary,
            std::mem::replace(&mut self.standby, standby),
        );
        self.retired.push((old_link, old_primary));
        self.keep_in_step();
        switched
    }
}

fn url(port: u16) -> String {
    format!("postgres://idem@127.0.0.1:{port}/idem_test")
}
