//! Small safe wrappers for what the executor, its tests and its benches do to
//! host processes, so that their crates can `forbid(unsafe_code)`.

use std::os::unix::process::CommandExt;
use std::time::Duration;

/// Makes `cmd` start in a session of its own (`setsid` between fork and exec),
/// as each sandboxed run is: with autogroup scheduling a session is a
/// scheduling group, so fair comparisons need the same for bare runs.
pub fn own_session(cmd: &mut std::process::Command) {
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}

/// Waits for `child` (not yet reaped) and returns its exit code (None when a
/// signal ended it) and the CPU time (user + system) it and its reaped
/// descendants used.
pub fn wait_with_cpu(child: &std::process::Child) -> std::io::Result<(Option<i32>, Duration)> {
    let mut status = 0;
    // SAFETY: rusage is plain data; zeroed is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child with valid pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Ok((code, tv(ru.ru_utime) + tv(ru.ru_stime)))
}

/// Sets the open-file limit (soft and hard) of process `pid` to `n`.
pub fn set_fd_limit(pid: u32, n: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: prlimit with a valid rlimit struct and a null old-limit pointer.
    let r = unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
