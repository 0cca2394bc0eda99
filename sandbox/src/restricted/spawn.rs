//! Starting a run's program: fork from one long-lived thread, confine the
//! child between fork and exec, exec.
//!
//! Everything the child does after fork is a plain system call on data
//! prepared before the fork (async-signal-safe): the death signal, a session of its own, rlimits,
//! `oom_score_adj` 1000,
//! close-on-exec for stray descriptors, `no_new_privs`, the Landlock domain,
//! the seccomp filters, in that order (the filters last, so they never
//! stand in the way of the steps before them).

use crate::sys::raw;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;

/// What confines one run's process, prepared before the fork.
#[derive(Debug)]
pub struct Confinement {
    pub rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit64)>,
    pub landlock: OwnedFd,
    pub filters: std::sync::Arc<Vec<Vec<libc::sock_filter>>>,
    /// The executor's pid: a child whose parent is already gone stops.
    pub parent: i32,
}

const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;

/// A raw call's result as `io::Result` (the errno, nothing allocated).
fn check(r: raw::Res) -> io::Result<()> {
    r.map(drop).map_err(io::Error::from_raw_os_error)
}

impl Confinement {
    /// Runs in the child between fork and exec: raw system calls on data that
    /// outlives the fork (self is borrowed from the parent's Command); no
    /// allocation, no locks, nothing that is unsafe between fork and exec.
    fn apply(&self) -> io::Result<()> {
        // Dies with the executor: nothing of a run outlives it.
        check(raw::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as usize))?;
        if raw::getppid() != self.parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // A session of its own, whose group (numbered as the leader) is the run's: no terminal,
        // and the scheduler's autogroups (on hosts that use them) weigh each run as namespaces
        // mode's, instead of every run sharing the executor's session.
        check(raw::setsid())?;
        for (resource, limit) in &self.rlimits {
            check(raw::setrlimit(*resource, limit))?;
        }
        // Within the pod the run, not the executor, is the OOM killer's choice.
        if let Ok(fd) = raw::open(c"/proc/self/oom_score_adj", libc::O_WRONLY | libc::O_CLOEXEC) {
            let _ = raw::write(fd as i32, b"1000");
            let _ = raw::close(fd as i32);
        }
        // Descriptors without close-on-exec (a library's) must not reach the program.
        let _ = raw::close_range(3, u32::MAX, CLOSE_RANGE_CLOEXEC);
        check(raw::prctl(libc::PR_SET_NO_NEW_PRIVS, 1))?;
        check(raw::landlock_restrict_self(self.landlock.as_raw_fd()))?;
        check(raw::install_filters(&self.filters))
    }

    /// Puts the confinement on `cmd` (consumed when the command spawns).
    pub fn attach(self, cmd: &mut Command) {
        // SAFETY: `apply` is async-signal-safe (see there).
        unsafe { cmd.pre_exec(move || self.apply()) };
    }
}

type Job = (Command, tokio::sync::oneshot::Sender<io::Result<Child>>);

/// A thread that only forks: `PR_SET_PDEATHSIG` fires when the forking
/// *thread* exits, so runs must not be forked from threads the async runtime
/// retires when idle.
#[derive(Debug)]
pub struct Spawner {
    tx: mpsc::Sender<Job>,
}

impl Spawner {
    pub fn start() -> io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("sandpool-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })?;
        Ok(Spawner { tx })
    }

    /// Spawns `cmd` on the spawner thread.
    pub async fn spawn(&self, cmd: Command) -> io::Result<Child> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send((cmd, reply))
            .map_err(|_| io::Error::other("the spawner thread is gone"))?;
        rx.await.map_err(|_| io::Error::other("the spawner thread is gone"))?
    }
}

/// Confines the calling thread (not the process) the way a run is confined,
/// then checks that the confinement holds. The start-up probe runs this on a
/// thread of its own that exits afterwards: Landlock, seccomp and
/// `no_new_privs` all apply to one thread, so the executor stays unconfined.
pub fn self_test(c: &Confinement, outside: &std::path::Path) -> Result<(), String> {
    let check = |what: &str, r: raw::Res| {
        r.map(drop)
            .map_err(|e| format!("{what}: {}", io::Error::from_raw_os_error(e)))
    };
    // These confine only this thread.
    check("no_new_privs", raw::prctl(libc::PR_SET_NO_NEW_PRIVS, 1))?;
    check(
        "landlock_restrict_self",
        raw::landlock_restrict_self(c.landlock.as_raw_fd()),
    )?;
    check("installing the seccomp filter", raw::install_filters(&c.filters))?;
    if let Ok(s) = raw::socket(libc::AF_INET, libc::SOCK_STREAM, 0) {
        let _ = raw::close(s as i32);
        return Err("the seccomp filter let an AF_INET socket be created".into());
    }
    match std::fs::read_dir(outside) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => Ok(()),
        Err(e) => Err(format!(
            "Landlock check: reading {} failed with {e}, not EACCES",
            outside.display()
        )),
        Ok(_) => Err(format!(
            "Landlock did not stop reading {}, outside the allowed paths",
            outside.display()
        )),
    }
}
