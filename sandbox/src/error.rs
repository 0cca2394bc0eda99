//! The sandbox's own failures (never the program's fault), and what of them
//! a client may see.

pub use crate::seccomp::SeccompError;
pub use crate::workdir::WorkDirError;
pub use crate::workroot::WorkRootError;

/// A mode name that is not one of [`crate::IsolationMode::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown isolation mode {0:?} [possible values: namespaces, restricted]")]
pub struct UnknownMode(pub String);

/// Errors setting up or driving cgroups.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no usable cgroup hierarchy with memory and pids controllers")]
    Unavailable,
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// The limit is below what the slot holds even after reclaim (cgroup v1 refuses it).
    #[error("memory limit of {limit} bytes is below the {usage} bytes the slot holds")]
    LimitBelowUsage { limit: u64, usage: u64 },
}

/// Errors building the template.
#[derive(Debug, thiserror::Error)]
#[error("building the sandbox root at {path}: {step}: {source}")]
pub struct RootfsError {
    pub(crate) path: std::path::PathBuf,
    pub(crate) step: String,
    pub(crate) source: std::io::Error,
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
    Rootfs(#[from] RootfsError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
    #[error(transparent)]
    WorkDir(#[from] WorkDirError),
    #[error(transparent)]
    WorkRoot(#[from] WorkRootError),
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

/// `SandboxError::Os(what, e)` as a `map_err` argument.
pub(crate) fn os(what: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |e| SandboxError::Os(what, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_messages_never_show_host_cgroup_paths() {
        let e = SandboxError::Cgroup(CgroupError::Io {
            path: "/sys/fs/cgroup/memory/kubepods/pod1234/sandpool-1/slot-0/memory.limit_in_bytes".into(),
            source: std::io::Error::from_raw_os_error(libc::EBUSY),
        });
        assert!(e.to_string().contains("/sys/fs/cgroup"), "the log keeps the path");
        assert!(!e.client_message().contains("/sys/fs/cgroup"), "{}", e.client_message());
        assert!(!e.client_message().contains("sandpool-1"), "{}", e.client_message());
    }
}
