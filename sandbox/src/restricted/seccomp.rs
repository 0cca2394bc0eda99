//! The filter `restricted` mode adds to the namespaces mode's (see
//! [`crate::seccomp`]): without a network namespace no socket may be made
//! but a `socketpair` of unix sockets; without a pid namespace a run may not leave its process group
//! (that group is how the whole tree is found and killed) nor use System V
//! IPC (no IPC namespace: the pod's objects are shared); and on kernels
//! whose Landlock cannot scope signals, a run may not signal the executor or
//! whole process groups.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Errors building the filter (a bug, never the program's fault).
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error(transparent)]
    Base(#[from] crate::seccomp::SeccompError),
    #[error("building the restricted seccomp filter: {0}")]
    Extra(String),
}

fn err(e: impl std::fmt::Display) -> FilterError {
    FilterError::Extra(e.to_string())
}

/// Calls that would take a process out of its run's process group.
pub const LEAVE_GROUP: &[(&str, i64)] = &[("setsid", libc::SYS_setsid), ("setpgid", libc::SYS_setpgid)];

/// System V IPC: without an IPC namespace its objects are shared by the whole
/// pod (every run, the executor); POSIX IPC lives in /dev/shm, which Landlock keeps out.
pub const SYSV_IPC: &[(&str, i64)] = &[
    ("shmget", libc::SYS_shmget),
    ("shmat", libc::SYS_shmat),
    ("shmctl", libc::SYS_shmctl),
    ("semget", libc::SYS_semget),
    ("semop", libc::SYS_semop),
    ("semtimedop", libc::SYS_semtimedop),
    ("semctl", libc::SYS_semctl),
    ("msgget", libc::SYS_msgget),
    ("msgsnd", libc::SYS_msgsnd),
    ("msgrcv", libc::SYS_msgrcv),
    ("msgctl", libc::SYS_msgctl),
];

/// Every filter a restricted run is installed with, in order.
///
/// `executor_pid` and `scoped_signals` (Landlock ABI 6+) decide the signal rules.
pub fn build_filters(executor_pid: i32, scoped_signals: bool) -> Result<Vec<Vec<libc::sock_filter>>, FilterError> {
    let mut filters: Vec<Vec<libc::sock_filter>> = crate::seccomp::build_filters(false)?
        .iter()
        .map(crate::seccomp::to_kernel)
        .collect();
    filters.push(crate::seccomp::to_kernel(&extra(executor_pid, scoped_signals)?));
    Ok(filters)
}

fn extra(executor_pid: i32, scoped_signals: bool) -> Result<BpfProgram, FilterError> {
    let mut denied: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let not_unix = || {
        SeccompRule::new(vec![
            Cond::new(0, Len::Dword, Op::Ne, libc::AF_UNIX as u64).map_err(err)?,
        ])
        .map_err(err)
    };
    // No socket(2) at all: a unix socket's path (another run's work dir, a sidecar's socket)
    // is reachable by connect(2) whatever Landlock allows of the file, and seccomp cannot
    // read the address. socketpair(2) makes connected sockets nobody else can reach.
    denied.insert(libc::SYS_socket, vec![]);
    denied.insert(libc::SYS_socketpair, vec![not_unix()?]);
    for (_, nr) in LEAVE_GROUP.iter().chain(SYSV_IPC) {
        denied.insert(*nr, vec![]);
    }
    if !scoped_signals {
        let pid = executor_pid as u32 as u64;
        let is_pid = |arg| SeccompRule::new(vec![Cond::new(arg, Len::Dword, Op::Eq, pid).map_err(err)?]).map_err(err);
        // kill(-1) reaches every process of the uid, kill(-pgid) another run's group.
        let negative = SeccompRule::new(vec![
            Cond::new(0, Len::Dword, Op::MaskedEq(0x8000_0000), 0x8000_0000).map_err(err)?,
        ])
        .map_err(err)?;
        denied.insert(libc::SYS_kill, vec![is_pid(0)?, negative]);
        for nr in [
            libc::SYS_tkill,
            libc::SYS_tgkill,
            libc::SYS_rt_sigqueueinfo,
            libc::SYS_rt_tgsigqueueinfo,
            libc::SYS_pidfd_open,
        ] {
            denied.insert(nr, vec![is_pid(0)?]);
        }
    }
    SeccompFilter::new(
        denied,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )
    .map_err(err)?
    .try_into()
    .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seccomp::cbpf::{data, run};

    #[cfg(target_arch = "x86_64")]
    const AUDIT_ARCH: u32 = 0xc000_003e;
    #[cfg(target_arch = "aarch64")]
    const AUDIT_ARCH: u32 = 0xc000_00b7;

    fn verdict(filters: &[Vec<libc::sock_filter>], nr: i64, args: [u64; 6]) -> u32 {
        filters
            .iter()
            .map(|p| run(p, &data(nr, AUDIT_ARCH, args)))
            .min_by_key(|r| (r & 0xffff_0000) as i32)
            .unwrap()
    }

    const ALLOW: u32 = 0x7fff_0000;
    const EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;

    #[test]
    fn only_unix_socketpairs_no_sysv_ipc_and_no_leaving_the_group() {
        let f = build_filters(4242, true).unwrap();
        for domain in [
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_NETLINK,
            libc::AF_PACKET,
            libc::AF_VSOCK,
        ] {
            let d = domain as u64;
            assert_eq!(
                verdict(&f, libc::SYS_socket, [d, 1, 0, 0, 0, 0]),
                EPERM,
                "socket {domain}"
            );
            assert_eq!(
                verdict(&f, libc::SYS_socketpair, [d, 1, 0, 0, 0, 0]),
                EPERM,
                "pair {domain}"
            );
        }
        let unix = libc::AF_UNIX as u64;
        // A unix socket of its own could connect to any path (issue 24 item 1); a pair reaches no one.
        assert_eq!(verdict(&f, libc::SYS_socket, [unix, 1, 0, 0, 0, 0]), EPERM);
        assert_eq!(verdict(&f, libc::SYS_socketpair, [unix, 1, 0, 0, 0, 0]), ALLOW);
        // Upper bits of an int argument do not turn AF_UNIX into something the filter passes wrongly.
        assert_eq!(
            verdict(&f, libc::SYS_socketpair, [unix | (1 << 32), 1, 0, 0, 0, 0]),
            ALLOW
        );
        for (name, nr) in LEAVE_GROUP.iter().chain(SYSV_IPC) {
            assert_eq!(verdict(&f, *nr, [0; 6]), EPERM, "{name}");
        }
        // The namespaces mode's rules are in force too.
        assert_eq!(verdict(&f, libc::SYS_unshare, [0; 6]), EPERM);
        assert_eq!(verdict(&f, libc::SYS_ptrace, [0; 6]), EPERM);
        assert_eq!(verdict(&f, libc::SYS_getpid, [0; 6]), ALLOW);
    }

    #[test]
    fn without_landlock_scoping_the_executor_and_other_groups_cannot_be_signalled() {
        let f = build_filters(4242, false).unwrap();
        let minus_one = (-1i32) as u32 as u64;
        assert_eq!(verdict(&f, libc::SYS_kill, [4242, 9, 0, 0, 0, 0]), EPERM);
        assert_eq!(verdict(&f, libc::SYS_kill, [minus_one, 9, 0, 0, 0, 0]), EPERM);
        assert_eq!(
            verdict(&f, libc::SYS_kill, [(-77i32) as u32 as u64, 9, 0, 0, 0, 0]),
            EPERM
        );
        assert_eq!(verdict(&f, libc::SYS_tgkill, [4242, 4242, 9, 0, 0, 0]), EPERM);
        assert_eq!(verdict(&f, libc::SYS_pidfd_open, [4242, 0, 0, 0, 0, 0]), EPERM);
        // The run's own processes (and its own group, 0) stay reachable.
        assert_eq!(verdict(&f, libc::SYS_kill, [4243, 9, 0, 0, 0, 0]), ALLOW);
        assert_eq!(verdict(&f, libc::SYS_kill, [0, 9, 0, 0, 0, 0]), ALLOW);
        // With Landlock's signal scope the kernel does this, and kill(-pgid) within the run works.
        let scoped = build_filters(4242, true).unwrap();
        assert_eq!(verdict(&scoped, libc::SYS_kill, [minus_one, 9, 0, 0, 0, 0]), ALLOW);
    }
}
