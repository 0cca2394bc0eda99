//! Small safe wrappers for what the executor, its tests, its benches and the
//! `sandpool-pod-seccomp` helper do to host processes, so that their crates
//! (and that binary) need no `unsafe`.

use crate::sys::{process, raw};
use std::os::unix::process::CommandExt;
use std::time::Duration;

/// Makes `cmd` start in a session of its own (`setsid` between fork and exec),
/// as each sandboxed run is: with autogroup scheduling a session is a
/// scheduling group, so fair comparisons need the same for bare runs.
pub fn own_session(cmd: &mut std::process::Command) {
    // SAFETY: the closure makes one async-signal-safe system call and touches
    // no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            let _ = raw::setsid();
            Ok(())
        });
    }
}

/// Waits for `child` (not yet reaped) and returns its exit code (None when a
/// signal ended it) and the CPU time (user + system) it and its reaped
/// descendants used.
pub fn wait_with_cpu(child: &std::process::Child) -> std::io::Result<(Option<i32>, Duration)> {
    let (_, status, ru) = process::wait4(child.id() as i32, false)?;
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Ok((code, crate::runio::cpu_time(&ru)))
}

/// Sets the open-file limit (soft and hard) of process `pid` to `n`.
pub fn set_fd_limit(pid: u32, n: u64) -> std::io::Result<()> {
    process::set_limit(pid as i32, libc::RLIMIT_NOFILE, n)
}

/// Installs on the calling thread the seccomp filters every sandboxed run
/// gets, then `extra`: what a container runtime's default profile refuses
/// to an unprivileged pod, and more (see `sandpool-pod-seccomp`). Needs
/// `no_new_privs` or `CAP_SYS_ADMIN`; threads started afterwards inherit them.
pub fn install_run_filters(extra: &[seccompiler::BpfProgram]) -> std::io::Result<()> {
    let base = crate::seccomp::build_filters(false).map_err(std::io::Error::other)?;
    let filters: Vec<_> = base.iter().chain(extra).map(crate::seccomp::to_kernel).collect();
    raw::install_filters(&filters)
        .map(drop)
        .map_err(std::io::Error::from_raw_os_error)
}

/// Whether a `restricted`-mode executor on this kernel forks Python runs from zygotes:
/// only where Landlock scopes signals (ABI [`crate::RESTRICTED_WARM_LANDLOCK_ABI`]), so that
/// no run can signal a zygote or another run (`restricted/warm.rs`).
pub fn restricted_warm_starts() -> bool {
    crate::sys::process::landlock_abi().is_ok_and(|v| v >= crate::RESTRICTED_WARM_LANDLOCK_ABI)
}
