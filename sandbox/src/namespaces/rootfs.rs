//! The read-only root filesystem every run sees, built once at start-up.
//!
//! A small tmpfs holds the skeleton; allow-listed host paths (`/usr`, `/etc`,
//! ...) are bind-mounted into it read-only, device nodes one by one. Each
//! run's init then mounts its own `/work`, `/tmp`, `/dev/shm` and `/proc` on
//! top (a session seat's run its `/work` at `/home/user` too, in a template
//! of the seats' own), inside its private mount namespace, and pivots into it.

use crate::error::RootfsError;
use crate::sys::mount as mounts;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// Device nodes every run gets.
pub const BASE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// A built root filesystem template.
#[derive(Debug)]
pub struct RootTemplate {
    pub path: PathBuf,
}

/// Builds the template at `dir`, replacing any left by an earlier executor. `seat_home`: with
/// a mount point at [`crate::SEAT_HOME`], for session seats' runs (the slots' has no `/home`).
pub fn build(
    dir: &Path,
    seat_home: bool,
    ro_paths: &[PathBuf],
    shared: Option<&Path>,
    devices: &[PathBuf],
    passwd: &str,
    group: &str,
) -> Result<RootTemplate, RootfsError> {
    let e = |step: &str| {
        let step = step.to_owned();
        move |source| RootfsError {
            path: dir.to_owned(),
            step,
            source,
        }
    };
    mounts::detach_all(dir);
    fs::create_dir_all(dir).map_err(e("mkdir"))?;
    mounts::tmpfs(dir, "size=4m,mode=0755").map_err(e("mounting the skeleton tmpfs"))?;
    for p in ro_paths {
        let rel = p.strip_prefix("/").unwrap_or(p);
        let target = dir.join(rel);
        let Ok(meta) = fs::symlink_metadata(p) else { continue };
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(e("mkdir"))?;
        }
        if meta.file_type().is_symlink() {
            // Merged-/usr systems link /bin to usr/bin: keep the link.
            let to = fs::read_link(p).map_err(e("readlink"))?;
            symlink(to, &target).map_err(e("symlink"))?;
            continue;
        }
        if meta.is_dir() {
            fs::create_dir_all(&target).map_err(e("mkdir"))?;
        } else {
            fs::write(&target, b"").map_err(e("creating a mount point"))?;
        }
        mounts::bind_ro(p, &target, libc::MS_NODEV).map_err(e(&format!("binding {}", p.display())))?;
    }
    // Bound at a fixed path, not its own: the work root may be under /tmp,
    // which every run gets privately.
    if let Some(host) = shared {
        let target = dir.join(crate::SHARED_PATH.trim_start_matches('/'));
        fs::create_dir_all(&target).map_err(e("mkdir"))?;
        mounts::bind_ro(host, &target, libc::MS_NODEV).map_err(e("binding the shared dir"))?;
    }
    // Name the sandbox users so tools that look up the current user work.
    let etc = dir.join("etc");
    if etc.is_dir() {
        // On a tmpfs of their own: a bind's source path shows in the run's
        // /proc/self/mountinfo, and on the host's disk it would name the work root.
        let generated = dir.with_extension("etc");
        mounts::detach_all(&generated);
        fs::create_dir_all(&generated).map_err(e("mkdir"))?;
        mounts::tmpfs(&generated, "size=1m,mode=0755").map_err(e("mounting the passwd tmpfs"))?;
        for (name, text) in [("passwd", passwd), ("group", group)] {
            fs::write(generated.join(name), text).map_err(e("writing passwd"))?;
            if etc.join(name).exists() {
                mounts::bind_ro(&generated.join(name), &etc.join(name), libc::MS_NODEV).map_err(e("binding passwd"))?;
            }
        }
    }
    for d in ["work", "tmp", "proc", "dev/shm"] {
        fs::create_dir_all(dir.join(d)).map_err(e("mkdir"))?;
    }
    if seat_home {
        let home = crate::SEAT_HOME.trim_start_matches('/');
        fs::create_dir_all(dir.join(home)).map_err(e("mkdir"))?;
    }
    for dev in devices {
        let Some(name) = dev.file_name() else { continue };
        if !dev.exists() {
            continue;
        }
        let target = dir.join("dev").join(name);
        fs::write(&target, b"").map_err(e("creating a device mount point"))?;
        mounts::bind_ro(dev, &target, libc::MS_NOEXEC).map_err(e(&format!("binding {}", dev.display())))?;
    }
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        symlink(to, dir.join("dev").join(name)).map_err(e("symlink"))?;
    }
    mounts::mount(
        None,
        dir,
        None,
        libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )
    .map_err(e("making the skeleton read-only"))?;
    Ok(RootTemplate { path: dir.to_owned() })
}
