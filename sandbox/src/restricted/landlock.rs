//! The Landlock ruleset of one run: system directories read-only, the run's
//! work and temporary directories read-write, a few device nodes, nothing
//! else; TCP bind/connect denied (ABI 4+); signals and abstract unix sockets
//! scoped to the run (ABI 6+).

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Device nodes a run may read and write (never execute).
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// Kernel interfaces a run may read: runtimes look at /proc/self and CPU
/// topology. Other processes' /proc entries that matter (environ, mem, fd)
/// need ptrace access, which Landlock denies outside the run's own domain.
const READ_ONLY: &[&str] = &["/proc", "/sys/devices/system/cpu", "/sys/fs/cgroup"];

/// The kernel's Landlock ABI version, or why there is none.
pub fn abi_version() -> Result<i32, String> {
    let e = match crate::sys::process::landlock_abi() {
        Ok(v) if v > 0 => return Ok(v),
        Ok(v) => std::io::Error::other(format!("ABI {v}")),
        Err(e) => e,
    };
    Err(match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) => "Landlock is built in but disabled: add landlock to the kernel's lsm= boot parameter".into(),
        Some(libc::ENOSYS) => "Landlock is not available: the kernel lacks it (Linux 5.13+ with CONFIG_SECURITY_LANDLOCK) \
                               or the container runtime's seccomp profile refuses the landlock_* calls (Docker before 23, \
                               old containerd profiles)"
            .into(),
        _ => format!("Landlock is not available: {e}"),
    })
}

/// The crate's ABI for a version number (newer kernels: the newest the crate knows).
pub fn abi(version: i32) -> ABI {
    match version {
        ..=0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    }
}

/// Errors building a ruleset (the executor's, never the program's).
#[derive(Debug, thiserror::Error)]
#[error("building the Landlock ruleset: {0}")]
pub struct LandlockError(String);

fn err(e: impl std::fmt::Display) -> LandlockError {
    LandlockError(e.to_string())
}

/// What one run may reach.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Read and execute (the system directories, --ro-paths).
    pub read_exec: Vec<PathBuf>,
    /// Read and write everything beneath (the run's work and temporary directories).
    pub read_write: Vec<PathBuf>,
}

/// Builds the ruleset and returns its descriptor, to be enforced by the
/// child (`landlock_restrict_self`) between fork and exec.
///
/// Hard requirement on the filesystem rules: a kernel that cannot enforce
/// them fails here (the runner probed for ABI 1 at start-up). Network and
/// scope rules are best effort: they are used where the ABI has them.
pub fn ruleset(version: i32, paths: &Paths) -> Result<OwnedFd, LandlockError> {
    let abi = abi(version);
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(err)?;
    if version >= 4 {
        rs = rs.handle_access(AccessNet::from_all(abi)).map_err(err)?;
    }
    if version >= 6 {
        rs = rs.scope(Scope::from_all(abi)).map_err(err)?;
    }
    let mut created = rs.create().map_err(err)?;
    let read = AccessFs::from_read(abi);
    let read_only: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::ReadDir;
    let mut dev: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::WriteFile;
    if version >= 3 {
        dev |= AccessFs::Truncate;
    }
    let rules = paths
        .read_exec
        .iter()
        .map(|p| (p.as_path(), read))
        .chain(READ_ONLY.iter().map(|p| (Path::new(*p), read_only)))
        .chain(DEVICES.iter().map(|p| (Path::new(*p), dev)))
        .chain(paths.read_write.iter().map(|p| (p.as_path(), AccessFs::from_all(abi))));
    for (path, access) in rules {
        // A missing system directory (no /lib32 here) is simply not granted.
        let Ok(fd) = PathFd::new(path) else { continue };
        // Files take only file rights; the crate refuses directory rights on them.
        let access = if path.is_dir() {
            access
        } else {
            access & AccessFs::from_file(abi)
        };
        created = created.add_rule(PathBeneath::new(fd, access)).map_err(err)?;
    }
    Option::<OwnedFd>::from(created).ok_or_else(|| err("the kernel does not enforce Landlock"))
}
