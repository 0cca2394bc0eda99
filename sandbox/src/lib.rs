//! Sandpool's sandbox: isolation and limits for one run of untrusted code.
//!
//! This is the only crate of the workspace with `unsafe` code: the system
//! calls that set up namespaces, mounts, seccomp and cgroups. Everything
//! else reaches it through [`Runner`].
//!
//! - [`runner`]: the [`Runner`] trait the executor's engine and judge use.
//! - [`namespaces`]: mode `namespaces`, fresh namespaces per run (needs root or `CAP_SYS_ADMIN`).
//! - [`restricted`]: mode `restricted`, for unprivileged pods (Landlock, seccomp, rlimits).
//! - [`probe`]: what the kernel allows, reported to clients as features.
//! - [`rootfs`]: the read-only root template; [`workdir`]: each run's `/work`;
//!   [`workroot`]: the executor's work root, locked to one executor.
//! - [`cgroup`]: slot cgroups; [`seccomp`]: the filter; [`limits`]: what a run is held to.
//! - internal: `netns` (network namespaces made ahead of runs), `slotns` (per-slot
//!   mount namespaces), `spawner` (clones inits inside a slot's cgroup), `child` and
//!   `sys` (the code between clone and exec), `supervise` (watches a run from outside),
//!   `mounts`, `runio` (a run's stdin, output capture, executable lookup; shared by the runners).
//! - [`zygote`]: warm starts, runs forked from a per-slot pre-initialised interpreter.

pub mod cgroup;
mod child;
pub mod host;
pub mod limits;
mod mounts;
pub mod namespaces;
mod netns;
pub mod probe;
pub mod restricted;
pub mod rootfs;
mod runio;
pub mod runner;
pub mod seccomp;
mod slotns;
mod spawner;
mod supervise;
mod sys;
pub mod workdir;
pub mod workroot;
pub mod zygote;

pub use limits::Limits;
pub use namespaces::Namespaces;
pub use probe::{Feature, Features};
pub use restricted::Restricted;
pub use runner::{BoxFuture, Runner};
pub use supervise::{RunOutcome, Termination};
pub use workdir::{FetchError, WorkDir, WorkDirError};
pub use zygote::ZygoteConfig;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// How runs are isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IsolationMode {
    /// Fresh namespaces, cgroups, seccomp and an unprivileged uid per run (needs root or CAP_SYS_ADMIN).
    Namespaces,
    /// For pods without extra privileges (Landlock, seccomp, rlimits, a process group per run).
    Restricted,
}

impl IsolationMode {
    /// The mode's name as reported to clients.
    pub fn name(self) -> &'static str {
        match self {
            IsolationMode::Namespaces => "namespaces",
            IsolationMode::Restricted => "restricted",
        }
    }
}

/// Sandbox settings, from the executor's flags.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    pub mode: IsolationMode,
    /// Where work dirs and the root template live (root-owned, private).
    pub work_root: PathBuf,
    /// Host paths the sandbox sees read-only.
    pub ro_paths: Vec<PathBuf>,
    /// Number of run slots; each has its own uid and cgroup.
    pub slots: usize,
    /// uid (and gid) of slot 0; slot i runs as `uid_base + i`.
    pub uid_base: u32,
    /// Device nodes given to GPU runs (empty: no GPU).
    pub gpu_devices: Vec<PathBuf>,
    /// Size cap of each run's work dir.
    pub work_dir_bytes: u64,
    /// Size cap of each run's /tmp and /dev/shm.
    pub tmp_bytes: u64,
}

/// Errors of the sandbox itself (never the program's fault).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("isolation mode {0} is not available: {1}")]
    ModeUnavailable(&'static str, String),
    /// The zygote failed before the program could start: the run may be
    /// started again cold (the runner does so itself).
    #[error("warm start failed before the program started: {0}")]
    WarmNotStarted(String),
    #[error(transparent)]
    Rootfs(#[from] rootfs::RootfsError),
    #[error(transparent)]
    Cgroup(#[from] cgroup::CgroupError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error(transparent)]
    WorkDir(#[from] WorkDirError),
    #[error(transparent)]
    WorkRoot(#[from] workroot::WorkRootError),
    #[error("{0}: {1}")]
    Os(&'static str, std::io::Error),
    #[error("sandbox setup failed while {stage}: {errno}")]
    Setup { stage: &'static str, errno: std::io::Error },
    #[error("could not start {exe}: {errno}")]
    Exec { exe: String, errno: std::io::Error },
    #[error("{0}")]
    Other(String),
}

impl SandboxError {
    /// The error as clients may see it: host paths (cgroup directories, the
    /// work root) stay in the executor's log.
    pub fn client_message(&self) -> String {
        match self {
            SandboxError::Cgroup(_) => "the run's cgroup could not be prepared (details in the executor's log)".into(),
            SandboxError::Rootfs(_) => "the sandbox root could not be built (details in the executor's log)".into(),
            other => other.to_string(),
        }
    }
}

/// Starts the runner of `cfg.mode`, or says why this machine cannot have it.
pub fn open(cfg: SandboxConfig) -> Result<Box<dyn Runner>, SandboxError> {
    match cfg.mode {
        IsolationMode::Namespaces => Ok(Box::new(Namespaces::new(cfg)?)),
        IsolationMode::Restricted => Ok(Box::new(Restricted::new(cfg)?)),
    }
}

/// What one run executes.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Program and arguments; a bare name is looked up in the sandbox's PATH.
    pub argv: Vec<String>,
    /// The complete environment (nothing is inherited).
    pub env: Vec<(String, String)>,
    pub stdin: Vec<u8>,
    pub limits: Limits,
    /// Gives the run the GPU device nodes.
    pub gpu: bool,
    /// Fork the program from the slot's zygote for this configuration (a
    /// warm start) when the slot can; `argv` must then be the zygote's
    /// interpreter and flags, the script, and its arguments.
    pub warm: Option<std::sync::Arc<ZygoteConfig>>,
}

/// Directory (inside the sandbox) where runs start.
pub const WORK_DIR: &str = "/work";

/// PATH inside the sandbox: where a bare program name is looked up, and runs' default PATH.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// A pidfd for `pid`, a child of ours not yet reaped (so the pid is still its).
fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open on a pid; checked for failure below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own; pidfd_open sets close-on-exec.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
}

/// The cgroup directory name of the executor using `work_root`: distinct
/// executors on one machine (tests, several pods' worth) need distinct ones.
pub fn cgroup_name(work_root: &Path) -> String {
    // FNV-1a: stable across runs, so a restarted executor reclaims its own.
    let hash = work_root
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ *b as u64).wrapping_mul(0x100000001b3)
        });
    format!("sandpool-{:08x}", hash as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_messages_never_show_host_cgroup_paths() {
        let e = SandboxError::Cgroup(cgroup::CgroupError::Io {
            path: "/sys/fs/cgroup/memory/kubepods/pod1234/sandpool-1/slot-0/memory.limit_in_bytes".into(),
            source: std::io::Error::from_raw_os_error(libc::EBUSY),
        });
        assert!(e.to_string().contains("/sys/fs/cgroup"), "the log keeps the path");
        assert!(!e.client_message().contains("/sys/fs/cgroup"), "{}", e.client_message());
        assert!(!e.client_message().contains("sandpool-1"), "{}", e.client_message());
    }
}
