//! The executor's work root: one executor at a time, and which part of it the
//! executor may mount on.
//!
//! Start-up reclaims what a crashed executor left under its work root: it
//! kills what is left in the slot cgroups named after that root and detaches
//! the mounts it made there. A second executor started on the same root
//! (a CLI beside a server, a mistyped flag) would do that to a live one: kill
//! its spawners and unmount its templates. So the root is locked first
//! (`flock`, released by the kernel when the process dies, however it dies).
//!
//! The executor's own mounts live in [`mounts_dir`], never on the root itself:
//! in a pod the root *is* a mount (the emptyDir), and detaching "everything
//! mounted at the root" unmounted the pod's volume (issue 22's crash-loop).

use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Held for the executor's life: no other executor uses this work root meanwhile.
#[derive(Debug)]
pub struct WorkRootLock {
    _lock: Flock<File>,
}

/// Why the work root cannot be ours.
#[derive(Debug, thiserror::Error)]
pub enum WorkRootError {
    #[error("creating the work root {0}: {1}")]
    Create(PathBuf, std::io::Error),
    #[error("opening the work root {0}: {1}")]
    Open(PathBuf, std::io::Error),
    #[error(
        "the work root {0} is in use by another executor (pid {1}): \
         give each executor a --work-root of its own"
    )]
    InUse(PathBuf, String),
    #[error("locking the work root {0}: {1}")]
    Lock(PathBuf, nix::errno::Errno),
}

impl WorkRootLock {
    /// Creates `root` if needed and locks it, or says who holds it.
    pub fn acquire(root: &Path) -> Result<Self, WorkRootError> {
        std::fs::create_dir_all(root).map_err(|e| WorkRootError::Create(root.to_owned(), e))?;
        // A directory can be flocked; no file of ours has to be writable for it.
        let dir = File::open(root).map_err(|e| WorkRootError::Open(root.to_owned(), e))?;
        match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(WorkRootLock { _lock: lock }),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(WorkRootError::InUse(root.to_owned(), holder(root))),
            Err((_, e)) => Err(WorkRootError::Lock(root.to_owned(), e)),
        }
    }
}

/// The pid holding a flock on `root`, from /proc/locks (best effort).
fn holder(root: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(root) else {
        return "unknown".into();
    };
    // "1: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF", device numbers in hex.
    let file = format!(
        "{:02x}:{:02x}:{}",
        libc::major(meta.dev()),
        libc::minor(meta.dev()),
        meta.ino()
    );
    std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&file.as_str()))
        .and_then(|f| f.get(4).map(|pid| pid.to_string()))
        .unwrap_or_else(|| "unknown".into())
}

/// Where the executor's own mounts (root templates) go under `root`.
pub fn mounts_dir(root: &Path) -> PathBuf {
    root.join("mnt")
}

/// Empties (or creates) the shared dir, mode 0755: what an earlier executor on this work root
/// built is not trusted. Called with the work root locked.
pub(crate) fn prepare_shared_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_root_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = WorkRootLock::acquire(dir.path()).expect("first");
        let e = WorkRootLock::acquire(dir.path()).expect_err("second");
        let msg = e.to_string();
        assert!(msg.contains("in use by another executor"), "{msg}");
        assert!(msg.contains(&format!("pid {}", std::process::id())), "{msg}");
        drop(first);
        WorkRootLock::acquire(dir.path()).expect("free again once the first is gone");
    }
}
