//! Test helpers shared by idem's test suites (not published): a temporary directory deleted on
//! drop, and [`Kid`], this test binary re-executed as a child process that runs one test and
//! talks back line by line — the harness of the tests that kill a worker with `SIGKILL` — and
//! [`Forwarder`], a TCP forwarder that switches, cuts and freezes connections (failovers).
#![forbid(unsafe_code)]

pub mod forward;

pub use forward::Forwarder;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A fresh directory under the system temp dir, deleted on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new directory, named after `name`, this process and the time.
    pub fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("idem-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the temp dir is writable");
        TempDir(dir)
    }

    /// A file in the directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    /// A file in the directory, as a string for a command line.
    pub fn file(&self, name: &str) -> String {
        self.path(name)
            .to_str()
            .expect("a UTF-8 temp dir")
            .to_owned()
    }

    /// The SQLite database file.
    pub fn db(&self) -> PathBuf {
        self.path("idem.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// This test binary, re-executed to run only the test `test` (the child's side, which does
/// nothing unless its environment says what to do), and the lines it prints. A failing test
/// does not leave it behind: it is killed on drop.
pub struct Kid {
    process: Child,
    lines: mpsc::Receiver<String>,
    timeout: Duration,
}

impl Kid {
    /// Starts the child with `env`; each wait for it gives up after `timeout`.
    pub fn spawn<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        test: &str,
        env: impl IntoIterator<Item = (K, V)>,
        timeout: Duration,
    ) -> Kid {
        let mut process = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child");
        let stdout = process.stdout.take().expect("piped");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Kid {
            process,
            lines,
            timeout,
        }
    }

    /// Waits for a line containing `prefix` and returns what follows it (libtest may print
    /// `test NAME ... ` before the test's own first line).
    pub fn expect(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(at) = line.find(prefix) {
                        return line[at + prefix.len()..].trim().to_owned();
                    }
                }
                Err(error) => {
                    let _ = self.process.kill();
                    panic!("the child never printed {prefix:?}: {error}");
                }
            }
        }
    }

    /// The next line it prints, if one comes within `wait`.
    pub fn try_line(&mut self, wait: Duration) -> Option<String> {
        self.lines.recv_timeout(wait).ok()
    }

    /// How it ended, if it has.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.process.try_wait().ok().flatten()
    }

    /// Waits for `what` to arrive on `signal`, while the child lives.
    pub fn wait_for<T>(&mut self, signal: &mpsc::Receiver<T>, what: &str) -> T {
        let deadline = Instant::now() + self.timeout;
        loop {
            match signal.recv_timeout(Duration::from_millis(50)) {
                Ok(value) => return value,
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!("no one sends {what}"),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if let Ok(Some(status)) = self.process.try_wait() {
                panic!("the child exited ({status}) before {what}");
            }
            if Instant::now() > deadline {
                let _ = self.process.kill();
                panic!("{what} never came");
            }
        }
    }

    /// The lines left until the child exits, which it must do successfully.
    pub fn finish(&mut self) -> Vec<String> {
        let mut rest = Vec::new();
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => rest.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = self.process.kill();
                    panic!("the child did not finish");
                }
            }
        }
        let status = self.process.wait().expect("wait for the child");
        assert!(status.success(), "the child failed: {status}");
        rest
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// Sends `signal` (`"STOP"`, `"CONT"`, …) with `kill(1)`.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// `SIGKILL`: no destructor, no clean-up, no chance to record or release anything.
    pub fn kill(&mut self) {
        self.process.kill().expect("kill the child");
        self.process.wait().expect("reap the child");
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Ok(None) = self.process.try_wait() {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
    }
}

/// Processes for the tests of claim holders: one that ran and was reaped (gone), and one
/// stopped with `SIGSTOP` (still there), each named by `name` (a pid → the holder text a store
/// keeps) while it existed. The stopped one is killed when this is dropped.
pub struct HolderProcesses {
    /// The exited process's name, if it could be named before it exited.
    pub exited: Option<String>,
    /// The stopped process's name.
    pub stopped: String,
    child: Child,
}

impl HolderProcesses {
    /// Starts both (`true` and `sleep 60`).
    pub fn start(name: impl Fn(u32) -> Option<String>) -> HolderProcesses {
        let mut exited = Command::new("true").spawn().expect("run true");
        let exited_name = name(exited.id());
        exited.wait().expect("reap true");
        let child = Command::new("sleep").arg("60").spawn().expect("run sleep");
        let stopped = name(child.id()).expect("a running process is named");
        let status = Command::new("kill")
            .args(["-STOP", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -STOP failed");
        HolderProcesses {
            exited: exited_name,
            stopped,
            child,
        }
    }
}

impl Drop for HolderProcesses {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
