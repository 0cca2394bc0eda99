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
//!
//! A spawner answers through a pipe, and one that died or was stopped would
//! never answer: a request waits for the answer in the runtime's reactor
//! (`AsyncFd` on the answer pipe and on the spawner's pidfd, no thread hop),
//! and gives up after [`ANSWER_TIMEOUT`]. [`SlotSpawner`] then reaps it, logs
//! its status, and starts the slot a new one (on the blocking pool: a new
//! spawner's start and its move into the cgroup block); the request in flight
//! fails, later ones work. A request whose caller goes away before the answer
//! hands its plan and stack to a thread that waits for the answer and kills
//! and reaps the init, so the init never outlives its memory.

use super::child::{self, ChildPlan};
use crate::sys::raw as sys;
use crate::sys::stack::Stack;
use crate::sys::{pipe, process};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::sync::{Mutex, OwnedMutexGuard};

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
        // Requests are written whole (far below PIPE_BUF); anything else means
        // the executor closed or lost our pipe: nothing will ask again.
        match sys::read(st.req_r, buf) {
            Ok(n) if n == buf.len() => {}
            Err(libc::EINTR) => continue,
            Ok(0) => sys::exit(0),
            Ok(_) => sys::exit(2),
            Err(_) => sys::exit(3),
        }
        // SAFETY: the plan stays alive in the executor until the init is reaped.
        let plan = unsafe { &*(req.plan as *const ChildPlan) };
        // SAFETY: as above; with CLONE_VFORK this returns once the init has
        // exited, and the init itself sends the response (see `init_main`).
        let cloned = unsafe {
            process::clone(
                child::init_main,
                req.stack_top as *mut libc::c_void,
                req.flags as libc::c_int,
                req.plan as *mut libc::c_void,
                plan.spawned_pid.as_ptr(),
            )
        };
        // errno (read by `clone`) lives in the TLS of the thread that created us, which only waits.
        if let Err(e) = cloned {
            respond(st.resp_w, -1, e.raw_os_error().unwrap_or(0));
        }
    }
}

/// How long a healthy spawner takes at most to answer a request: its init
/// answers first thing after `clone`, which is milliseconds even when the
/// kernel is slow to make a network namespace. Past it the spawner counts as
/// stopped (SIGSTOP, a frozen cgroup) and is replaced.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request to a spawner failed.
#[derive(Debug)]
enum Failure {
    /// `clone` itself failed (the spawner is fine): its errno.
    Clone(std::io::Error),
    /// The spawner is dead, stuck, or its channel broke: it must be replaced.
    Broken(String),
}

/// A slot's spawner process.
#[derive(Debug)]
pub(crate) struct Spawner {
    pid: i32,
    /// Polled for the spawner's exit; signals go through it (never a pid that may be reused).
    pidfd: OwnedFd,
    req_w: std::fs::File,
    resp_r: std::fs::File,
    resp_w: i32,
    reaped: bool,
    /// Dropped after the spawner is reaped: lets its thread go (see `start`).
    _release: std::sync::mpsc::Sender<()>,
    _stack: Stack,
    _ends: (OwnedFd, OwnedFd),
}

impl Spawner {
    /// Starts a spawner from a thread of its own, which waits for it (vfork)
    /// for as long as it lives; the caller then moves [`Spawner::pid`] into
    /// the slot's cgroup. Blocks up to [`ANSWER_TIMEOUT`]: not on a runtime thread.
    fn start() -> std::io::Result<Self> {
        let (req_r, req_w) = pipe()?;
        let (resp_r, resp_w) = pipe()?;
        // Awaited through the reactor (see `answer`): never a blocking read there.
        set_nonblocking(&resp_r)?;
        let stack = Stack::new(64 * 1024)?;
        // Leaked (a few bytes per spawner) so that it can never dangle.
        let st: &'static SpawnerState = Box::leak(Box::new(SpawnerState {
            req_r: req_r.as_raw_fd(),
            resp_w: resp_w.as_raw_fd(),
            pid: AtomicI32::new(0),
        }));
        let top = stack.top() as usize;
        let (release, held) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("sandpool-spawner".into())
            .spawn(move || {
                let flags = libc::CLONE_VM | libc::CLONE_FILES | libc::CLONE_VFORK | libc::CLONE_PARENT_SETTID;
                // SAFETY: the spawner runs on its own stack (kept by the Spawner,
                // which kills and reaps it before unmapping) and reads only `st`.
                let cloned = unsafe {
                    process::clone(
                        spawner_main,
                        top as *mut libc::c_void,
                        flags | libc::SIGCHLD,
                        st as *const SpawnerState as *mut libc::c_void,
                        st.pid.as_ptr(),
                    )
                };
                if let Err(e) = cloned {
                    respond(st.resp_w, -1, e.raw_os_error().unwrap_or(0));
                }
                // Otherwise the spawner has exited. This thread is the parent of
                // the inits it cloned (CLONE_PARENT) and they die with it
                // (PDEATHSIG): it stays until the Spawner is dropped, which is
                // after the slot's run in flight has ended.
                let _ = held.recv();
            })?;
        let mut resp_r = std::fs::File::from(resp_r);
        let ready = match wait_readable(&resp_r, None, ANSWER_TIMEOUT) {
            Readable::Yes => read_answer(&mut resp_r)?,
            _ => {
                // The clone happened or will; the pid is in `st` once it did.
                kill_and_reap(st.pid.load(Ordering::SeqCst));
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "a new spawner did not answer",
                ));
            }
        };
        let (pid, errno) = ready;
        if pid <= 0 {
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        let pidfd = process::pidfd_open(pid).inspect_err(|_| kill_and_reap(pid))?;
        Ok(Spawner {
            pid,
            pidfd,
            req_w: std::fs::File::from(req_w),
            resp_r,
            resp_w: resp_w.as_raw_fd(),
            reaped: false,
            _release: release,
            _stack: stack,
            _ends: (req_r, resp_w),
        })
    }

    /// The spawner's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// True once the spawner has exited (it is then a zombie until [`Spawner::stop`]).
    fn exited(&self) -> bool {
        matches!(wait_readable(&self.pidfd, None, Duration::ZERO), Readable::Yes)
    }

    /// Asks the spawner to clone an init; its answer is read by [`Spawner::take_answer`].
    fn send(&self, plan: &ChildPlan, stack: &Stack, flags: libc::c_int) -> Result<(), Failure> {
        let req = Request {
            plan: plan as *const ChildPlan as usize,
            stack_top: stack.top() as usize,
            flags: (flags | libc::CLONE_PARENT | libc::CLONE_VFORK | libc::CLONE_PARENT_SETTID) as usize,
        };
        // SAFETY: Request is plain data.
        let bytes =
            unsafe { std::slice::from_raw_parts(&req as *const Request as *const u8, std::mem::size_of::<Request>()) };
        // One request at a time per spawner, far below PIPE_BUF: the write never blocks,
        // and never fails with EPIPE while we hold the read end (`_ends`).
        (&self.req_w)
            .write_all(bytes)
            .map_err(|e| Failure::Broken(format!("its request pipe failed: {e}")))
    }

    /// Waits for the answer to a request sent, in the runtime's reactor, up to [`ANSWER_TIMEOUT`].
    async fn answer(&self) -> Readable {
        let deadline = tokio::time::Instant::now() + ANSWER_TIMEOUT;
        let interest = tokio::io::Interest::READABLE;
        let resp = self.resp_r.as_raw_fd();
        // SAFETY: both descriptors belong to `self`, which outlives these registrations
        // (dropped at the end of this call) and closes neither meanwhile.
        let (r, p) = match unsafe {
            (
                AsyncFd::register_with_interest(resp, interest),
                AsyncFd::register_with_interest(self.pidfd.as_raw_fd(), interest),
            )
        } {
            (Ok(r), Ok(p)) => (r, p),
            (Err(e), _) | (_, Err(e)) => return Readable::Failed(e.into()),
        };
        loop {
            // The kernel's word (an answer written just before an exit still counts);
            // the reactor only says when to ask again.
            match wait_readable(&self.resp_r, Some(&self.pidfd), Duration::ZERO) {
                Readable::TimedOut => {}
                other => return other,
            }
            let woke = tokio::time::timeout_at(deadline, async {
                tokio::select! {
                    g = r.readable() => g.map(|mut g| g.clear_ready()),
                    g = p.readable() => g.map(|mut g| g.clear_ready()),
                }
            })
            .await;
            match woke {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Readable::Failed(e),
                Err(_) => return wait_readable(&self.resp_r, Some(&self.pidfd), Duration::ZERO),
            }
        }
    }

    /// Reads the answer to a request once [`Spawner::answer`] (or a blocking poll) said `ready`.
    fn take_answer(&self, ready: Readable) -> Result<(i32, OwnedFd), Failure> {
        match ready {
            Readable::Yes => {}
            Readable::Exited => return Err(Failure::Broken("exited".into())),
            Readable::TimedOut => {
                return Err(Failure::Broken(format!(
                    "did not answer within {}s (stopped or stuck)",
                    ANSWER_TIMEOUT.as_secs()
                )));
            }
            Readable::Failed(e) => return Err(Failure::Broken(format!("could not be polled: {e}"))),
        }
        let (pid, errno) = read_answer(&mut &self.resp_r).map_err(|e| Failure::Broken(format!("its answer: {e}")))?;
        if pid <= 0 {
            return Err(Failure::Clone(std::io::Error::from_raw_os_error(errno)));
        }
        // The init is our child (CLONE_PARENT) and only we reap it, so the pid
        // cannot be reused before this.
        // An init without a pidfd must not outlive its plan.
        process::pidfd_open(pid).map(|fd| (pid, fd)).map_err(|e| {
            kill_and_reap(pid);
            Failure::Clone(e)
        })
    }

    /// Kills and reaps the spawner; returns its wait status. Blocks (briefly).
    fn stop(mut self) -> i32 {
        self.reap()
    }

    fn reap(&mut self) -> i32 {
        if self.reaped {
            return 0;
        }
        // Harmless once it exited.
        process::pidfd_kill(self.pidfd.as_fd());
        // Our own child (the spawner's thread never waits for it).
        let status = process::reap(self.pid).map_or(0, |(status, _)| status);
        self.reaped = true;
        status
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        self.reap();
    }
}

/// A slot's spawner, replaced when it dies or stops answering: a request in
/// flight then fails (SANDBOX_ERROR), and the slot's next run gets a new one.
#[derive(Debug)]
pub(crate) struct SlotSpawner {
    slot: usize,
    /// Held from a request until its answer (or its clean-up) is done.
    current: Arc<Mutex<Option<Spawner>>>,
    /// The slot cgroup's `cgroup.procs`, to move a replacement in.
    procs: Vec<std::fs::File>,
}

/// A spawned init: its pid and pidfd, the plan and stack it runs on, which the caller
/// keeps until the init is reaped, and what the caller gave to be held as long (the slot).
pub(crate) type Spawned<H> = (i32, OwnedFd, Box<ChildPlan>, Stack, H);

impl SlotSpawner {
    /// Starts the spawner of `slot` and moves it into the cgroup whose `cgroup.procs` are `procs`.
    /// Blocks up to [`ANSWER_TIMEOUT`]: not on a runtime thread.
    pub fn start(slot: usize, procs: Vec<OwnedFd>) -> std::io::Result<Self> {
        let mut s = SlotSpawner {
            slot,
            current: Arc::new(Mutex::new(None)),
            procs: procs.into_iter().map(std::fs::File::from).collect(),
        };
        let first = s.fresh()?;
        s.current = Arc::new(Mutex::new(Some(first)));
        Ok(s)
    }

    /// A new spawner, in the slot's cgroup. Blocks: not on a runtime thread.
    fn fresh(&self) -> std::io::Result<Spawner> {
        let sp = Spawner::start()?;
        for mut f in &self.procs {
            // The spawner and its memory are dropped (killed, reaped) on error.
            f.write_all(sp.pid().to_string().as_bytes())?;
        }
        Ok(sp)
    }

    /// Clones an init running `plan` on `stack` with `flags` (CLONE_PARENT,
    /// CLONE_VFORK and CLONE_PARENT_SETTID are added; CLONE_PIDFD must not be).
    ///
    /// The answer is awaited in the reactor, up to [`ANSWER_TIMEOUT`] (the
    /// blocking pool starts a replacement spawner when one is needed). When it
    /// fails, no init of `plan` is left running; when the future is dropped
    /// before the answer, a thread of its own waits for it and kills and reaps
    /// the init before the plan, the stack and `hold` are freed.
    pub async fn spawn<H: Hold>(
        self: &Arc<Self>,
        mut plan: Box<ChildPlan>,
        stack: Stack,
        flags: libc::c_int,
        hold: H,
    ) -> std::io::Result<Spawned<H>> {
        let mut current = Arc::clone(&self.current).lock_owned().await;
        if current.as_ref().is_some_and(Spawner::exited)
            && let Some(dead) = current.take()
        {
            // A zombie already: reaping it does not wait.
            let pid = dead.pid();
            let status = dead.stop();
            tracing::error!(slot = self.slot, pid, status = %describe_status(status), "the slot's spawner had exited; replacing it");
        }
        if current.is_none() {
            let this = Arc::clone(self);
            let (fresh, back) = tokio::task::spawn_blocking(move || (this.fresh(), current))
                .await
                .map_err(|e| std::io::Error::other(format!("starting a spawner: {e}")))?;
            current = back;
            *current = Some(fresh?);
        }
        let Some(sp) = current.as_ref() else {
            return Err(std::io::Error::other("the slot's spawner is gone"));
        };
        // The init answers its spawner first thing (see `init_main`).
        plan.spawn_resp_fd = sp.resp_w;
        let why = match sp.send(&plan, &stack, flags) {
            Ok(()) => {
                let mut pending = Pending(Some((current, plan, stack, hold)));
                let ready = match &pending.0 {
                    Some((c, ..)) if let Some(sp) = c.as_ref() => sp.answer().await,
                    _ => Readable::Failed(std::io::Error::other("the slot's spawner is gone")),
                };
                // Answered: nothing for `Pending` to clean up any more.
                let Some((c, p, st, h)) = pending.0.take() else {
                    return Err(std::io::Error::other("the slot's spawner is gone"));
                };
                let answer = match c.as_ref() {
                    Some(sp) => sp.take_answer(ready),
                    None => Err(Failure::Broken("is gone".into())),
                };
                match answer {
                    Ok((pid, pidfd)) => return Ok((pid, pidfd, p, st, h)),
                    Err(Failure::Clone(e)) => return Err(e),
                    Err(Failure::Broken(why)) => {
                        (current, plan) = (c, p);
                        (why, st, h)
                    }
                }
            }
            Err(Failure::Broken(why)) => (why, stack, hold),
            Err(Failure::Clone(e)) => return Err(e),
        };
        // Broken: stopping it, reaping what it cloned and starting a new one block.
        let (why, stack, hold) = why;
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            this.replace(current, &why, plan.spawned_pid.load(Ordering::SeqCst));
            // The init is reaped: its plan and stack may go, and the slot.
            drop((plan, stack));
            hold.init_killed();
            Err(std::io::Error::other(format!("the slot's spawner {why}")))
        })
        .await
        .map_err(|e| std::io::Error::other(format!("replacing the spawner: {e}")))?
    }

    /// Stops a broken spawner, kills and reaps the init it may have cloned
    /// (`spawned_pid`, ours by CLONE_PARENT), and starts the slot a new one. Blocks.
    fn replace(&self, mut current: OwnedMutexGuard<Option<Spawner>>, why: &str, spawned_pid: i32) {
        if let Some(broken) = current.take() {
            let pid = broken.pid();
            let status = broken.stop();
            tracing::error!(slot = self.slot, pid, status = %describe_status(status), "the slot's spawner {why}; replacing it");
        }
        kill_and_reap(spawned_pid);
        match self.fresh() {
            Ok(sp) => *current = Some(sp),
            Err(e) => {
                tracing::error!(slot = self.slot, error = %e, "could not replace the slot's spawner; the next run tries again")
            }
        }
    }
}

/// What a spawn's caller holds while its init may run (the slot), given back with the init.
pub(crate) trait Hold: Send + 'static {
    /// The init was cloned for a request that failed or was abandoned, and is now killed
    /// and reaped: undo what it may have left (blocking; never on the runtime).
    fn init_killed(self);
}

/// A request sent and not yet answered. Dropped unanswered (the run's future went
/// away), it hands everything to a thread that waits for the answer (blocking,
/// with the time-out) and kills and reaps the init before its plan and stack go.
/// The spawner's lock and what the caller holds (its slot) go with it, so the slot's
/// next run waits for that.
type InFlight<H> = (OwnedMutexGuard<Option<Spawner>>, Box<ChildPlan>, Stack, H);
struct Pending<H: Hold>(Option<InFlight<H>>);

impl<H: Hold> Drop for Pending<H> {
    fn drop(&mut self) {
        let Some((current, plan, stack, hold)) = self.0.take() else {
            return;
        };
        let finish = move || {
            let Some(sp) = current.as_ref() else {
                return;
            };
            let ready = wait_readable(&sp.resp_r, Some(&sp.pidfd), ANSWER_TIMEOUT);
            match sp.take_answer(ready) {
                Ok((pid, _pidfd)) => kill_and_reap(pid),
                Err(Failure::Clone(_)) => {}
                Err(Failure::Broken(why)) => {
                    let mut current = current;
                    if let Some(broken) = current.take() {
                        let pid = broken.pid();
                        let status = broken.stop();
                        tracing::error!(pid, status = %describe_status(status), "an abandoned request's spawner {why}; the slot's next run starts a new one");
                    }
                    kill_and_reap(plan.spawned_pid.load(Ordering::SeqCst));
                    drop(current);
                }
            }
            drop((plan, stack));
            hold.init_killed();
        };
        // A thread of its own: the blocking pool may be shutting down with the runtime.
        type Job = std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>;
        let job: Arc<Job> = Arc::new(std::sync::Mutex::new(Some(Box::new(finish))));
        let theirs = Arc::clone(&job);
        let take =
            |j: &std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>| j.lock().unwrap_or_else(|p| p.into_inner()).take();
        let spare = std::thread::Builder::new()
            .name("sandpool-abandon".into())
            .spawn(move || take(&theirs).map(|f| f()));
        if spare.is_err() {
            tracing::error!("no thread for an abandoned spawn: finishing it here");
            if let Some(f) = take(&job) {
                f()
            }
        }
    }
}

/// A wait status as a person reads it.
fn describe_status(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("wait status {status}")
    }
}

enum Readable {
    Yes,
    /// The process behind the pidfd exited first.
    Exited,
    TimedOut,
    Failed(std::io::Error),
}

/// Waits until `fd` is readable, `exit` (a pidfd) says its process exited, or `timeout` passes.
fn wait_readable(fd: &impl AsFd, exit: Option<&OwnedFd>, timeout: Duration) -> Readable {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let mut fds: Vec<PollFd> = std::iter::once(fd.as_fd())
            .chain(exit.map(|e| e.as_fd()))
            .map(|f| PollFd::new(f, PollFlags::POLLIN))
            .collect();
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        match poll(&mut fds, PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Readable::Failed(e.into()),
            Ok(_) => {}
        }
        let ready = |p: &PollFd| p.revents().is_some_and(|r| !r.is_empty());
        // An answer written just before the exit still counts.
        if ready(&fds[0]) {
            return Readable::Yes;
        }
        if fds.get(1).is_some_and(ready) {
            return Readable::Exited;
        }
        if std::time::Instant::now() >= deadline {
            return Readable::TimedOut;
        }
    }
}

/// Sets `O_NONBLOCK` on `fd` (a pipe's read end: no other status flag to keep).
fn set_nonblocking(fd: &impl AsFd) -> std::io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Reads one `(pid, errno)` answer.
fn read_answer(r: &mut impl Read) -> std::io::Result<(i32, i32)> {
    let mut resp = [0u8; 8];
    r.read_exact(&mut resp)?;
    Ok((
        i32::from_ne_bytes([resp[0], resp[1], resp[2], resp[3]]),
        i32::from_ne_bytes([resp[4], resp[5], resp[6], resp[7]]),
    ))
}

/// SIGKILLs and reaps our own unreaped child `pid` (nothing for 0: no child was made).
fn kill_and_reap(pid: i32) {
    if pid > 0 {
        // A child of ours nobody else reaps, so the pid is still its.
        process::sigkill(pid);
        let _ = process::waitpid(pid);
    }
}
