//! Thin, checked wrappers over mount(2) for the supervisor side.

use std::ffi::CString;
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
