//! Mounts on the supervisor side: mount(2) wrappers for the root template and
//! the mounts dir, detached tmpfs mounts for work dirs (`fsopen`/`fsmount`,
//! cloned with `open_tree`), and opens that never leave a directory
//! (`openat2` with `RESOLVE_BENEATH`).

use super::check;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Converts a path to a C string (paths with NUL cannot be mounted).
pub fn c_path(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

/// mount(2) with optional source, type and data.
pub fn mount(
    src: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> std::io::Result<()> {
    let src = src.map(c_path).transpose()?;
    let target = c_path(target)?;
    let fstype = fstype.map(|s| CString::new(s).unwrap_or_default());
    let data = data.map(|s| CString::new(s).unwrap_or_default());
    let opt = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: all pointers are NUL-terminated strings or null, alive for the call.
    let r = unsafe {
        libc::mount(
            opt(&src),
            target.as_ptr(),
            opt(&fstype),
            flags,
            opt(&data) as *const libc::c_void,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Lazily detaches every mount stacked on `target`; missing mounts are fine.
pub fn detach_all(target: &Path) {
    let Ok(c) = c_path(target) else { return };
    // SAFETY: plain umount2 on a valid C string; loop ends on EINVAL/ENOENT.
    while unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {}
}

/// Mounts a tmpfs with the given options at `target` (nosuid, nodev).
pub fn tmpfs(target: &Path, options: &str) -> std::io::Result<()> {
    mount(
        Some(Path::new("tmpfs")),
        target,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(options),
    )
}

/// Bind-mounts `src` on `target` read-only, nosuid, plus `extra` flags.
pub fn bind_ro(src: &Path, target: &Path, extra: libc::c_ulong) -> std::io::Result<()> {
    mount(Some(src), target, None, libc::MS_BIND | libc::MS_REC, None)?;
    mount(
        None,
        target,
        None,
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | extra,
        None,
    )
}

/// openat2(2) of `path` beneath directory `dir`, never through a symlink, a
/// magic link or another mount (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`); close-on-exec.
pub(crate) fn openat2_beneath(dir: BorrowedFd<'_>, path: &str, flags: i32, mode: u32) -> std::io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: open_how is plain data; zeroed is valid and future fields stay zero.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = mode as u64;
    how.resolve =
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_XDEV;
    // SAFETY: openat2 with a valid dir fd, C string and open_how struct.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how,
            std::mem::size_of::<libc::open_how>(),
        )
    })?;
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// mkdirat(2) of `path` (relative to `dir`) with `mode`.
pub(crate) fn mkdirat(dir: BorrowedFd<'_>, path: &CStr, mode: libc::mode_t) -> std::io::Result<()> {
    // SAFETY: mkdirat with a valid dir fd and C string.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), path.as_ptr(), mode) }).map(drop)
}

/// renameat(2) of `from` to `to`, both names directly in directory `dir` (no `/`): the
/// new name replaces whatever entry was there (never following it), except a directory.
pub(crate) fn rename_in(dir: BorrowedFd<'_>, from: &CStr, to: &CStr) -> std::io::Result<()> {
    // SAFETY: renameat with a valid dir fd and C strings.
    check(unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) }).map(drop)
}

/// unlinkat(2) of name `name` in directory `dir` (not a directory).
pub(crate) fn unlink_in(dir: BorrowedFd<'_>, name: &CStr) -> std::io::Result<()> {
    // SAFETY: unlinkat with a valid dir fd and C string.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) }).map(drop)
}

/// Which step of [`tmpfs_detached`] failed.
pub(crate) type Step = &'static str;

/// A new tmpfs, configured with `options` (`key`, `value`), mounted nowhere
/// (`fsopen`, `fsconfig`, `fsmount` with `MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV`):
/// the mount's descriptor, or the failing step and why.
pub(crate) fn tmpfs_detached(options: &[(&str, String)]) -> Result<OwnedFd, (Step, std::io::Error)> {
    const FSOPEN_CLOEXEC: usize = 1;
    const FSCONFIG_SET_STRING: usize = 1;
    const FSCONFIG_CMD_CREATE: usize = 6;
    const FSMOUNT_CLOEXEC: usize = 1;
    const MOUNT_ATTR_NOSUID: usize = 0x2;
    const MOUNT_ATTR_NODEV: usize = 0x4;
    // SAFETY: fsopen with a static C string; the result is checked.
    let fs = check(unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) })
        .map_err(|e| ("fsopen tmpfs", e))?;
    // SAFETY: a fresh descriptor we own.
    let fs = unsafe { OwnedFd::from_raw_fd(fs as i32) };
    for (k, v) in options {
        let (k, v) = (
            CString::new(*k).unwrap_or_default(),
            CString::new(v.as_str()).unwrap_or_default(),
        );
        // SAFETY: fsconfig on our fs context with two C strings alive for the call.
        check(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                FSCONFIG_SET_STRING,
                k.as_ptr(),
                v.as_ptr(),
                0,
            )
        })
        .map_err(|e| ("configuring tmpfs", e))?;
    }
    // SAFETY: fsconfig CMD_CREATE on our fs context takes no pointers.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            0usize,
            0usize,
            0,
        )
    })
    .map_err(|e| ("creating tmpfs", e))?;
    // SAFETY: fsmount on our created fs context takes integers only.
    let m = check(unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            FSMOUNT_CLOEXEC,
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        )
    })
    .map_err(|e| ("fsmount", e))?;
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(m as i32) })
}

/// open_tree(2) with `OPEN_TREE_CLONE`: a detached copy of mount `mount`
/// (fails with EINVAL before Linux 6.15 when `mount` is itself detached).
pub(crate) fn clone_mount(mount: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    const OPEN_TREE_CLONE: u32 = 1;
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | libc::AT_EMPTY_PATH as u32;
    // SAFETY: open_tree on a mount descriptor with an empty path.
    let fd = check(unsafe { libc::syscall(libc::SYS_open_tree, mount.as_raw_fd(), c"".as_ptr(), flags) })?;
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
