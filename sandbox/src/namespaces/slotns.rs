//! Per-slot mount namespaces, made once at start-up.
//!
//! Creating and destroying a mount namespace per run costs a copy of the
//! host's whole mount table and an RCU grace period on teardown (milliseconds
//! on a node with hundreds of mounts). Instead each slot owns a namespace
//! whose root is the read-only template; a run's init joins it with
//! `setns`. A cold run's init then copies it (`unshare`: the template's few
//! mounts, not the host's table) and mounts its own `/work`, `/tmp`,
//! `/dev/shm` and `/proc` in the copy, which the kernel tears down, all
//! mounts at once, with the run's last process. A warm run's init mounts
//! them in the slot's namespace itself (the zygote's child joins it there)
//! and detaches them again when the run ends.

use crate::sys::raw as sys;
use crate::sys::stack::Stack;
use crate::sys::{mount, process};
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

struct Helper {
    root: CString,
    ns_fd: i32,
    stage: u32,
    errno: i32,
}

extern "C" fn helper_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the parent is suspended (CLONE_VFORK) while we use its memory.
    let h = unsafe { &mut *(arg as *mut Helper) };
    let mut step = |stage: u32, r: sys::Res| -> bool {
        if let Err(e) = r {
            h.stage = stage;
            h.errno = e;
            return false;
        }
        true
    };
    // The descriptor lands in the shared fd table (CLONE_FILES) and keeps
    // the namespace alive after we exit.
    let fd = sys::open(c"/proc/self/ns/mnt", libc::O_RDONLY | libc::O_CLOEXEC);
    if let Ok(fd) = fd {
        h.ns_fd = fd as i32;
    }
    let _ = step(1, fd)
        && step(2, sys::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None))
        && step(3, sys::chdir(&h.root))
        && step(4, sys::pivot_root(c".", c"."))
        && step(5, sys::umount2(c".", libc::MNT_DETACH))
        && step(6, sys::chdir(c"/"));
    sys::exit(0)
}

/// Creates a mount namespace whose root is `template`, with nothing of the host mounted.
pub fn create(template: &Path) -> std::io::Result<OwnedFd> {
    let root = mount::c_path(template)?;
    let mut h = Helper {
        root,
        ns_fd: -1,
        stage: 0,
        errno: 0,
    };
    let stack = Stack::new(64 * 1024)?;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::CLONE_NEWNS | libc::SIGCHLD;
    // SAFETY: the helper runs on its own stack while we are suspended.
    let pid = unsafe {
        process::clone(
            helper_main,
            stack.top(),
            flags,
            &mut h as *mut Helper as *mut libc::c_void,
            std::ptr::null_mut(),
        )
    }?;
    let _ = process::waitpid(pid);
    let fd = (h.ns_fd >= 0).then(|| {
        // SAFETY: the helper opened this descriptor in our shared table.
        unsafe { OwnedFd::from_raw_fd(h.ns_fd) }
    });
    if h.stage != 0 {
        let what = [
            "",
            "opening the namespace",
            "making mounts private",
            "entering the template",
            "pivot_root",
            "detaching the host's mounts",
            "chdir /",
        ];
        let err = std::io::Error::from_raw_os_error(h.errno);
        return Err(std::io::Error::new(
            err.kind(),
            format!("{}: {err}", what.get(h.stage as usize).unwrap_or(&"?")),
        ));
    }
    fd.ok_or_else(|| std::io::Error::other("the namespace helper opened no descriptor"))
}

/// Where each run mounts its own filesystems inside the slot's namespace,
/// in mounting order.
pub const RUN_MOUNT_POINTS: [&CStr; 4] = [c"/work", c"/tmp", c"/dev/shm", c"/proc"];

struct Clearer {
    ns_fd: i32,
    errno: i32,
}

extern "C" fn clearer_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the parent is suspended (CLONE_VFORK) while we use its memory.
    let c = unsafe { &mut *(arg as *mut Clearer) };
    // Not sharing the executor's filesystem context (no CLONE_FS) is what lets us join.
    if let Err(e) = sys::setns(c.ns_fd, libc::CLONE_NEWNS) {
        c.errno = e;
        sys::exit(1);
    }
    for p in RUN_MOUNT_POINTS.iter().rev() {
        sys::detach_all(p);
    }
    sys::exit(0)
}

/// Detaches a run's `/work`, `/tmp`, `/dev/shm` and `/proc` from the slot's
/// namespace `ns`, from outside: an init that was killed could not. Their
/// memory is freed (and uncharged from the slot's cgroup) once the last user
/// is gone, which is at once when the run's processes are all dead.
pub fn clear(ns: &OwnedFd) -> std::io::Result<()> {
    let mut c = Clearer {
        ns_fd: ns.as_raw_fd(),
        errno: 0,
    };
    let stack = Stack::new(64 * 1024)?;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD;
    // SAFETY: the helper runs on its own stack while we are suspended and
    // touches only `c` and raw system calls.
    let pid = unsafe {
        process::clone(
            clearer_main,
            stack.top(),
            flags,
            &mut c as *mut Clearer as *mut libc::c_void,
            std::ptr::null_mut(),
        )
    }?;
    let _ = process::waitpid(pid);
    if c.errno != 0 {
        return Err(std::io::Error::from_raw_os_error(c.errno));
    }
    Ok(())
}
