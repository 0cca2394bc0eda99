//! The init's side of a warm run (raw system calls only: it shares the
//! executor's memory, see `child`).

use crate::child::report;
use crate::sys;
use std::ffi::CString;

/// After the init's set-up: says so on `ready_fd` (to the zygote's child,
/// which waits for it before it enters the run's mount namespace, while the
/// supervisor has had it forked already), then reaps whatever the run
/// orphans until the supervisor sends the program's wait status (which goes
/// on the report pipe as a cold run's would) or closes `ctl_fd`; then
/// detaches the run's mounts and exits, which kills what is left of the run.
pub(crate) fn serve(report_fd: i32, ctl_fd: i32, ready_fd: i32, mount_points: &[CString]) -> ! {
    let _ = sys::write(ready_fd, b"R");
    let _ = sys::close(ready_fd);
    let mut status = 0;
    loop {
        // Orphans re-parented to us (double forks, daemons) are reaped as
        // the cold path's init reaps them; 50 ms bounds how long a zombie stays.
        while let Ok(pid) = sys::wait_any_nohang(&mut status) {
            if pid == 0 {
                break;
            }
        }
        match sys::poll_in(ctl_fd, 50) {
            Ok(0) | Err(libc::EINTR) => continue,
            _ => break,
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
