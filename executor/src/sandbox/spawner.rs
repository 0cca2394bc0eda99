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

use super::child::{self, ChildPlan, Stack};
use super::sys;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

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
}

extern "C" fn spawner_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the state is owned by the Spawner, which outlives this process.
    let st = unsafe { &*(arg as *const SpawnerState) };
    sys::default_signals();
    // Die with the executor.
    let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as usize);
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
        let mut pidfd: libc::c_int = -1;
        // SAFETY: the plan and stack stay alive in the executor until the init is reaped.
        let pid = unsafe {
            libc::clone(
                child::init_main,
                req.stack_top as *mut libc::c_void,
                req.flags as libc::c_int,
                req.plan as *mut libc::c_void,
                &mut pidfd as *mut libc::c_int,
            )
        };
        let mut resp = [0u8; 8];
        resp[..4].copy_from_slice(&pid.to_ne_bytes());
        resp[4..].copy_from_slice(&pidfd.to_ne_bytes());
        let _ = sys::write(st.resp_w, &resp);
    }
}

/// A slot's spawner process.
#[derive(Debug)]
pub(crate) struct Spawner {
    pid: i32,
    channel: Mutex<(std::fs::File, std::fs::File)>,
    _stack: Stack,
    _ends: (OwnedFd, OwnedFd),
}

impl Spawner {
    /// Starts a spawner; the caller then moves [`Spawner::pid`] into the slot's cgroup.
    fn start() -> std::io::Result<Self> {
        let (req_r, req_w) = super::pipe()?;
        let (resp_r, resp_w) = super::pipe()?;
        let stack = Stack::new(64 * 1024)?;
        let st = Box::new(SpawnerState {
            req_r: req_r.as_raw_fd(),
            resp_w: resp_w.as_raw_fd(),
        });
        let st_ptr = Box::into_raw(st);
        let flags = libc::CLONE_VM | libc::CLONE_FILES | libc::SIGCHLD;
        // SAFETY: the spawner runs on its own stack and only reads `st`,
        // which is leaked (a few bytes per slot) so that it can never dangle.
        let pid = unsafe { libc::clone(spawner_main, stack.top(), flags, st_ptr as *mut libc::c_void) };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Spawner {
            pid,
            channel: Mutex::new((std::fs::File::from(req_w), std::fs::File::from(resp_r))),
            _stack: stack,
            _ends: (req_r, resp_w),
        })
    }

    /// Starts `n` spawners from a thread that lives as long as the process:
    /// a spawner dies with the thread that created it (PR_SET_PDEATHSIG), so
    /// that thread must not be a short-lived one such as a test's.
    pub fn start_many(n: usize) -> std::io::Result<Vec<Self>> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("sandpool-spawners".into())
            .spawn(move || {
                let _ = tx.send((0..n).map(|_| Spawner::start()).collect::<std::io::Result<Vec<_>>>());
                loop {
                    std::thread::park();
                }
            })?;
        rx.recv()
            .map_err(|_| std::io::Error::other("the spawner thread died"))?
    }

    /// The spawner's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Clones an init running `plan` on `stack` with `flags` (CLONE_PARENT is added).
    pub fn spawn(&self, plan: &ChildPlan, stack: &Stack, flags: libc::c_int) -> std::io::Result<(i32, OwnedFd)> {
        let req = Request {
            plan: plan as *const ChildPlan as usize,
            stack_top: stack.top() as usize,
            flags: (flags | libc::CLONE_PARENT) as usize,
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
        let pidfd = i32::from_ne_bytes([resp[4], resp[5], resp[6], resp[7]]);
        if pid < 0 || pidfd < 0 {
            return Err(std::io::Error::other("the slot's spawner could not clone the init"));
        }
        // SAFETY: CLONE_PIDFD put the descriptor into our shared table.
        Ok((pid, unsafe { OwnedFd::from_raw_fd(pidfd) }))
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
