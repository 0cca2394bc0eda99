//! The supervisor side of a run: clone the init, feed it, watch it, reap it.

use super::cgroup::{Baseline, SlotCgroup};
use super::child::{self, ChildPlan, MountStep, cstr};
use crate::error::os;
use crate::runio::{Captured, KillHandle, Output, cpu_time, exit_and_signal, resolve_exe, rlimit, stdin_memfd};
use crate::sys::{self, stack::Stack};
use crate::{RunOutcome, RunSpec, SandboxError, Termination, WORK_DIR, WorkDir};
use std::ffi::{CStr, CString};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;

mod warm;
pub(crate) use warm::Slot as WarmSlot;

/// Shared per-run inputs from the sandbox.
pub(crate) struct Context<'a> {
    /// Clones inits inside the slot's cgroup (absent without cgroups, and for seats).
    pub spawner: Option<&'a Arc<super::spawner::SlotSpawner>>,
    /// Clones seats' inits (see [`super::cloner`]).
    pub cloner: Option<&'a Arc<super::cloner::SeatCloner>>,
    /// The slot's mount namespace.
    pub mnt_ns: &'a Arc<OwnedFd>,
    /// The slot's namespace is this run's until the guard drops: after the
    /// run's mounts are gone, even when the run future is dropped.
    pub slot_guard: tokio::sync::OwnedMutexGuard<()>,
    /// Network namespaces made ahead of time (absent: each run makes its own).
    pub netns: Option<&'a super::netns::NetnsPool>,
    /// `seccomp` network isolation: the Landlock scope ruleset the program enforces, and no
    /// network namespace. None: a network namespace per run.
    pub net_scope: Option<&'a OwnedFd>,
    pub work: &'a WorkDir,
    pub uid: u32,
    pub cgroup: Option<&'a SlotCgroup>,
    pub seccomp: &'a [Vec<libc::sock_filter>],
    pub tmp_bytes: u64,
    /// The slot's zygotes, where warm starts are on.
    pub warm: Option<WarmSlot<'a>>,
    /// A session seat's run: it also sees its `/work` at [`crate::SEAT_HOME`].
    pub seat: bool,
}

const STACK_BYTES: usize = 256 * 1024;

fn build_plan(ctx: &Context<'_>, spec: &RunSpec, fds: [i32; 6], join: &[OwnedFd]) -> Result<ChildPlan, SandboxError> {
    let [stdin_fd, stdout_fd, stderr_fd, report_fd, work_fd, net_ns_fd] = fds;
    let landlock_fd = ctx.net_scope.map_or(-1, |fd| fd.as_raw_fd());
    let at = |p: &str| Ok::<_, SandboxError>(cstr(p));
    let tmp_opts = format!("size={},mode=1777", ctx.tmp_bytes);
    let nosuid_nodev = libc::MS_NOSUID | libc::MS_NODEV;
    let mut mounts = vec![
        MountStep {
            src: Some(cstr("tmpfs")),
            target: at("/tmp")?,
            fstype: Some(cstr("tmpfs")),
            flags: nosuid_nodev,
            data: Some(cstr(&tmp_opts)),
        },
        MountStep {
            src: Some(cstr("tmpfs")),
            target: at("/dev/shm")?,
            fstype: Some(cstr("tmpfs")),
            flags: nosuid_nodev | libc::MS_NOEXEC,
            data: Some(cstr(&tmp_opts)),
        },
        MountStep {
            src: Some(cstr("proc")),
            target: at("/proc")?,
            fstype: Some(cstr("proc")),
            flags: nosuid_nodev | libc::MS_NOEXEC,
            // Other users' processes (the root-owned init) stay invisible.
            data: Some(cstr("hidepid=2")),
        },
    ];
    if ctx.seat {
        // The same mount a second time (same files, same nosuid/nodev), so that code written
        // for E2B, whose home this is, finds its files, and getcwd() there says /home/user.
        // In the run's own mount namespace (a seat's runs always have one), gone with it.
        mounts.push(MountStep {
            src: Some(cstr(WORK_DIR)),
            target: at(crate::SEAT_HOME)?,
            fstype: None,
            flags: libc::MS_BIND,
            data: None,
        });
    }
    let l = &spec.limits;
    let cpu_s = l.cpu.as_secs() + u64::from(l.cpu.subsec_nanos() > 0);
    let mut rlimits = vec![
        // Backstop per process; the cgroup poll enforces the exact limit.
        (libc::RLIMIT_CPU, rlimit(cpu_s + 1, cpu_s + 2)),
        (libc::RLIMIT_FSIZE, rlimit(l.file_size, l.file_size)),
        (libc::RLIMIT_CORE, rlimit(0, 0)),
        (libc::RLIMIT_NOFILE, rlimit(4096, 4096)),
        (
            libc::RLIMIT_STACK,
            rlimit(l.memory.min(256 << 20), l.memory.min(256 << 20)),
        ),
    ];
    if ctx.cgroup.is_none() {
        // Without a cgroup the address-space cap is the only memory limit, and RLIMIT_NPROC
        // the only process limit. With one, its pids.max counts this run's tasks alone:
        // RLIMIT_NPROC counts every task of the uid on the host, and the executor pods on a
        // node use the same uids, so another pod's session of that uid took this run's room
        // (a drain's `tar`, held to 4, could not fork beside a new pod's interpreter).
        rlimits.push((libc::RLIMIT_AS, rlimit(l.memory, l.memory)));
        rlimits.push((libc::RLIMIT_NPROC, rlimit(l.processes as u64, l.processes as u64)));
    }
    let argv0 = spec
        .argv
        .first()
        .ok_or_else(|| SandboxError::Other("empty command".into()))?;
    let exe = resolve_exe(argv0);
    let to_c = |s: &str| CString::new(s).map_err(|_| SandboxError::Other(format!("NUL byte in {s:?}")));
    let argv: Vec<CString> = spec.argv.iter().map(|a| to_c(a)).collect::<Result<_, _>>()?;
    let envp: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| to_c(&format!("{k}={v}")))
        .collect::<Result<_, _>>()?;
    let mnt_ns_fd = ctx.mnt_ns.as_raw_fd();
    let join_cgroup_fds: Vec<i32> = join.iter().map(AsRawFd::as_raw_fd).collect();
    let mut keep_fds: Vec<i32> = [
        stdin_fd,
        stdout_fd,
        stderr_fd,
        report_fd,
        work_fd,
        mnt_ns_fd,
        net_ns_fd,
        landlock_fd,
    ]
    .into_iter()
    .chain(join_cgroup_fds.iter().copied())
    .filter(|fd| *fd >= 0)
    .collect();
    keep_fds.sort_unstable();
    keep_fds.dedup();
    Ok(ChildPlan {
        spawned_pid: std::sync::atomic::AtomicI32::new(0),
        setup_failed: std::sync::atomic::AtomicU64::new(0),
        // Set by the spawner that clones the init (see `SlotSpawner::spawn`).
        spawn_resp_fd: -1,
        die_with_parent: false,
        keep_fds,
        mounts,
        mnt_ns_fd,
        net_ns_fd,
        host_net: ctx.net_scope.is_some(),
        landlock_fd,
        work_fd,
        run_mount_points: super::slotns::RUN_MOUNT_POINTS.map(CStr::to_owned).to_vec(),
        hostname: b"sandbox",
        stdin_fd,
        stdout_fd,
        stderr_fd,
        report_fd,
        uid: ctx.uid,
        gid: ctx.uid,
        rlimits,
        seccomp: ctx.seccomp.to_vec(),
        cwd: cstr(WORK_DIR),
        exe: to_c(&exe)?,
        argv_ptrs: child::ptr_array(&argv),
        _argv: argv,
        envp_ptrs: child::ptr_array(&envp),
        _envp: envp,
        prog_stack: Stack::new(STACK_BYTES).map_err(os("allocating a stack"))?,
        warm_ctl_fd: -1,
        warm_ready_fd: -1,
        warm_own_mount_ns: false,
        join_cgroup_fds,
    })
}

/// What a run holds of its slot until its mounts are gone.
struct SlotHold {
    mnt_ns: Arc<OwnedFd>,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl SlotHold {
    /// Detaches what the run mounted in the slot's namespace (see [`super::slotns::clear`]).
    fn clear(&self) -> Result<(), SandboxError> {
        super::slotns::clear(&self.mnt_ns).map_err(os("clearing the slot's mounts"))
    }
}

impl super::spawner::Hold for SlotHold {
    fn init_killed(self) {
        if let Err(e) = self.clear() {
            tracing::error!(error = %e, "slot mounts left after a cancelled spawn");
        }
    }
}

/// A cloned init that is killed and reaped even if the run future is dropped.
struct Child {
    pid: i32,
    handle: KillHandle,
    pidfd: Option<AsyncFd<KillHandle>>,
    // The init shares our memory: plan and stack must outlive it.
    keep: Option<(Box<ChildPlan>, Stack)>,
    /// Released by `drop`, after the slot's mounts are cleared when the run was cut short.
    slot: Option<SlotHold>,
}

impl Child {
    fn kill(&self) {
        self.handle.kill();
    }

    /// Reaps the exited init; returns its rusage.
    fn reap(&mut self) -> libc::rusage {
        let ru = sys::process::reap(self.pid).map_or_else(sys::process::zero_rusage, |(_, ru)| ru);
        self.keep = None;
        self.pidfd = None;
        ru
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let slot = self.slot.take();
        let Some((plan, stack)) = self.keep.take() else {
            // Reaped, but the run future was dropped before it cleared the slot.
            if let Some(slot) = slot
                && let Err(e) = slot.clear()
            {
                tracing::error!(error = %e, "slot mounts left after a cancelled run");
            }
            return;
        };
        self.kill();
        let pid = self.pid;
        // Reap off the async runtime; only then may the shared memory go,
        // and the slot's mounts (the init never got to detach them).
        std::thread::spawn(move || {
            let _ = sys::process::waitpid(pid);
            drop((plan, stack));
            if let Some(slot) = slot
                && let Err(e) = slot.clear()
            {
                tracing::error!(error = %e, "slot mounts left after a cancelled run");
            }
        });
    }
}

/// What a run that could not start within its memory limit reports:
/// MEMORY_LIMIT_EXCEEDED, the request's limit and not the executor at fault.
fn no_room_to_start(why: &dyn std::fmt::Display) -> RunOutcome {
    tracing::info!(reason = %why, "run could not start within its memory limit");
    RunOutcome {
        signal: libc::SIGKILL,
        oom_killed: true,
        ..Default::default()
    }
}

/// The most a healthy slot holds between runs (the spawner's stack, page
/// cache); a limit below it is the request's mistake, usage above it the slot's.
const SLOT_FLOOR_BYTES: u64 = 8 << 20;

/// One run, start to end: [`setup`], [`spawn`], [`watch`], [`collect`].
/// Warm runs (see [`warm`]) differ only between spawn and watch.
pub(crate) async fn run(ctx: Context<'_>, spec: &RunSpec) -> Result<RunOutcome, SandboxError> {
    let mut warm_cfg = warm::wanted(&ctx, spec);
    if let Some(cfg) = &warm_cfg
        && let Err(e) = warm::ensure_zygote(&ctx, cfg).await
    {
        // A zygote that cannot start costs the run its warm start, not the run.
        tracing::warn!(error = %e, "no zygote; this run starts cold");
        warm_cfg = None;
    }
    let mut prepared = match setup(&ctx, spec)? {
        Ok(p) => p,
        Err(no_room) => return Ok(no_room),
    };
    let warm_prep = match (warm_cfg, &prepared.child_ends) {
        (Some(cfg), [Some(i), Some(o), Some(e), ..]) => {
            prepared.plan.warm_own_mount_ns = ctx.warm.as_ref().is_some_and(|w| w.seat);
            Some(warm::prepare(cfg, &mut prepared.plan, [i, o, e])?)
        }
        _ => None,
    };
    let rlimits = prepared.plan.rlimits.clone();
    let running = match spawn(
        ctx.mnt_ns.clone(),
        ctx.slot_guard,
        ctx.spawner,
        ctx.cloner,
        prepared,
        spec,
    )
    .await?
    {
        Ok(r) => r,
        Err(no_room) => return Ok(no_room),
    };
    let mut warm = match (warm_prep, &ctx.warm) {
        (Some(p), Some(slot)) => {
            warm::start(p, slot, ctx.cgroup, ctx.uid, ctx.seccomp, ctx.net_scope, spec, rlimits).await
        }
        _ => None,
    };
    let killed_by = watch(&running, spec, ctx.cgroup, warm.as_mut()).await?;
    if let Some(w) = warm.as_mut() {
        w.settle().await;
    }
    let mut outcome = collect(running, killed_by, spec, ctx.cgroup).await?;
    if let Some(w) = warm {
        if w.init_not_ready() {
            return Ok(outcome);
        }
        if let Some(e) = w.error {
            if w.before_program {
                return Err(SandboxError::WarmNotStarted(e.to_string()));
            }
            return Err(SandboxError::Other(e.to_string()));
        }
        outcome.warm = true;
    }
    Ok(outcome)
}

/// Everything a run needs before its init is cloned.
struct Prepared {
    /// The slot's counters before the run (with cgroups).
    baseline: Option<Baseline>,
    out_r: OwnedFd,
    err_r: OwnedFd,
    rep_r: OwnedFd,
    /// Our copies of what the init inherits, closed once it is running.
    child_ends: [Option<OwnedFd>; 6],
    /// The cgroup's `cgroup.procs` files the program joins through (seat runs), closed likewise.
    join_ends: Vec<OwnedFd>,
    plan: Box<ChildPlan>,
    stack: Stack,
    /// With a memory cgroup, running out of memory while starting is the run's limit at work.
    enomem_is_mle: bool,
}

/// Sets the slot's limits and builds the init's plan. `Err(outcome)`: the
/// run cannot start within its memory limit, which is its own verdict.
fn setup(ctx: &Context<'_>, spec: &RunSpec) -> Result<Result<Prepared, RunOutcome>, SandboxError> {
    use crate::error::CgroupError::LimitBelowUsage;
    let prepare = || ctx.cgroup.map(|c| c.prepare(spec.limits.memory, spec.limits.processes));
    let mut prepared = prepare();
    if let Some(Err(e @ LimitBelowUsage { usage, .. })) = &prepared
        && *usage > SLOT_FLOOR_BYTES
    {
        // More than a healthy slot holds: whatever a run left mounted in the
        // slot's namespace goes (this run holds the slot), then one more try.
        tracing::warn!(error = %e, "slot holds memory between runs; clearing its mounts");
        super::slotns::clear(ctx.mnt_ns).map_err(os("clearing the slot's mounts"))?;
        prepared = prepare();
    }
    let baseline = match prepared {
        None => None,
        Some(Ok(b)) => Some(b),
        Some(Err(e @ LimitBelowUsage { usage, .. })) if usage <= SLOT_FLOOR_BYTES => {
            return Ok(Err(no_room_to_start(&e)));
        }
        Some(Err(e)) => return Err(e.into()),
    };
    let (out_r, out_w) = sys::pipe().map_err(os("pipe2"))?;
    let (err_r, err_w) = sys::pipe().map_err(os("pipe2"))?;
    let (rep_r, rep_w) = sys::pipe().map_err(os("pipe2"))?;
    let stdin = stdin_memfd(&spec.stdin)?;
    let work = ctx.work.attachable().map_err(os("cloning the work dir mount"))?;
    let net_ns = ctx.netns.filter(|_| ctx.net_scope.is_none()).and_then(|p| p.take());
    let fds = [
        stdin.as_raw_fd(),
        out_w.as_raw_fd(),
        err_w.as_raw_fd(),
        rep_w.as_raw_fd(),
        work.as_raw_fd(),
        net_ns.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
    ];
    // A seat has no spawner inside its cgroup: the program moves itself in.
    let join_ends = match (ctx.spawner, ctx.cgroup) {
        (None, Some(c)) => c.join_files().map_err(os("opening the seat's cgroup"))?,
        _ => Vec::new(),
    };
    let plan = Box::new(build_plan(ctx, spec, fds, &join_ends)?);
    let stack = Stack::new(STACK_BYTES).map_err(os("allocating a stack"))?;
    Ok(Ok(Prepared {
        baseline,
        out_r,
        err_r,
        rep_r,
        child_ends: [Some(stdin), Some(out_w), Some(err_w), Some(rep_w), Some(work), net_ns],
        join_ends,
        plan,
        stack,
        enomem_is_mle: ctx.cgroup.is_some(),
    }))
}

/// A run whose init is alive, with its output being read.
struct Running {
    kid: Child,
    started: Instant,
    baseline: Option<Baseline>,
    /// Its readers kill the run when a stream goes past its cap.
    output: Output,
    rep_r: OwnedFd,
    enomem_is_mle: bool,
}

/// Clones the init from the calling thread, with a pidfd. The caller moves `plan` and
/// `stack` into the init's [`Child`] at once, which keeps them until the init is reaped.
fn clone_here(plan: &ChildPlan, stack: &Stack, flags: libc::c_int) -> std::io::Result<(i32, OwnedFd)> {
    let mut pidfd: libc::c_int = -1;
    // SAFETY: the init runs on its own stack and reads the plan, both kept alive by `Child`
    // until it is reaped; it touches nothing else.
    let pid = unsafe {
        sys::process::clone(
            child::init_main,
            stack.top(),
            flags | libc::CLONE_PIDFD,
            plan as *const ChildPlan as *mut libc::c_void,
            &mut pidfd,
        )
    }?;
    // SAFETY: CLONE_PIDFD stored a fresh descriptor we now own.
    Ok((pid, unsafe { OwnedFd::from_raw_fd(pidfd) }))
}

/// Clones the init (through the slot's spawner when there is one) and starts
/// reading its output. `Err(outcome)`: no memory left in the slot to start it.
///
/// A spawner answers through a pipe, and a dead or stopped one would never
/// answer: that wait happens in the runtime's reactor, with a time-out (see
/// [`super::spawner`]). The init comes back owned by a [`Child`], and a run
/// future dropped before the answer leaves it to be killed and reaped before
/// its plan is freed.
async fn spawn(
    mnt_ns: Arc<OwnedFd>,
    slot_guard: tokio::sync::OwnedMutexGuard<()>,
    spawner: Option<&Arc<super::spawner::SlotSpawner>>,
    cloner: Option<&Arc<super::cloner::SeatCloner>>,
    p: Prepared,
    spec: &RunSpec,
) -> Result<Result<Running, RunOutcome>, SandboxError> {
    let new_net = if p.child_ends[5].is_some() || p.plan.host_net {
        0
    } else {
        libc::CLONE_NEWNET
    };
    // A cgroup namespace rooted at the slot keeps the host's cgroup paths out of /proc/self/cgroup.
    let flags = libc::CLONE_VM
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWCGROUP
        | new_net
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::SIGCHLD;
    let Prepared {
        baseline,
        out_r,
        err_r,
        rep_r,
        child_ends,
        join_ends,
        plan,
        stack,
        enomem_is_mle,
    } = p;
    let slot = SlotHold {
        mnt_ns,
        _guard: slot_guard,
    };
    let started = Instant::now();
    let clone_init = move |spawned: std::io::Result<(i32, OwnedFd)>, plan, stack, slot| {
        // The init holds its own copies now (and the namespace, once it entered it).
        drop((child_ends, join_ends));
        spawned.map(|(pid, pidfd)| Child {
            pid,
            handle: KillHandle::new(pidfd),
            pidfd: None,
            keep: Some((plan, stack)),
            slot: Some(slot),
        })
    };
    let kid = match (spawner, cloner) {
        (None, Some(cl)) => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let mut plan = plan;
            plan.die_with_parent = true;
            // The closure owns the plan and stack and makes the `Child`: a run future
            // dropped meanwhile still has its init killed and reaped before they are freed.
            let job = Box::new(move || {
                let spawned = clone_here(&plan, &stack, flags);
                let _ = tx.send(clone_init(spawned, plan, stack, slot));
            });
            cl.run(job).map_err(os("handing the seat's init to its cloner"))?;
            rx.await
                .map_err(|e| SandboxError::Other(format!("the seat cloner did not answer: {e}")))?
        }
        // Answered through the reactor; a dropped future leaves the init to the spawner's clean-up.
        (Some(sp), _) => match sp.spawn(plan, stack, flags, slot).await {
            Ok((pid, pidfd, plan, stack, slot)) => clone_init(Ok((pid, pidfd)), plan, stack, slot),
            Err(e) => Err(e),
        },
        (None, None) => {
            let spawned = clone_here(&plan, &stack, flags);
            clone_init(spawned, plan, stack, slot)
        }
    };
    let mut kid = match kid {
        Ok(kid) => kid,
        // The init's kernel stack and tables are charged to the slot's cgroup.
        Err(e) if enomem_is_mle && e.raw_os_error() == Some(libc::ENOMEM) => return Ok(Err(no_room_to_start(&e))),
        Err(e) => return Err(SandboxError::Os("spawning the init", e)),
    };
    let handle = kid.handle.clone();
    kid.pidfd = Some(handle.watch()?);
    // The readers may outlive the supervisor (a dropped run): they hold the descriptor too.
    let output = Output::read(out_r, err_r, spec.limits.output, handle);
    Ok(Ok(Running {
        kid,
        started,
        baseline,
        output,
        rep_r,
        enomem_is_mle,
    }))
}

/// The shortest pause between two reads of the slot's CPU counter.
const CPU_POLL_MIN: Duration = Duration::from_millis(20);

/// When to read the slot's CPU counter again, given the CPU time the run has left: every
/// 20 ms while the limit is near (up to ten seconds left), up to once a second while it is
/// far. A session's interpreter has minutes left and sits idle for most of them: hundreds
/// of those must not wake the executor 50 times a second each. The overshoot stays below
/// 1/512 of what was left per CPU the run keeps busy.
fn cpu_poll(left_ns: u64) -> Duration {
    Duration::from_nanos(left_ns / 512).clamp(CPU_POLL_MIN, Duration::from_secs(1))
}

/// Waits for the init to exit, killing it at the wall-time limit or when the
/// slot's CPU counter passes the CPU limit; says which limit ended it, if any.
async fn watch(
    r: &Running,
    spec: &RunSpec,
    cgroup: Option<&SlotCgroup>,
    mut warm: Option<&mut warm::Warm>,
) -> Result<Option<Termination>, SandboxError> {
    let deadline = tokio::time::Instant::from_std(r.started + spec.limits.wall);
    let cpu_limit_ns = spec.limits.cpu.as_nanos() as u64;
    let cpu_at_start = r.baseline.as_ref().map_or(0, |b| b.cpu_ns());
    let mut killed_by = None;
    let mut next_poll = tokio::time::Instant::now() + CPU_POLL_MIN;
    let Some(exited) = r.kid.pidfd.as_ref().map(|f| f.readable()) else {
        return Err(SandboxError::Other("no pidfd".into()));
    };
    tokio::pin!(exited);
    loop {
        tokio::select! {
            _ = &mut exited => return Ok(killed_by),
            ended = async {
                match warm.as_deref_mut() {
                    Some(w) => w.ended().await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some(w) = warm.as_deref_mut() {
                    w.finish(ended).await;
                }
            }
            _ = tokio::time::sleep_until(deadline), if killed_by.is_none() => {
                r.kid.kill();
                killed_by = Some(Termination::WallTime);
            }
            _ = tokio::time::sleep_until(next_poll), if killed_by.is_none() && cgroup.is_some() => {
                let used = cgroup.map_or(0, |c| c.cpu_ns()).saturating_sub(cpu_at_start);
                if used >= cpu_limit_ns {
                    r.kid.kill();
                    killed_by = Some(Termination::CpuTime);
                }
                next_poll = tokio::time::Instant::now() + cpu_poll(cpu_limit_ns.saturating_sub(used));
            }
        }
    }
}

/// Reaps the init, gathers output, reports and usage, clears the slot when
/// the init could not, and says what the run did.
async fn collect(
    mut r: Running,
    mut killed_by: Option<Termination>,
    spec: &RunSpec,
    cgroup: Option<&SlotCgroup>,
) -> Result<RunOutcome, SandboxError> {
    let wall = r.started.elapsed();
    // Read before the reap frees the plan (the init and program are gone: nothing writes it).
    let lost = r
        .kid
        .keep
        .as_ref()
        .map_or(0, |(p, _)| p.setup_failed.load(std::sync::atomic::Ordering::SeqCst));
    let ru = r.kid.reap();

    // All writers are dead; the readers reach EOF promptly.
    let Captured {
        stdout: (stdout, stdout_truncated),
        stderr: (stderr, stderr_truncated),
        overflowed,
    } = r.output.collect().await;
    if overflowed && killed_by.is_none() {
        killed_by = Some(Termination::Output);
    }

    let mut reports = Vec::new();
    let _ = std::fs::File::from(r.rep_r).read_to_end(&mut reports);
    let mut reports = child::parse_reports(&reports);
    let failed = |tag: u32| tag == child::report::SETUP_FAILED || tag == child::report::EXEC_FAILED;
    if lost != 0 && !reports.iter().any(|(tag, _, _)| failed(*tag)) {
        // A failed step whose report could not be written (see `child::fail`).
        tracing::debug!(
            stage = child::report::Stage::name_of((lost >> 32) as u32),
            "setup report lost; read from the plan"
        );
        reports.insert(
            0,
            (child::report::SETUP_FAILED, (lost >> 32) as u32, lost as u32 as i32),
        );
    }
    let status = reports
        .iter()
        .find(|(tag, _, _)| *tag == child::report::STATUS)
        .map(|r| r.2);
    // An init that reported the program's status and was not killed detached
    // the run's mounts itself; otherwise they are cleared from outside, before
    // the slot is handed on and before this run's response exists.
    let slot = r.kid.slot.take();
    if (status.is_none() || killed_by.is_some())
        && let Some(slot) = &slot
    {
        slot.clear()?;
    }
    drop((r.kid, slot));
    for (tag, stage, value) in reports {
        let errno = std::io::Error::from_raw_os_error(value);
        match tag {
            child::report::SETUP_FAILED | child::report::EXEC_FAILED if r.enomem_is_mle && value == libc::ENOMEM => {
                return Ok(no_room_to_start(&errno));
            }
            child::report::SETUP_FAILED => {
                return Err(SandboxError::Setup {
                    stage: child::report::Stage::name_of(stage),
                    errno,
                });
            }
            child::report::EXEC_FAILED => {
                return Err(SandboxError::Exec {
                    exe: spec.argv.first().cloned().unwrap_or_default(),
                    errno,
                });
            }
            _ => {}
        }
    }
    let usage = match (cgroup, r.baseline.as_mut()) {
        (Some(c), Some(b)) => Some(c.usage(b)),
        _ => None,
    };
    let cpu = usage.map_or(cpu_time(&ru), |u| Duration::from_nanos(u.cpu_ns));
    // No status: the init died before reporting, killed by us (limits) or by the OOM killer.
    let (exit_code, signal) = exit_and_signal(status);
    Ok(RunOutcome {
        exit_code,
        signal,
        killed_by,
        oom_killed: usage.is_some_and(|u| u.oom_killed),
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        wall,
        cpu,
        // The largest process's resident set where the cgroup cannot tell.
        peak_memory: usage.and_then(|u| u.peak_memory).unwrap_or(ru.ru_maxrss as u64 * 1024),
        // Measured facts only; what they mean for the verdict is the caller's rule.
        cpu_exceeded: cpu >= spec.limits.cpu || signal == libc::SIGXCPU || killed_by == Some(Termination::CpuTime),
        warm: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_counter_is_read_often_near_the_limit_and_rarely_far_from_it() {
        let s = |secs: u64| cpu_poll(secs * 1_000_000_000);
        assert_eq!(s(0), CPU_POLL_MIN);
        assert_eq!(
            s(10),
            CPU_POLL_MIN,
            "an ordinary run's limit is watched as closely as before"
        );
        assert!(
            s(60) > CPU_POLL_MIN && s(60) < Duration::from_millis(200),
            "{:?}",
            s(60)
        );
        assert_eq!(s(600), Duration::from_secs(1), "a session's 10 minutes: once a second");
    }
}
