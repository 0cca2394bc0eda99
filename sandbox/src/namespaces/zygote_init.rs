//! The init's side of a warm run (raw system calls only: it shares the
//! executor's memory, see `child`).

use crate::namespaces::child::report;
use crate::sys::raw as sys;
use std::ffi::{CStr, CString};

/// The run's namespaces (in the init's `/proc/self/ns`), in the order the zygote and its
/// child take them: the pid namespace (the zygote forks the program into it), then what the
/// program enters, the mount namespace last.
const NAMESPACES: [&CStr; 4] = [c"pid", c"ipc", c"uts", c"cgroup"];

/// First thing after the clone: sends the supervisor descriptors of the run's
/// namespaces (`NAMESPACES`, then the network and mount namespaces it will
/// enter), tagged `N`; with none, tagged `X` (then the run starts cold).
///
/// Why not the init's pidfd: `setns(pidfd)` needs ptrace access to the init,
/// which shares the executor's memory, which no longer is dumpable once any
/// cold program in it changed its uid; without CAP_SYS_PTRACE (which no pod
/// of ours has) that is EPERM. Opening our own `/proc/self/ns/*` needs no
/// such access, and `setns` of a namespace file only CAP_SYS_ADMIN. `ns_dir` is
/// the init's `/proc/self/ns`, opened before it entered the slot's mount
/// namespace, while `/proc` was the executor's.
pub(crate) fn send_namespaces(ctl_fd: i32, ns_dir: i32, net_ns_fd: i32, mnt_ns_fd: i32) {
    let mut fds = [-1i32; NAMESPACES.len() + 2];
    let mut ok = true;
    for (slot, name) in fds.iter_mut().zip(NAMESPACES) {
        match sys::openat(ns_dir, name, libc::O_RDONLY | libc::O_CLOEXEC) {
            Ok(fd) => *slot = fd as i32,
            Err(_) => ok = false,
        }
    }
    let own_net = if net_ns_fd < 0 {
        // Made by the clone: ours is final already.
        sys::openat(ns_dir, c"net", libc::O_RDONLY | libc::O_CLOEXEC).map_or(-1, |fd| fd as i32)
    } else {
        -1
    };
    fds[NAMESPACES.len()] = if net_ns_fd < 0 { own_net } else { net_ns_fd };
    fds[NAMESPACES.len() + 1] = mnt_ns_fd;
    ok &= fds.iter().all(|&fd| fd >= 0);
    let _ = if ok {
        sys::send_fds(ctl_fd, b"N", &fds)
    } else {
        sys::send_fds(ctl_fd, b"X", &[])
    };
    for fd in fds[..NAMESPACES.len()].iter().copied().chain([own_net]) {
        if fd >= 0 {
            let _ = sys::close(fd);
        }
    }
}

/// After the init's set-up: says so on `ready_fd` (to the zygote's child,
/// which waits for it before it enters the run's mount namespace, while the
/// supervisor has had it forked already), then reaps whatever the run
/// orphans until the supervisor sends the program's wait status (which goes
/// on the report pipe as a cold run's would) or closes `ctl_fd`; then
/// detaches the run's mounts and exits, which kills what is left of the run.
pub(crate) fn serve(report_fd: i32, ctl_fd: i32, ready_fd: i32, mount_points: &[CString]) -> ! {
    let _ = sys::write(ready_fd, b"R");
    let _ = sys::close(ready_fd);
    // Orphans re-parented to us (double forks, daemons) are reaped as the cold
    // path's init reaps them, as they end: a SIGCHLD wakes us through a
    // signalfd. An idle session's init must not wake on a timer (hundreds of
    // them polling every 50 ms cost a tenth of a CPU); without a signalfd,
    // 50 ms bounds how long a zombie stays.
    let sigchld = sys::signalfd_for(libc::SIGCHLD).ok().map(|fd| fd as i32);
    let mut status = 0;
    loop {
        while let Ok(pid) = sys::wait_any_nohang(&mut status) {
            if pid == 0 {
                break;
            }
        }
        let ctl_ready = match sigchld {
            Some(sfd) => match sys::poll_in_either(ctl_fd, sfd) {
                Ok([ctl, _]) => ctl,
                Err(libc::EINTR) => false,
                Err(_) => true,
            },
            None => !matches!(sys::poll_in(ctl_fd, 50), Ok(0) | Err(libc::EINTR)),
        };
        if ctl_ready {
            break;
        }
        if let Some(sfd) = sigchld {
            // What woke us (a signalfd_siginfo each); the reaping above is what counts.
            let mut info = [0u8; 128 * 8];
            while matches!(sys::read(sfd, &mut info), Ok(n) if n > 0) {}
        }
    }
    let mut st = [0u8; 4];
    if let Ok(4) = sys::read(ctl_fd, &mut st) {
        let mut rec = [0u8; 12];
        rec[0..4].copy_from_slice(&report::STATUS.to_ne_bytes());
        rec[8..12].copy_from_slice(&st);
        let _ = sys::write(report_fd, &rec);
    }
    for p in mount_points.iter().rev() {
        sys::detach_all(p);
    }
    sys::exit(0)
}
