//! What every way of starting a run needs on the executor's side: the
//! program's stdin as a memfd, its output read up to a cap, its executable
//! found in the sandbox's PATH, and rlimit values.

use crate::{PATH, SandboxError};
use std::io::{Seek, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use tokio::io::AsyncReadExt;

/// `stdin` as a sealed-off, rewound memfd: the program reads it at its own pace
/// and nothing on the executor's side waits for it.
pub(crate) fn stdin_memfd(data: &[u8]) -> Result<OwnedFd, SandboxError> {
    // SAFETY: memfd_create with a static name.
    let fd = unsafe { libc::memfd_create(c"stdin".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(SandboxError::Os("memfd_create", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor we own.
    let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
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
    pub fn read(out: OwnedFd, err: OwnedFd, cap: u64, kill: crate::supervise::KillHandle) -> Self {
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
