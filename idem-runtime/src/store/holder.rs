//! Who holds a claim, for a store that can tell whether that holder still runs: a process on
//! this host, named by the host's boot, its pid namespace, its pid and its start time.
//!
//! A claim's lease is what frees a key whose holder stopped answering, because a store cannot
//! tell a crashed holder from a slow one. On one host it sometimes can: a holder whose process is
//! gone runs no body, so its claim can be free at once — a run restarted right after a crash
//! need not wait out the lease. "Gone" must be proven, never guessed:
//!
//! - a **reused pid** is another process: the start time (in clock ticks since boot) tells;
//! - a holder in **another pid namespace** (a container) or **after a reboot** cannot be looked
//!   up from here: the boot id and the namespace must be this process's, else nothing is known;
//! - a **slow** or **stopped** holder (a `SIGSTOP`, a paused VM) still exists: it is not gone,
//!   and its lease applies;
//! - a **zombie** (exited, not yet reaped) runs nothing: gone.
//!
//! Linux only (`/proc`); elsewhere no holder is known and leases alone apply.

use std::sync::LazyLock;

/// A process that may hold claims: see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The host's boot id (`/proc/sys/kernel/random/boot_id`).
    boot: String,
    /// The inode of the process's pid namespace (`/proc/self/ns/pid`).
    namespace: u64,
    pid: u32,
    /// The process's start time, in clock ticks since boot (`/proc/<pid>/stat`, field 22).
    start: u64,
}

/// The format's prefix, so that a later format is never misread.
const FORMAT: &str = "linux1";

static THIS_PROCESS: LazyLock<Option<Holder>> = LazyLock::new(Holder::read_self);
static THIS_PROCESS_TEXT: LazyLock<Option<String>> =
    LazyLock::new(|| Holder::this_process().map(Holder::encode));

impl Holder {
    /// This process, where it can be named (Linux, `/proc` readable).
    pub fn this_process() -> Option<&'static Holder> {
        THIS_PROCESS.as_ref()
    }

    /// This process's [`encode`](Self::encode)d text, made once: what a store writes with each
    /// claim.
    pub fn this_process_text() -> Option<&'static str> {
        THIS_PROCESS_TEXT.as_deref()
    }

    fn read_self() -> Option<Holder> {
        Holder::of_pid(std::process::id())
    }

    /// The process with this pid as it runs now, in this process's pid namespace on this host
    /// (`None` if there is none, or it cannot be read).
    pub fn of_pid(pid: u32) -> Option<Holder> {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let namespace = namespace_of("self")?;
        let start = start_of(&pid.to_string())?.0;
        Some(Holder {
            boot: boot.trim().to_owned(),
            namespace,
            pid,
            start,
        })
    }

    /// Whether a claim kept with this text (`None`: no holder was written, as by another
    /// platform or an older build) is held by a process that is certainly gone.
    pub fn text_is_gone(text: Option<&str>) -> bool {
        text.and_then(Holder::decode)
            .is_some_and(|holder| holder.is_gone())
    }

    /// The text a store keeps with a claim.
    pub fn encode(&self) -> String {
        format!(
            "{FORMAT}:{}:{}:{}:{}",
            self.boot, self.namespace, self.pid, self.start
        )
    }

    /// A holder from its text, or `None` for anything else (another format, damage).
    pub fn decode(text: &str) -> Option<Holder> {
        let mut parts = text.split(':');
        if parts.next()? != FORMAT {
            return None;
        }
        let boot = parts.next()?.to_owned();
        let namespace = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        let start = parts.next()?.parse().ok()?;
        if parts.next().is_some() || boot.is_empty() {
            return None;
        }
        Some(Holder {
            boot,
            namespace,
            pid,
            start,
        })
    }

    /// Whether this holder is certainly gone: it ran on this host, in this process's pid
    /// namespace, since this boot, and no process with its pid and start time runs now (an
    /// exited one not yet reaped counts as gone). `false` whenever that cannot be proven.
    pub fn is_gone(&self) -> bool {
        let Some(this) = Holder::this_process() else {
            return false;
        };
        if self.boot != this.boot || self.namespace != this.namespace {
            return false;
        }
        if self.pid == this.pid {
            return self.start != this.start; // this pid is ours now: the holder was before us
        }
        match start_of(&self.pid.to_string()) {
            // The pid runs, and it is the holder unless the start differs (a reused pid).
            Some((start, state)) => start != self.start || matches!(state, 'Z' | 'X'),
            // No such process: gone — unless /proc could not be read for another reason.
            None => !std::path::Path::new(&format!("/proc/{}", self.pid)).exists(),
        }
    }
}

/// The inode of `/proc/<pid>/ns/pid`.
fn namespace_of(pid: &str) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    // "pid:[4026531836]"
    let text = link.to_str()?;
    text.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// The start time (clock ticks since boot) and state of process `pid`.
fn start_of(pid: &str) -> Option<(u64, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid …": comm may hold spaces and parentheses, so fields are counted
    // after the last ')'. The state is field 3, the start time field 22.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((start, state))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_named_and_not_gone() {
        let this = Holder::this_process().expect("a Linux process can be named");
        assert!(!this.is_gone());
        assert_eq!(Holder::decode(&this.encode()).as_ref(), Some(this));
    }

    #[test]
    fn a_reused_pid_or_an_exited_process_is_gone() {
        let this = Holder::this_process().unwrap();
        let reused = Holder {
            start: this.start + 1,
            ..this.clone()
        };
        assert!(
            reused.is_gone(),
            "our pid with another start: a process before us"
        );
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = start_of(&pid.to_string()).map(|(start, _)| start);
        child.wait().unwrap();
        let exited = Holder {
            pid,
            start: start.unwrap_or(0),
            ..this.clone()
        };
        assert!(exited.is_gone());
    }

    #[test]
    fn a_running_or_stopped_process_is_not_gone() {
        let this = Holder::this_process().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let (start, _) = start_of(&pid.to_string()).unwrap();
        let holder = Holder {
            pid,
            start,
            ..this.clone()
        };
        assert!(!holder.is_gone());
        // Stopped (SIGSTOP), as a paused holder is: still not gone.
        std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(!holder.is_gone());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(holder.is_gone());
    }

    #[test]
    fn another_host_or_namespace_is_never_called_gone() {
        let this = Holder::this_process().unwrap();
        let elsewhere = Holder {
            boot: "another-boot".into(),
            pid: 999_999,
            ..this.clone()
        };
        assert!(!elsewhere.is_gone());
        let container = Holder {
            namespace: this.namespace + 1,
            pid: 999_999,
            ..this.clone()
        };
        assert!(!container.is_gone());
        assert_eq!(Holder::decode("linux2:a:1:2:3"), None);
        assert_eq!(Holder::decode("linux1:a:1:2"), None);
    }
}
