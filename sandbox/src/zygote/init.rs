//! The init's side of a warm run (raw system calls only: it shares the
//! executor's memory, see `child`).

use crate::child::report;
use crate::sys;
use std::ffi::CString;

/// After the init's set-up: says so on the report pipe, then reaps whatever
/// the run orphans until the executor writes to (or closes) `ctl_fd`; then
/// detaches the run's mounts and exits, which kills what is left of the run.
pub(crate) fn serve(report_fd: i32, ctl_fd: i32, mount_points: &[CString]) -> ! {
    let rec = ready_record();
    let _ = sys::write(report_fd, &rec);
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
    for p in mount_points.iter().rev() {
        sys::detach_all(p);
    }
    sys::exit(0)
}

/// The READY record, in the report pipe's format.
fn ready_record() -> [u8; 12] {
    let mut rec = [0u8; 12];
    rec[0..4].copy_from_slice(&report::READY.to_ne_bytes());
    rec
}
