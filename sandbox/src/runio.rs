//! The run machinery both modes share, on the executor's side: the
//! program's stdin as a memfd, its output read up to a cap, its executable
//! found in the sandbox's PATH, rlimit values, and the pidfd that kills it.

use crate::{PATH, SandboxError};
use std::io::{Seek, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use tokio::io::unix::AsyncFd;

/// `stdin` as a sealed-off, rewound memfd: the program reads it at its own pace
/// and nothing on the executor's side waits for it.
pub(crate) fn stdin_memfd(data: &[u8]) -> Result<OwnedFd, SandboxError> {
    let fd = crate::sys::memfd(c"stdin").map_err(|e| SandboxError::Os("memfd_create", e))?;
    let mut f = std::fs::File::from(fd);
    f.write_all(data).map_err(|e| SandboxError::Os("writing stdin", e))?;
    f.rewind().map_err(|e| SandboxError::Os("rewinding stdin", e))?;
    Ok(f.into())
}

/// Finds `name` in the sandbox's PATH. The sandbox's /usr, /bin, ... are
/// read-only views of the host's, so the host's files answer.
pub(crate) fn resolve_exe(name: &str) -> String {
    if name.contains('/') {
        return name.to_owned();
    }
    PATH.split(':')
        .map(|dir| format!("{dir}/{name}"))
        .find(|p| Path::new(p).is_file())
        .unwrap_or_else(|| name.to_owned())
}

pub(crate) fn rlimit(cur: u64, max: u64) -> libc::rlimit64 {
    libc::rlimit64 {
        rlim_cur: cur,
        rlim_max: max,
    }
}

/// The pidfd of a run's first process (the namespaces mode's init, the
/// restricted mode's group leader), shared by everything that may kill the
/// run (the supervisor, the output readers): the descriptor stays open while any of
/// them holds it, so its number can never come to name another process.
#[derive(Debug, Clone)]
pub(crate) struct KillHandle(Arc<OwnedFd>);

impl KillHandle {
    pub fn new(pidfd: OwnedFd) -> Self {
        KillHandle(Arc::new(pidfd))
    }

    /// SIGKILLs the process; harmless once it has exited or been reaped.
    pub fn kill(&self) {
        crate::sys::process::pidfd_kill(self.0.as_fd());
    }
}

impl KillHandle {
    /// The process's exit, as the pidfd turning readable.
    pub fn watch(&self) -> Result<AsyncFd<KillHandle>, SandboxError> {
        // SAFETY: the handle keeps returning the same open descriptor while registered.
        unsafe { AsyncFd::register_with_interest(self.clone(), tokio::io::Interest::READABLE) }
            .map_err(|e| SandboxError::Os("watching the pidfd", e.into()))
    }
}

impl AsRawFd for KillHandle {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}

/// User plus system CPU time in a `rusage`.
pub(crate) fn cpu_time(ru: &libc::rusage) -> std::time::Duration {
    let tv = |t: libc::timeval| {
        std::time::Duration::from_secs(t.tv_sec as u64) + std::time::Duration::from_micros(t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// `(exit_code, signal)` of a program from its wait status; a program with
/// none (its reporter was killed first) or stopped counts as SIGKILLed.
pub(crate) fn exit_and_signal(status: Option<i32>) -> (i32, i32) {
    match status {
        Some(s) if libc::WIFEXITED(s) => (libc::WEXITSTATUS(s), 0),
        Some(s) if libc::WIFSIGNALED(s) => (0, libc::WTERMSIG(s)),
        _ => (0, libc::SIGKILL),
    }
}

/// Reads a stream up to `cap` bytes; past it, flags truncation and calls
/// `on_overflow` (which kills the run).
async fn capture(fd: OwnedFd, cap: u64, on_overflow: Arc<dyn Fn() + Send + Sync>) -> (Vec<u8>, bool) {
    let Ok(mut rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return (Vec::new(), false);
    };
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match rx.read(&mut buf).await {
            Ok(0) | Err(_) => return (out, false),
            Ok(n) => {
                let room = (cap as usize).saturating_sub(out.len());
                out.extend_from_slice(&buf[..n.min(room)]);
                if n > room {
                    on_overflow();
                    return (out, true);
                }
            }
        }
    }
}

/// A run's stdout and stderr being read, each up to a cap.
pub(crate) struct Output {
    stdout: tokio::task::JoinHandle<(Vec<u8>, bool)>,
    stderr: tokio::task::JoinHandle<(Vec<u8>, bool)>,
    overflowed: Arc<std::sync::atomic::AtomicBool>,
}

/// What the readers got: (bytes, truncated) for stdout and stderr, and
/// whether either stream went past its cap (the run was killed for it).
pub(crate) struct Captured {
    pub stdout: (Vec<u8>, bool),
    pub stderr: (Vec<u8>, bool),
    pub overflowed: bool,
}

impl Output {
    /// Starts reading `out` and `err`; a stream past `cap` kills the run
    /// through `kill`, its pidfd (never a pid or group: a reader may outlive
    /// the run, and a number with it).
    pub fn read(out: OwnedFd, err: OwnedFd, cap: u64, kill: KillHandle) -> Self {
        let overflowed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let on_overflow: Arc<dyn Fn() + Send + Sync> = {
            let overflowed = overflowed.clone();
            Arc::new(move || {
                overflowed.store(true, std::sync::atomic::Ordering::SeqCst);
                kill.kill();
            })
        };
        Output {
            stdout: tokio::spawn(capture(out, cap, on_overflow.clone())),
            stderr: tokio::spawn(capture(err, cap, on_overflow)),
            overflowed,
        }
    }

    /// Once every writer is dead: what was read, waiting at most 2 s per
    /// stream (a descendant the kill missed may still hold one open).
    pub async fn collect(self) -> Captured {
        let grace = std::time::Duration::from_secs(2);
        let take = |t| async move {
            tokio::time::timeout(grace, t)
                .await
                .ok()
                .and_then(|r: Result<_, _>| r.ok())
                .unwrap_or_default()
        };
        Captured {
            stdout: take(self.stdout).await,
            stderr: take(self.stderr).await,
            overflowed: self.overflowed.load(std::sync::atomic::Ordering::SeqCst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// The output readers kill through their own copy of the handle: when the
    /// supervisor lets go of it (the init reaped, or the run future dropped),
    /// the descriptor must stay open, or its number could be handed to another
    /// run's pidfd and a reader's SIGKILL would land there.
    #[test]
    fn a_kill_handle_outlives_its_first_owner_and_kills_only_its_process() {
        let pidfd_open = |pid: u32| crate::sys::process::pidfd_open(pid as i32).expect("pidfd_open");
        let sleep = || std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let (mut a, mut b) = (sleep(), sleep());
        let supervisor = KillHandle::new(pidfd_open(a.id()));
        let reader = supervisor.clone();
        let number = supervisor.as_raw_fd();
        drop(supervisor);
        // Descriptors are numbered lowest-free-first: a closed number would be taken here.
        let other = pidfd_open(b.id());
        assert_ne!(other.as_raw_fd(), number, "the handle's descriptor was closed");
        reader.kill();
        assert_eq!(a.wait().expect("wait a").signal(), Some(libc::SIGKILL));
        assert!(b.try_wait().expect("try_wait b").is_none(), "the other process was hit");
        let _ = b.kill();
        let _ = b.wait();
        // Harmless once the process is gone and reaped.
        reader.kill();
    }
}
