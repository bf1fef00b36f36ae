//! Who holds a claim, for a store that can tell whether that holder still runs: a process on
//! this host, named by the host's boot, its pid and time namespaces, its pid and its start time.
//!
//! A claim's lease is what frees a key whose holder stopped answering, because a store cannot
//! tell a crashed holder from a slow one. On one host it sometimes can: a holder whose process is
//! gone runs no body, so its claim can be free at once — a run restarted right after a crash
//! need not wait out the lease. "Gone" must be proven, never guessed:
//!
//! - a **reused pid** is another process: the start time (in clock ticks since boot) tells;
//! - a holder in **another pid namespace** (a container), **another time namespace** (whose
//!   start times read differently) or **after a reboot** cannot be looked up from here: the boot
//!   id and both namespaces must be this process's, else nothing is known;
//! - a **slow** or **stopped** holder (a `SIGSTOP`, a paused VM) still exists: it is not gone,
//!   and its lease applies;
//! - a **zombie** (exited, not yet reaped) runs nothing: gone — unless other threads of it
//!   still run (a main thread that called `pthread_exit` leaves a zombie leader);
//! - a process that **forked** after naming itself names the child anew (its own pid);
//! - where `/proc` cannot show every process of this namespace (mounted with `hidepid`, or
//!   belonging to another pid namespace), no process is named and no holder is ever called
//!   gone: leases alone apply.
//!
//! Where processes on different machines share a boot id — virtual machines cloned from one
//! memory snapshot — a holder on one clone could be called gone from another. Set the
//! environment variable `IDEM_HOLDERS=off` in such processes: their claims then name no holder,
//! and their leases alone free them.
//!
//! Linux only (`/proc`); elsewhere no holder is known and leases alone apply.

use std::sync::{Mutex, OnceLock, PoisonError};

/// A process that may hold claims: see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The host's boot id (`/proc/sys/kernel/random/boot_id`).
    boot: String,
    /// The inode of the process's pid namespace (`/proc/self/ns/pid`).
    namespace: u64,
    /// The inode of the process's time namespace (`/proc/self/ns/time`; 0 on kernels without
    /// time namespaces): start times read alike only within one.
    time_namespace: u64,
    pid: u32,
    /// The process's start time, in clock ticks since boot (`/proc/<pid>/stat`, field 22).
    start: u64,
}

/// The format's prefix, so that a later format is never misread (`linux1` had no time
/// namespace: such texts are never called gone).
const FORMAT: &str = "linux2";

/// The environment variable that turns holders off for a process (`off`).
pub const HOLDERS_ENV: &str = "IDEM_HOLDERS";

/// This process as named for its pid: named again after a `fork`, whose child has a pid of its
/// own. Each naming is kept for the life of the process (one per pid it ever had).
struct Named {
    pid: u32,
    holder: Option<&'static Holder>,
    text: Option<&'static str>,
}

/// The naming of the first pid that asked: read without a lock.
static FIRST: OnceLock<Named> = OnceLock::new();
/// The naming of a later pid (a child forked after the first naming), under a lock the
/// process that made the first naming never takes.
static FORKED: Mutex<Option<Named>> = Mutex::new(None);

impl Named {
    /// The naming of the process whose pid is `pid`, made if `this` names another pid (or none).
    fn for_pid(this: &mut Option<Named>, pid: u32) -> &Named {
        if let Some(named) = this.take_if(|named| named.pid == pid) {
            return this.insert(named);
        }
        this.insert(Named::new(pid))
    }

    /// Names the process whose pid is `pid` (kept for the life of the process).
    fn new(pid: u32) -> Named {
        let holder: Option<&'static Holder> =
            Holder::read_self(pid).map(|holder| &*Box::leak(Box::new(holder)));
        let text: Option<&'static str> =
            holder.map(|holder| &*Box::leak(holder.encode().into_boxed_str()));
        Named { pid, holder, text }
    }
}

/// Whether `IDEM_HOLDERS` (its value) turns holders off.
fn turned_off(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|value| value.eq_ignore_ascii_case("off"))
}

impl Holder {
    /// This process, where it can be named (Linux, `/proc` showing every process of its pid
    /// namespace, holders not turned off with `IDEM_HOLDERS=off`).
    pub fn this_process() -> Option<&'static Holder> {
        Holder::named(|named| named.holder)
    }

    /// This process's [`encode`](Self::encode)d text, made once per pid: what a store writes
    /// with each claim.
    pub fn this_process_text() -> Option<&'static str> {
        Holder::named(|named| named.text)
    }

    fn named<T>(read: impl FnOnce(&Named) -> T) -> T {
        let pid = std::process::id();
        let first = FIRST.get_or_init(|| Named::new(pid));
        if first.pid == pid {
            return read(first);
        }
        let mut forked = FORKED.lock().unwrap_or_else(PoisonError::into_inner);
        read(Named::for_pid(&mut forked, pid))
    }

    fn read_self(pid: u32) -> Option<Holder> {
        if turned_off(std::env::var_os(HOLDERS_ENV).as_deref()) {
            return None;
        }
        let proc_self = std::fs::read_link("/proc/self").ok()?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        if !proc_shows_every_process(proc_self.to_str()?, pid, &mountinfo) {
            tracing::debug!(target: "idem", "/proc does not show every process here: claims name no holder");
            return None;
        }
        Holder::of_pid(pid)
    }

    /// The process with this pid as it runs now, in this process's pid namespace on this host
    /// (`None` if there is none, or it cannot be read).
    pub fn of_pid(pid: u32) -> Option<Holder> {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let namespace = namespace_of("pid")?;
        let time_namespace = time_namespace()?;
        let start = start_of(&pid.to_string())?.0;
        Some(Holder {
            boot: boot.trim().to_owned(),
            namespace,
            time_namespace,
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
            "{FORMAT}:{}:{}:{}:{}:{}",
            self.boot, self.namespace, self.time_namespace, self.pid, self.start
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
        let time_namespace = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        let start = parts.next()?.parse().ok()?;
        if parts.next().is_some() || boot.is_empty() {
            return None;
        }
        Some(Holder {
            boot,
            namespace,
            time_namespace,
            pid,
            start,
        })
    }

    /// Whether this holder is certainly gone: it ran on this host, in this process's pid and
    /// time namespaces, since this boot, and no process with its pid and start time runs now
    /// (an exited one not yet reaped counts as gone, unless threads of it still run). `false`
    /// whenever that cannot be proven.
    pub fn is_gone(&self) -> bool {
        let Some(this) = Holder::this_process() else {
            return false;
        };
        if self.boot != this.boot
            || self.namespace != this.namespace
            || self.time_namespace != this.time_namespace
        {
            return false;
        }
        if self.pid == this.pid {
            return self.start != this.start; // this pid is ours now: the holder was before us
        }
        let pid = self.pid.to_string();
        match start_of(&pid) {
            // The pid runs, and it is the holder unless the start differs (a reused pid).
            Some((start, _)) if start != self.start => true,
            Some((_, 'Z' | 'X')) => !has_other_threads(&pid),
            Some(_) => false,
            // No such process: gone — only if /proc says so (a denied look proves nothing).
            None => matches!(
                std::path::Path::new(&format!("/proc/{pid}")).try_exists(),
                Ok(false)
            ),
        }
    }
}

/// Whether `/proc` shows every process of this one's pid namespace: it is this namespace's
/// (`/proc/self` names `pid`, this process's pid as it sees it) and is not mounted with
/// `hidepid` (which hides other users' processes, so that they would look gone).
fn proc_shows_every_process(proc_self: &str, pid: u32, mountinfo: &str) -> bool {
    if proc_self.parse::<u32>().ok() != Some(pid) {
        return false;
    }
    // "36 25 0:5 / /proc rw,nosuid - proc proc rw,hidepid=invisible": after " - ", the
    // filesystem type, its source and its own options.
    mountinfo
        .lines()
        .filter(|line| line.split(' ').nth(4) == Some("/proc"))
        .filter_map(|line| line.split_once(" - ").map(|(_, fs)| fs))
        .filter(|fs| fs.split(' ').next() == Some("proc"))
        .all(|fs| {
            fs.split(' ')
                .nth(2)
                .unwrap_or_default()
                .split(',')
                .filter_map(|option| option.strip_prefix("hidepid="))
                .all(|value| matches!(value, "0" | "off"))
        })
}

/// Whether process `pid` has a thread other than its leader (a zombie leader whose other
/// threads run). `true` when it cannot be read: nothing is proven then.
fn has_other_threads(pid: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(true, |tasks| {
        tasks
            .filter_map(Result::ok)
            .any(|task| task.file_name().to_str() != Some(pid))
    })
}

/// The inode of this process's namespace of `kind` (`/proc/self/ns/<kind>`).
fn namespace_of(kind: &str) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/self/ns/{kind}")).ok()?;
    // "pid:[4026531836]"
    let text = link.to_str()?;
    text.strip_prefix(kind)?
        .strip_prefix(":[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The inode of this process's time namespace; 0 where the kernel has none (before Linux 5.6:
/// every process then reads start times alike).
fn time_namespace() -> Option<u64> {
    if std::path::Path::new("/proc/self/ns/time").exists() {
        namespace_of("time")
    } else {
        Some(0)
    }
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
        let other_time = Holder {
            time_namespace: this.time_namespace + 1,
            pid: 999_999,
            ..this.clone()
        };
        assert!(!other_time.is_gone(), "start times read differently there");
        assert_eq!(Holder::decode("linux3:a:1:2:3:4"), None);
        assert_eq!(Holder::decode("linux2:a:1:2:3"), None);
        // The previous format had no time namespace: never called gone.
        assert_eq!(Holder::decode("linux1:a:1:2:3"), None);
        assert!(!Holder::text_is_gone(Some("linux1:a:1:2:3")));
    }

    #[test]
    fn a_forked_process_is_named_by_its_own_pid() {
        let pid = std::process::id();
        let mut this = None;
        let first = Named::for_pid(&mut this, pid);
        assert_eq!(first.holder.map(|h| h.pid), Some(pid));
        let text = first.text;
        // The same pid: the naming kept.
        assert_eq!(Named::for_pid(&mut this, pid).text, text);
        // Another pid (as after a fork): named anew, never with the parent's pid. (A pid that
        // is not this process's own cannot be named from here.)
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let other = Named::for_pid(&mut this, child.id());
        assert_eq!(other.pid, child.id());
        assert_eq!(other.holder, None);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(Named::for_pid(&mut this, pid).text, text);
    }

    #[test]
    fn holders_turn_off_with_the_environment() {
        assert!(turned_off(Some("off".as_ref())));
        assert!(turned_off(Some("OFF".as_ref())));
        assert!(!turned_off(Some("on".as_ref())));
        assert!(!turned_off(None));
    }

    #[test]
    fn a_proc_that_hides_processes_or_belongs_elsewhere_names_no_one() {
        let mount = |options: &str| {
            format!(
                "25 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n\
                 36 25 0:5 / /proc rw,nosuid,nodev,noexec - proc proc {options}\n"
            )
        };
        assert!(proc_shows_every_process("42", 42, &mount("rw")));
        assert!(proc_shows_every_process("42", 42, &mount("rw,hidepid=0")));
        assert!(proc_shows_every_process("42", 42, &mount("rw,hidepid=off")));
        for hidden in [
            "rw,hidepid=2",
            "rw,hidepid=invisible",
            "rw,hidepid=noaccess,subset=pid",
        ] {
            assert!(
                !proc_shows_every_process("42", 42, &mount(hidden)),
                "{hidden}"
            );
        }
        // /proc of another pid namespace: /proc/self is not this pid.
        assert!(!proc_shows_every_process("7", 42, &mount("rw")));
        // And this machine's, as it is.
        let proc_self = std::fs::read_link("/proc/self").unwrap();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert_eq!(
            proc_shows_every_process(proc_self.to_str().unwrap(), std::process::id(), &mountinfo),
            Holder::this_process().is_some()
        );
    }

    /// A process whose main thread exited while another thread runs shows as a zombie: it is
    /// not gone until its last thread is.
    #[test]
    fn a_zombie_leader_whose_threads_run_is_not_gone() {
        let this = Holder::this_process().unwrap();
        let script = "import ctypes, threading, time\n\
                      threading.Thread(target=time.sleep, args=(30,)).start()\n\
                      time.sleep(0.1)\n\
                      ctypes.CDLL(None).pthread_exit(None)\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .spawn()
            .expect("python3 runs");
        let pid = child.id().to_string();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let start = loop {
            match start_of(&pid) {
                Some((start, 'Z')) => break start,
                _ if std::time::Instant::now() > deadline => panic!("the leader never exited"),
                _ => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        };
        let holder = Holder {
            pid: child.id(),
            start,
            ..this.clone()
        };
        assert!(!holder.is_gone(), "a thread of it still runs");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(holder.is_gone());
    }
}
