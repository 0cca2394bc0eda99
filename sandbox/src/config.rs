//! What the executor chooses at start-up: the isolation mode and the
//! sandbox's settings, from its flags.

use crate::error::UnknownMode;
use std::path::{Path, PathBuf};

/// Host paths visible (read-only) inside the sandbox by default: the
/// namespaces mode's root template binds them, the restricted mode's Landlock
/// rules grant them.
pub const DEFAULT_RO_PATHS: &[&str] = &[
    "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc", "/opt",
];

/// How runs are isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationMode {
    /// Fresh namespaces, cgroups, seccomp and an unprivileged uid per run (needs root or CAP_SYS_ADMIN).
    Namespaces,
    /// For pods without extra privileges (Landlock, seccomp, rlimits, a process group per run).
    Restricted,
}

impl IsolationMode {
    /// Every mode, in the order flags list them.
    pub const ALL: [IsolationMode; 2] = [IsolationMode::Namespaces, IsolationMode::Restricted];

    /// The mode's name as reported to clients (and as flags spell it).
    pub fn name(self) -> &'static str {
        match self {
            IsolationMode::Namespaces => "namespaces",
            IsolationMode::Restricted => "restricted",
        }
    }
}

impl std::fmt::Display for IsolationMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a mode by its [`IsolationMode::name`] (what `--isolation` takes).
impl std::str::FromStr for IsolationMode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IsolationMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownMode(s.to_owned()))
    }
}

/// Sandbox settings, from the executor's flags.
/// How namespaces mode keeps a run off the network (`--network-isolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkIsolation {
    /// `seccomp` where Landlock scopes abstract unix sockets (ABI 6+), else `namespace`.
    Auto,
    /// A fresh network namespace per run, with only loopback.
    Namespace,
    /// No network namespace: seccomp refuses every socket family but `AF_UNIX`, and
    /// Landlock scopes abstract unix sockets and signals to the run (needs ABI 6+).
    Seccomp,
}

impl NetworkIsolation {
    pub fn name(self) -> &'static str {
        match self {
            NetworkIsolation::Auto => "auto",
            NetworkIsolation::Namespace => "namespace",
            NetworkIsolation::Seccomp => "seccomp",
        }
    }
}

impl std::fmt::Display for NetworkIsolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for NetworkIsolation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            NetworkIsolation::Auto,
            NetworkIsolation::Namespace,
            NetworkIsolation::Seccomp,
        ]
        .into_iter()
        .find(|m| m.name() == s)
        .ok_or_else(|| format!("unknown network isolation {s:?}: auto, namespace or seccomp"))
    }
}

#[derive(Debug, Clone)]
pub struct SandboxConfig {
    pub mode: IsolationMode,
    /// Namespaces mode's network isolation (restricted mode never has a network namespace).
    pub network: NetworkIsolation,
    /// Where work dirs and the root template live (root-owned, private).
    pub work_root: PathBuf,
    /// Host paths the sandbox sees read-only.
    pub ro_paths: Vec<PathBuf>,
    /// Number of run slots; each has its own uid and cgroup.
    pub slots: usize,
    /// Session seats (namespaces mode): identities `slots..slots + seats`, each with a uid
    /// and a cgroup of its own, that a long-lived session runs in without holding a slot
    /// (see [`crate::Runner::seats`]). 0: none.
    pub seats: usize,
    /// uid (and gid) of slot 0; slot i runs as `uid_base + i`, seat k as `uid_base + slots + k`.
    pub uid_base: u32,
    /// Device nodes given to GPU runs (empty: no GPU).
    pub gpu_devices: Vec<PathBuf>,
    /// The memory all session seats may hold together (namespaces mode with cgroups): see
    /// [`SeatMemory`]. None: no ceiling beyond each seat's own limit.
    pub seat_memory: Option<SeatMemory>,
    /// Size cap of each run's work dir.
    pub work_dir_bytes: u64,
    /// Size cap of each run's /tmp and /dev/shm.
    pub tmp_bytes: u64,
    /// Artifacts built once that runs share (compiled headers, class archives),
    /// seen read-only at [`SHARED_PATH`]; `Runner::shared_dir` says where to write
    /// them. Restricted mode uses this host directory (emptied at start);
    /// namespaces mode a tmpfs of its own, detached from the host (`Some` turns it on).
    pub shared_dir: Option<PathBuf>,
}

/// The session seats' memory ceiling: one parent cgroup holds every seat's, limited to
/// `ceiling` bytes, and each seat's own limit is its share of it. Shares never add up past
/// the ceiling (see [`crate::SeatShare`]), so a session that grows meets its own limit, and
/// the kernel's OOM kill stays in its own cgroup: never another session's, never a slot's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeatMemory {
    /// What all seats' cgroups may hold together (processes and the tmpfs pages they wrote).
    pub ceiling: u64,
    /// What a seat's share is at least, room allowed, while its session is open: what an
    /// idle session is counted at (an interpreter starts within it).
    pub floor: u64,
}

/// Where runs see [`SandboxConfig::shared_dir`], read-only: a fixed path, so
/// that commands name it the same way in both modes (restricted mode rewrites
/// it to the host directory, as it does `/work` and `/tmp`).
pub const SHARED_PATH: &str = "/sandpool/shared";

impl SandboxConfig {
    /// Refuses a configuration of another mode than the runner `mode` being opened.
    pub(crate) fn expect_mode(&self, mode: IsolationMode) -> Result<(), crate::SandboxError> {
        if self.mode == mode {
            return Ok(());
        }
        Err(crate::SandboxError::Other(format!(
            "the {mode} runner cannot run mode {}",
            self.mode
        )))
    }
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
    fn modes_parse_by_the_names_they_report() {
        for m in IsolationMode::ALL {
            assert_eq!(m.name().parse::<IsolationMode>(), Ok(m));
        }
        let e = "bogus".parse::<IsolationMode>().expect_err("bogus");
        assert!(e.to_string().contains("namespaces, restricted"), "{e}");
    }
}
