//! Every system call the sandbox makes itself (beyond the standard library
//! and `nix`): one place to read what the crate asks of the kernel, each
//! wrapper saying what it is for and, where it is `unsafe`, what the caller
//! must vouch for.
//!
//! - [`raw`]: direct system calls without libc, for code that runs after a
//!   `clone` sharing the executor's memory (the namespaces mode's inits and
//!   helpers) or between `fork` and `exec` (the restricted mode's
//!   confinement): no `errno`, no allocation.
//! - [`process`]: cloning, pidfds, waiting with resource usage, signals,
//!   resource limits, the Landlock ABI query.
//! - [`stack`]: memory for the stacks of cloned children.
//! - [`mount`]: mounts, detached tmpfs mounts and beneath-only opens.
//! - [`socket`]: unix sockets with descriptors attached, waiting for input.

pub(crate) mod mount;
pub(crate) mod process;
pub(crate) mod raw;
pub(crate) mod socket;
pub(crate) mod stack;

use std::os::fd::OwnedFd;

/// A close-on-exec pipe: (read end, write end).
pub(crate) fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// `Ok(r)` for a non-negative result, else the calling thread's `errno`.
fn check<T: Copy + PartialOrd + Default>(r: T) -> std::io::Result<T> {
    if r < T::default() {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// memfd_create(2): an anonymous, close-on-exec file named `name` (for /proc's eyes only).
pub(crate) fn memfd(name: &std::ffi::CStr) -> std::io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
    let fd = check(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })?;
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
