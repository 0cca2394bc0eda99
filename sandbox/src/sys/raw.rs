//! Raw Linux system calls for the sandbox's child side.
//!
//! The sandbox's init process shares the executor's memory (`CLONE_VM`), so it
//! must not touch libc state: `errno` lives in the parent thread's TLS and the
//! allocator's locks may be held by other threads. These wrappers issue the
//! system call directly and return `-errno` instead of setting `errno`. The
//! restricted mode's confinement, between `fork` and `exec`, uses them too:
//! they are async-signal-safe.

use std::ffi::CStr;

/// Issues system call `nr` with up to six arguments; returns the raw result.
///
/// # Safety
/// The caller guarantees the arguments are valid for that system call.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn syscall6(nr: i64, a1: usize, a2: usize, a3: usize, a4: usize, a5: usize, a6: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller vouches for the arguments; the asm clobbers only
    // what the syscall ABI says (rcx, r11) and uses no stack.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a1, in("rsi") a2, in("rdx") a3,
            in("r10") a4, in("r8") a5, in("r9") a6,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// Issues system call `nr` with up to six arguments; returns the raw result.
///
/// # Safety
/// The caller guarantees the arguments are valid for that system call.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub unsafe fn syscall6(nr: i64, a1: usize, a2: usize, a3: usize, a4: usize, a5: usize, a6: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller vouches for the arguments; svc 0 uses no stack.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") nr as usize,
            inlateout("x0") a1 => ret,
            in("x1") a2, in("x2") a3, in("x3") a4, in("x4") a5, in("x5") a6,
            options(nostack),
        );
    }
    ret
}

#[inline(always)]
fn ptr(s: &CStr) -> usize {
    s.as_ptr() as usize
}

#[inline(always)]
fn opt_ptr(s: Option<&CStr>) -> usize {
    s.map_or(0, ptr)
}

/// Result of a raw call: `Ok(value)` or `Err(errno)`.
pub type Res = Result<usize, i32>;

#[inline(always)]
fn res(r: isize) -> Res {
    if (-4095..0).contains(&r) {
        Err((-r) as i32)
    } else {
        Ok(r as usize)
    }
}

// SAFETY (every arm): the wrappers below pass integers and pointers into
// buffers borrowed for the duration of the call (`&CStr`, slices, references),
// or raw pointers their own `unsafe fn` contract makes the caller vouch for.
macro_rules! sc {
    ($nr:expr) => {
        // SAFETY: see the macro's comment.
        res(unsafe { syscall6($nr, 0, 0, 0, 0, 0, 0) })
    };
    ($nr:expr, $a:expr) => {
        // SAFETY: see the macro's comment.
        res(unsafe { syscall6($nr, $a, 0, 0, 0, 0, 0) })
    };
    ($nr:expr, $a:expr, $b:expr) => {
        // SAFETY: see the macro's comment.
        res(unsafe { syscall6($nr, $a, $b, 0, 0, 0, 0) })
    };
    ($nr:expr, $a:expr, $b:expr, $c:expr) => {
        // SAFETY: see the macro's comment.
        res(unsafe { syscall6($nr, $a, $b, $c, 0, 0, 0) })
    };
    ($nr:expr, $a:expr, $b:expr, $c:expr, $d:expr) => {
        // SAFETY: see the macro's comment.
        res(unsafe { syscall6($nr, $a, $b, $c, $d, 0, 0) })
    };
    ($nr:expr, $a:expr, $b:expr, $c:expr, $d:expr, $e:expr) => {
        // SAFETY: see the macro's comment.
        res(unsafe { syscall6($nr, $a, $b, $c, $d, $e, 0) })
    };
}

/// mount(2).
pub fn mount(src: Option<&CStr>, target: &CStr, fstype: Option<&CStr>, flags: u64, data: Option<&CStr>) -> Res {
    sc!(
        libc::SYS_mount,
        opt_ptr(src),
        ptr(target),
        opt_ptr(fstype),
        flags as usize,
        opt_ptr(data)
    )
}

/// umount2(2).
pub fn umount2(target: &CStr, flags: i32) -> Res {
    sc!(libc::SYS_umount2, ptr(target), flags as usize)
}

/// openat(2) relative to the current directory.
pub fn open(path: &CStr, flags: i32) -> Res {
    sc!(libc::SYS_openat, libc::AT_FDCWD as usize, ptr(path), flags as usize, 0)
}

/// openat(2) relative to the directory `dir`.
pub fn openat(dir: i32, path: &CStr, flags: i32) -> Res {
    sc!(libc::SYS_openat, dir as usize, ptr(path), flags as usize, 0)
}

/// setns(2).
pub fn setns(fd: i32, nstype: i32) -> Res {
    sc!(libc::SYS_setns, fd as usize, nstype as usize)
}

/// unshare(2).
pub fn unshare(flags: i32) -> Res {
    sc!(libc::SYS_unshare, flags as usize)
}

/// move_mount(2) of the detached mount `fd` onto `target`.
pub fn move_mount_fd(fd: i32, target: &CStr) -> Res {
    sc!(
        libc::SYS_move_mount,
        fd as usize,
        c"".as_ptr() as usize,
        libc::AT_FDCWD as usize,
        ptr(target),
        0x4 /* MOVE_MOUNT_F_EMPTY_PATH */
    )
}

/// Lazily unmounts everything stacked on `target`.
pub fn detach_all(target: &CStr) {
    while umount2(target, libc::MNT_DETACH).is_ok() {}
}

/// pivot_root(2).
pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> Res {
    sc!(libc::SYS_pivot_root, ptr(new_root), ptr(put_old))
}

/// chdir(2).
pub fn chdir(path: &CStr) -> Res {
    sc!(libc::SYS_chdir, ptr(path))
}

/// sethostname(2).
pub fn sethostname(name: &[u8]) -> Res {
    sc!(libc::SYS_sethostname, name.as_ptr() as usize, name.len())
}

/// dup3(2); a no-op when `old == new`, clearing close-on-exec like dup2.
pub fn dup_to(old: i32, new: i32) -> Res {
    if old == new {
        // dup3 refuses equal fds; clear FD_CLOEXEC instead.
        return sc!(libc::SYS_fcntl, old as usize, libc::F_SETFD as usize, 0);
    }
    sc!(libc::SYS_dup3, old as usize, new as usize, 0)
}

/// dup2(2) semantics on every architecture: `new` becomes a copy of `old`
/// (dup3 without flags); when they are equal, only checks that `old` is open.
pub fn dup2(old: i32, new: i32) -> Res {
    if old == new {
        return sc!(libc::SYS_fcntl, old as usize, libc::F_GETFD as usize).map(|_| new as usize);
    }
    sc!(libc::SYS_dup3, old as usize, new as usize, 0)
}

/// read(2) into `buf`.
pub fn read(fd: i32, buf: &mut [u8]) -> Res {
    sc!(libc::SYS_read, fd as usize, buf.as_mut_ptr() as usize, buf.len())
}

/// close(2).
pub fn close(fd: i32) -> Res {
    sc!(libc::SYS_close, fd as usize)
}

/// close_range(2).
pub fn close_range(first: u32, last: u32, flags: u32) -> Res {
    sc!(libc::SYS_close_range, first as usize, last as usize, flags as usize)
}

/// write(2) of the whole buffer (short writes on a pipe of <= PIPE_BUF bytes cannot happen).
pub fn write(fd: i32, buf: &[u8]) -> Res {
    sc!(libc::SYS_write, fd as usize, buf.as_ptr() as usize, buf.len())
}

/// setsid(2).
pub fn setsid() -> Res {
    sc!(libc::SYS_setsid)
}

/// setgroups(2) with an empty list.
pub fn clear_groups() -> Res {
    sc!(libc::SYS_setgroups, 0, 0)
}

/// setresgid(2) for this thread.
pub fn setresgid(gid: u32) -> Res {
    sc!(libc::SYS_setresgid, gid as usize, gid as usize, gid as usize)
}

/// setresuid(2) for this thread.
pub fn setresuid(uid: u32) -> Res {
    sc!(libc::SYS_setresuid, uid as usize, uid as usize, uid as usize)
}

/// prlimit64(2) on the calling process.
pub fn setrlimit(resource: u32, limit: &libc::rlimit64) -> Res {
    sc!(libc::SYS_prlimit64, 0, resource as usize, limit as *const _ as usize, 0)
}

/// prctl(2) with two arguments.
pub fn prctl(option: i32, arg: usize) -> Res {
    sc!(libc::SYS_prctl, option as usize, arg, 0, 0, 0)
}

/// seccomp(SECCOMP_SET_MODE_FILTER).
///
/// # Safety
/// `prog.filter` must point to `prog.len` valid instructions.
unsafe fn seccomp_filter(prog: &libc::sock_fprog) -> Res {
    sc!(
        libc::SYS_seccomp,
        1, /* SECCOMP_SET_MODE_FILTER */
        0,
        prog as *const _ as usize
    )
}

/// Installs seccomp `filters` (kernel layout) on the calling thread, in order.
pub fn install_filters(filters: &[Vec<libc::sock_filter>]) -> Res {
    for f in filters {
        let prog = libc::sock_fprog {
            len: f.len() as libc::c_ushort,
            filter: f.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `prog` points into `f`, alive and of `len` instructions.
        unsafe { seccomp_filter(&prog) }?;
    }
    Ok(0)
}

/// execve(2); returns only on failure.
///
/// # Safety
/// `argv` and `envp` must be null-terminated arrays of pointers to C strings,
/// all alive for the call.
pub unsafe fn execve(path: &CStr, argv: *const *const libc::c_char, envp: *const *const libc::c_char) -> Res {
    sc!(libc::SYS_execve, ptr(path), argv as usize, envp as usize)
}

/// wait4(2) for any child, including clone children.
pub fn wait_any(status: &mut i32) -> Res {
    sc!(
        libc::SYS_wait4,
        usize::MAX, /* -1 */
        status as *mut i32 as usize,
        libc::__WALL as usize,
        0
    )
}

/// rt_sigaction(2) resetting `sig` to its default disposition.
pub fn reset_signal(sig: i32) -> Res {
    // struct kernel_sigaction { handler, flags, restorer, mask } with SIG_DFL = 0.
    let act = [0usize; 4];
    sc!(libc::SYS_rt_sigaction, sig as usize, act.as_ptr() as usize, 0, 8)
}

/// Every catchable signal back to its default and none blocked: a process cloned
/// from the executor must not run (or ignore signals with) the executor's handlers.
pub fn default_signals() {
    for sig in 1..=64 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            let _ = reset_signal(sig);
        }
    }
    let _ = unblock_all_signals();
}

/// rt_sigprocmask(SIG_SETMASK, empty).
pub fn unblock_all_signals() -> Res {
    let set = 0u64;
    sc!(
        libc::SYS_rt_sigprocmask,
        libc::SIG_SETMASK as usize,
        &set as *const u64 as usize,
        0,
        8
    )
}

/// socket(2).
pub fn socket(domain: i32, ty: i32, proto: i32) -> Res {
    sc!(libc::SYS_socket, domain as usize, ty as usize, proto as usize)
}

/// ioctl(2) with a pointer argument.
///
/// # Safety
/// `arg` must be what request `req` expects (for pointer requests: a pointer
/// to a live structure of the right type).
unsafe fn ioctl(fd: i32, req: u64, arg: usize) -> Res {
    sc!(libc::SYS_ioctl, fd as usize, req as usize, arg)
}

/// Brings up `lo` in the caller's network namespace; Err(errno) on failure.
///
/// Raw calls only: the init runs it after `clone`, the namespace factory on its own thread.
pub(crate) fn loopback_up() -> Result<(), i32> {
    let fd = socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)? as i32;
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads an ifreq; `ifr` lives across the call.
    let r = unsafe { ioctl(fd, libc::SIOCSIFFLAGS, &ifr as *const _ as usize) };
    let _ = close(fd);
    r.map(|_| ())
}

/// The most descriptors [`send_fds`] sends at once (a warm run's: stdio, the
/// init's readiness, five namespaces, a `cgroup.procs` per v1 hierarchy).
pub const MAX_SEND_FDS: usize = 16;

/// sendmsg(2) of `data` with `fds` attached (SCM_RIGHTS), without allocating.
pub fn send_fds(sock: i32, data: &[u8], fds: &[i32]) -> Res {
    if fds.len() > MAX_SEND_FDS {
        return Err(libc::EINVAL);
    }
    // Room for one header and MAX_SEND_FDS descriptors, aligned for cmsghdr.
    let mut cbuf = [0u64; 2 + MAX_SEND_FDS.div_ceil(2)];
    let fd_bytes = std::mem::size_of_val(fds);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; zeroed is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        // SAFETY: CMSG_SPACE and CMSG_LEN are pure computations.
        let (space, len) = unsafe { (libc::CMSG_SPACE(fd_bytes as u32), libc::CMSG_LEN(fd_bytes as u32)) };
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as usize;
        // SAFETY: `cbuf` holds one header and up to MAX_SEND_FDS descriptors
        // (checked above); the macros point inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = len as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr() as *const u8, libc::CMSG_DATA(c), fd_bytes);
        }
    }
    sc!(
        libc::SYS_sendmsg,
        sock as usize,
        &msg as *const libc::msghdr as usize,
        libc::MSG_NOSIGNAL as usize
    )
}

/// exit(2) of this thread; never returns.
pub fn exit(code: i32) -> ! {
    // SAFETY: exit takes an integer and ends only this thread.
    unsafe {
        syscall6(libc::SYS_exit, code as usize, 0, 0, 0, 0, 0);
    }
    // exit cannot fail; loop to satisfy the type checker.
    #[allow(clippy::empty_loop)]
    loop {}
}

/// Sleeps `ms` milliseconds (nanosleep(2); an interrupted sleep ends early).
pub fn sleep_ms(ms: u64) {
    let ts = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    let _ = sc!(libc::SYS_nanosleep, &ts as *const libc::timespec as usize, 0);
}

/// poll(2) for input on one descriptor; Ok(0) on timeout.
pub fn poll_in(fd: i32, timeout_ms: i32) -> Res {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: (timeout_ms / 1000) as libc::time_t,
        tv_nsec: ((timeout_ms % 1000) * 1_000_000) as libc::c_long,
    };
    sc!(
        libc::SYS_ppoll,
        &mut p as *mut libc::pollfd as usize,
        1,
        &ts as *const libc::timespec as usize,
        0,
        8
    )
}

/// poll(2) for input on two descriptors, without a time-out; which of them are
/// readable (or hung up).
pub fn poll_in_either(a: i32, b: i32) -> Result<[bool; 2], i32> {
    let mut p = [a, b].map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    sc!(libc::SYS_ppoll, p.as_mut_ptr() as usize, 2, 0, 0, 8)?;
    Ok(p.map(|p| p.revents != 0))
}

/// rt_sigprocmask(SIG_BLOCK) of `sig`, then a non-blocking signalfd(2) that reads it.
pub fn signalfd_for(sig: i32) -> Res {
    let set = 1u64 << (sig - 1);
    sc!(
        libc::SYS_rt_sigprocmask,
        libc::SIG_BLOCK as usize,
        &set as *const u64 as usize,
        0,
        8
    )?;
    sc!(
        libc::SYS_signalfd4,
        usize::MAX, /* -1: a new descriptor */
        &set as *const u64 as usize,
        8,
        (libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) as usize
    )
}

/// True when nobody holds the read end of pipe `fd` any more (poll says
/// POLLERR for a pipe's write end without readers).
pub fn pipe_unread(fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    let ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let r = sc!(
        libc::SYS_ppoll,
        &mut p as *mut libc::pollfd as usize,
        1,
        &ts as *const libc::timespec as usize,
        0,
        8
    );
    matches!(r, Ok(1)) && p.revents & libc::POLLERR != 0
}

/// wait4(2) for any child without blocking; Ok(0) when none has ended.
pub fn wait_any_nohang(status: &mut i32) -> Res {
    sc!(
        libc::SYS_wait4,
        usize::MAX, /* -1 */
        status as *mut i32 as usize,
        (libc::__WALL | libc::WNOHANG) as usize,
        0
    )
}

/// getppid(2).
pub fn getppid() -> i32 {
    sc!(libc::SYS_getppid).map_or(0, |p| p as i32)
}

/// landlock_restrict_self(2): confines the calling thread to ruleset `fd`.
pub fn landlock_restrict_self(fd: i32) -> Res {
    sc!(libc::SYS_landlock_restrict_self, fd as usize, 0)
}
