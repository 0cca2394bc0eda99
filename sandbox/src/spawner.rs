//! Per-slot spawners: helpers that live in a slot's cgroup and clone inits.
//!
//! Moving a process into a cgroup takes the kernel's cgroup threadgroup
//! lock for writing, which waits for an RCU grace period: several
//! milliseconds per run, the largest single cost of a sandboxed run. A child
//! starts in its parent's cgroup for free, so each slot gets a spawner that
//! was moved into the slot's cgroup once, at start-up, and clones every init
//! of that slot. The spawner shares the executor's memory and descriptor
//! table (CLONE_VM | CLONE_FILES), and clones inits with CLONE_PARENT, so
//! the executor still owns, waits for and kills them exactly as if it had
//! cloned them itself.
//!
//! Sharing the executor's memory inside a memory-limited cgroup would make
//! the spawner and the init OOM victims, and a victim takes every process
//! sharing its memory with it: the executor and every run in flight. The
//! kernel never picks a task still inside `vfork` (created with CLONE_VFORK
//! by a parent with the same memory, and not yet exec'd or exited), so both
//! are created that way: each spawner by a thread of its own that waits for
//! it for good, each init by its spawner, which waits while the run lasts
//! (one run per slot at a time). Only the run's own processes, in memory of
//! their own after `execve`, are left for the OOM killer to choose from.
//! Lowering `oom_score_adj` instead would need CAP_SYS_RESOURCE.

use super::child::{self, ChildPlan, Stack};
use super::sys;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

/// What the spawner reads from its request pipe.
#[repr(C)]
struct Request {
    plan: usize,
    stack_top: usize,
    flags: usize,
}

struct SpawnerState {
    req_r: i32,
    resp_w: i32,
    /// Written by the kernel (CLONE_PARENT_SETTID) before the spawner runs.
    pid: AtomicI32,
}

/// Sends `(pid, errno)` on the response pipe.
fn respond(fd: i32, pid: i32, errno: i32) {
    let mut resp = [0u8; 8];
    resp[..4].copy_from_slice(&pid.to_ne_bytes());
    resp[4..].copy_from_slice(&errno.to_ne_bytes());
    let _ = sys::write(fd, &resp);
}

extern "C" fn spawner_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the state is leaked by `Spawner::start`, so it outlives this process.
    let st = unsafe { &*(arg as *const SpawnerState) };
    sys::default_signals();
    // Die with the executor (the thread that created us waits for us for good).
    let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as usize);
    respond(st.resp_w, st.pid.load(Ordering::SeqCst), 0);
    loop {
        let mut req = Request {
            plan: 0,
            stack_top: 0,
            flags: 0,
        };
        let buf = unsafe {
            // SAFETY: Request is plain data of this size.
            std::slice::from_raw_parts_mut(&mut req as *mut Request as *mut u8, std::mem::size_of::<Request>())
        };
        match sys::read(st.req_r, buf) {
            Ok(n) if n == buf.len() => {}
            _ => sys::exit(0),
        }
        // SAFETY: the plan stays alive in the executor until the init is reaped.
        let plan = unsafe { &*(req.plan as *const ChildPlan) };
        // SAFETY: as above; with CLONE_VFORK this returns once the init has
        // exited, and the init itself sends the response (see `init_main`).
        let pid = unsafe {
            libc::clone(
                child::init_main,
                req.stack_top as *mut libc::c_void,
                req.flags as libc::c_int,
                req.plan as *mut libc::c_void,
                plan.spawned_pid.as_ptr(),
            )
        };
        if pid < 0 {
            // errno lives in the TLS of the thread that created us, which only waits.
            // SAFETY: reads that thread's errno slot.
            respond(st.resp_w, -1, unsafe { *libc::__errno_location() });
        }
    }
}

/// A slot's spawner process.
#[derive(Debug)]
pub(crate) struct Spawner {
    pid: i32,
    channel: Mutex<(std::fs::File, std::fs::File)>,
    resp_w: i32,
    _stack: Stack,
    _ends: (OwnedFd, OwnedFd),
}

impl Spawner {
    /// Starts a spawner from a thread of its own, which waits for it (vfork)
    /// for as long as it lives; the caller then moves [`Spawner::pid`] into
    /// the slot's cgroup.
    fn start() -> std::io::Result<Self> {
        let (req_r, req_w) = super::pipe()?;
        let (resp_r, resp_w) = super::pipe()?;
        let stack = Stack::new(64 * 1024)?;
        // Leaked (a few bytes per slot) so that it can never dangle.
        let st: &'static SpawnerState = Box::leak(Box::new(SpawnerState {
            req_r: req_r.as_raw_fd(),
            resp_w: resp_w.as_raw_fd(),
            pid: AtomicI32::new(0),
        }));
        let top = stack.top() as usize;
        std::thread::Builder::new()
            .name("sandpool-spawner".into())
            .spawn(move || {
                let flags = libc::CLONE_VM | libc::CLONE_FILES | libc::CLONE_VFORK | libc::CLONE_PARENT_SETTID;
                // SAFETY: the spawner runs on its own stack (kept by the Spawner,
                // which kills it before unmapping) and reads only `st`.
                let pid = unsafe {
                    libc::clone(
                        spawner_main,
                        top as *mut libc::c_void,
                        flags | libc::SIGCHLD,
                        st as *const SpawnerState as *mut libc::c_void,
                        st.pid.as_ptr(),
                    )
                };
                if pid < 0 {
                    respond(
                        st.resp_w,
                        -1,
                        std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
                    );
                }
                // Otherwise the spawner has exited: this thread's work is done.
            })?;
        let mut resp_r = std::fs::File::from(resp_r);
        let mut ready = [0u8; 8];
        resp_r.read_exact(&mut ready)?;
        let pid = i32::from_ne_bytes([ready[0], ready[1], ready[2], ready[3]]);
        if pid <= 0 {
            let errno = i32::from_ne_bytes([ready[4], ready[5], ready[6], ready[7]]);
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        Ok(Spawner {
            pid,
            channel: Mutex::new((std::fs::File::from(req_w), resp_r)),
            resp_w: resp_w.as_raw_fd(),
            _stack: stack,
            _ends: (req_r, resp_w),
        })
    }

    /// Starts `n` spawners.
    pub fn start_many(n: usize) -> std::io::Result<Vec<Self>> {
        (0..n).map(|_| Spawner::start()).collect()
    }

    /// The spawner's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The descriptor the init answers a spawn request on (see `init_main`).
    pub fn response_fd(&self) -> i32 {
        self.resp_w
    }

    /// Clones an init running `plan` on `stack` with `flags` (CLONE_PARENT,
    /// CLONE_VFORK and CLONE_PARENT_SETTID are added; CLONE_PIDFD must not be).
    pub fn spawn(&self, plan: &ChildPlan, stack: &Stack, flags: libc::c_int) -> std::io::Result<(i32, OwnedFd)> {
        let req = Request {
            plan: plan as *const ChildPlan as usize,
            stack_top: stack.top() as usize,
            flags: (flags | libc::CLONE_PARENT | libc::CLONE_VFORK | libc::CLONE_PARENT_SETTID) as usize,
        };
        // SAFETY: Request is plain data.
        let bytes =
            unsafe { std::slice::from_raw_parts(&req as *const Request as *const u8, std::mem::size_of::<Request>()) };
        let mut ch = self
            .channel
            .lock()
            .map_err(|_| std::io::Error::other("spawner lock poisoned"))?;
        ch.0.write_all(bytes)?;
        let mut resp = [0u8; 8];
        ch.1.read_exact(&mut resp)?;
        let pid = i32::from_ne_bytes([resp[0], resp[1], resp[2], resp[3]]);
        let errno = i32::from_ne_bytes([resp[4], resp[5], resp[6], resp[7]]);
        if pid <= 0 {
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        // The init is our child (CLONE_PARENT) and only we reap it, so the pid
        // cannot be reused before this.
        // SAFETY: pidfd_open on that pid.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: killing and reaping our own child, which must not outlive its plan.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), libc::__WALL);
            }
            return Err(e);
        }
        // SAFETY: a fresh descriptor we own; pidfd_open sets close-on-exec.
        Ok((pid, unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        // SAFETY: killing and reaping our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(self.pid, &mut status, libc::__WALL);
        }
    }
}
