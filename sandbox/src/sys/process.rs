//! Processes: cloning children onto stacks of our own, pidfds, signals,
//! waiting with resource usage, limits, and kernel queries.

use super::check;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The entry point of a cloned child: gets `arg`, returns its exit code.
pub(crate) type ChildFn = extern "C" fn(*mut libc::c_void) -> libc::c_int;

/// clone(2) through libc: starts `f(arg)` in a child on `stack_top`;
/// returns its pid. `ptid` receives the child's pid (`CLONE_PARENT_SETTID`)
/// or a pidfd (`CLONE_PIDFD`) when `flags` ask for one, else may be null.
///
/// Failure is reported through `errno`, read here: in a child that shares
/// its creator's memory that is the creator thread's, which only waits.
///
/// # Safety
/// `stack_top` must be the top of a stack (see [`super::stack::Stack`]) that
/// outlives the child's use of it, `arg` what `f` expects and alive as long
/// as the child reads it, and `ptid` null or valid for a write. With
/// `CLONE_VM` the child must touch no libc state (see [`super::raw`]).
pub(crate) unsafe fn clone(
    f: ChildFn,
    stack_top: *mut libc::c_void,
    flags: libc::c_int,
    arg: *mut libc::c_void,
    ptid: *mut libc::c_int,
) -> std::io::Result<i32> {
    // SAFETY: the caller vouches for the stack, the argument and `ptid`.
    check(unsafe { libc::clone(f, stack_top, flags, arg, ptid) })
}

/// pidfd_open(2): a pidfd for `pid`, a child of ours not yet reaped (so the pid is still its).
pub(crate) fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes integers; the result is checked.
    let fd = check(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: a fresh descriptor we own; pidfd_open sets close-on-exec.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// pidfd_send_signal(2) of SIGKILL; harmless once the process has exited
/// or been reaped (the descriptor then names no process).
pub(crate) fn pidfd_kill(pidfd: BorrowedFd<'_>) {
    // SAFETY: pidfd_send_signal on a descriptor the caller holds open, with a null siginfo.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            0usize,
            0u32,
        )
    };
}

/// kill(2) of SIGKILL to `pid` (a negative `pid`: that process group).
///
/// Sound only while the number is known to be ours (an unreaped child, or a
/// group whose leader is unreaped): the caller's to guarantee.
pub(crate) fn sigkill(pid: i32) {
    // SAFETY: kill(2) has no memory effects.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// waitpid(2) for child `pid`, clone children included (`__WALL`), once; its wait status.
pub(crate) fn waitpid(pid: i32) -> std::io::Result<i32> {
    let mut status = 0;
    // SAFETY: waitpid with a valid status pointer.
    check(unsafe { libc::waitpid(pid, &mut status, libc::__WALL) })?;
    Ok(status)
}

/// A zeroed `rusage`.
pub(crate) fn zero_rusage() -> libc::rusage {
    // SAFETY: rusage is plain data; zeroed is valid.
    unsafe { std::mem::zeroed() }
}

/// wait4(2) for child `pid` (`__WALL`, plus `WNOHANG` when `nohang`), once:
/// the pid reaped (0: none yet), its wait status and resource usage.
pub(crate) fn wait4(pid: i32, nohang: bool) -> std::io::Result<(i32, i32, libc::rusage)> {
    let mut ru = zero_rusage();
    let mut status = 0;
    let flags = libc::__WALL | if nohang { libc::WNOHANG } else { 0 };
    // SAFETY: wait4 with valid pointers, alive for the call.
    let r = check(unsafe { libc::wait4(pid, &mut status, flags, &mut ru) })?;
    Ok((r, status, ru))
}

/// Waits for child `pid` through interruptions; its wait status and resource
/// usage, or None when it is not (or no longer) ours to reap.
pub(crate) fn reap(pid: i32) -> Option<(i32, libc::rusage)> {
    loop {
        match wait4(pid, false) {
            Ok((r, status, ru)) if r == pid => return Some((status, ru)),
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(_) => return None,
        }
    }
}

/// prctl(PR_SET_CHILD_SUBREAPER): orphans of our descendants come back to us.
pub(crate) fn set_child_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments.
    check(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }).map(drop)
}

/// setpriority(2) of the calling thread only (Linux keeps a nice value per thread):
/// `nice` 19 makes it yield to every ordinary thread that wants the CPU. Raising
/// the value needs no privilege.
pub(crate) fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: setpriority with integer arguments; `who` 0 is the calling thread.
    check(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) }).map(drop)
}

/// prlimit(2): sets both limits of `resource` of process `pid` to `n`.
pub(crate) fn set_limit(pid: i32, resource: libc::__rlimit_resource_t, n: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: prlimit with a valid rlimit struct and a null old-limit pointer.
    check(unsafe { libc::prlimit(pid, resource, &lim, std::ptr::null_mut()) }).map(drop)
}

/// sysconf(3) of `name` (`_SC_*`), when it has a positive value.
pub(crate) fn sysconf(name: libc::c_int) -> Option<u64> {
    // SAFETY: sysconf has no memory effects.
    let v = unsafe { libc::sysconf(name) };
    (v > 0).then_some(v as u64)
}

/// The kernel's Landlock ABI version: `landlock_create_ruleset(NULL, 0,
/// LANDLOCK_CREATE_RULESET_VERSION)`, a query that creates nothing.
///
/// The `landlock` crate makes this same call but keeps its answer private
/// (0.4: `LandlockStatus::current` is not public); its rulesets are used
/// for everything else.
pub(crate) fn landlock_abi() -> std::io::Result<i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: a null attribute with size 0 is what the version query takes.
    let v = check(unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    })?;
    Ok(v as i32)
}
