//! The supervisor's part of a warm run (see [`crate::zygote`]): the init is
//! set up as for a cold run but starts no program; once it is ready, the
//! slot's zygote forks the program into the init's namespaces, and the wait
//! status it reports goes to the init, which reports it as a cold init would.

use super::Context;
use crate::RunSpec;
use crate::SandboxError;
use crate::ZygoteConfig;
use crate::error::os;
use crate::namespaces::cgroup::SlotCgroup;
use crate::namespaces::child::ChildPlan;
use crate::zygote::{self, Launch, RunRequest, ZygoteError, Zygotes};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// What a warm run needs from the slot.
pub(crate) struct Slot<'a> {
    pub zygotes: &'a Arc<Zygotes>,
    /// The zygotes' index in `zygotes`.
    pub index: usize,
    /// A session seat: its init lives outside the seat's cgroup, and mounts the run in a
    /// mount namespace of its own (see [`RunRequest::new_cgroup_ns`], `ChildPlan::warm_own_mount_ns`).
    pub seat: bool,
}

/// Made before the init is cloned.
pub(super) struct Prep {
    cfg: Arc<ZygoteConfig>,
    /// The init's end of the control channel (it holds its own copy once cloned).
    init_end: OwnedFd,
    ctl: OwnedFd,
    /// Our copies of the program's stdin, stdout and stderr, for the zygote's child.
    stdio: [OwnedFd; 3],
    /// The init's readiness: it writes, the zygote's child reads.
    ready: (OwnedFd, OwnedFd),
}

/// The zygote's report of its child's end.
type Outcome = std::pin::Pin<Box<dyn std::future::Future<Output = zygote::Ended> + Send>>;

/// How long the init may take to send its namespaces (its first act).
const NAMESPACES_TIMEOUT: Duration = Duration::from_secs(10);

/// How many namespace files the init sends: pid (for the zygote), then
/// ipc, uts, cgroup, net and mount (for the child), see `zygote_init`.
const INIT_NAMESPACES: usize = 6;

/// Where the cgroup namespace is among them.
const CGROUP_NS: usize = 3;

/// Receives the init's namespace files (`zygote_init::send_namespaces`).
async fn init_namespaces(ctl: &tokio::net::UnixStream) -> Result<Vec<OwnedFd>, ZygoteError> {
    loop {
        ctl.readable().await?;
        let mut tag = [0u8; 1];
        match ctl.try_io(tokio::io::Interest::READABLE, || {
            crate::sys::socket::recv_with_fds(ctl.as_fd(), &mut tag)
        }) {
            // The init ended before its first act: its report says why.
            Ok((0, _)) => return Err(ZygoteError::InitNotReady),
            Ok((_, fds)) if tag[0] == b'N' && fds.len() == INIT_NAMESPACES => return Ok(fds),
            Ok(_) => return Err(ZygoteError::Fork("the init could not open its namespaces".into())),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// A warm run in progress.
pub(super) struct Warm {
    ctl: tokio::net::UnixStream,
    outcome: Option<Outcome>,
    /// Why the zygote could not run the program, if it could not.
    pub error: Option<ZygoteError>,
    /// True when the error came before the zygote had the run: the program never started.
    pub before_program: bool,
    zygotes: Arc<Zygotes>,
    slot: usize,
    cfg: Arc<ZygoteConfig>,
    /// The zygote serves other runs that are still going: the seats' one, whose children
    /// are live sessions (see [`Warm::fail`]).
    shared: bool,
}

/// Whether `spec` runs warm here: it asks to, and the slot has what a warm
/// run needs (a cgroup its child can join, a spawner or a seat's cloner; no GPU).
pub(super) fn wanted(ctx: &Context<'_>, spec: &RunSpec) -> Option<Arc<ZygoteConfig>> {
    let cfg = spec.warm.as_ref()?;
    let cloned = ctx.spawner.is_some() || ctx.cloner.is_some();
    (ctx.warm.is_some() && ctx.cgroup.is_some() && cloned && !spec.gpu).then(|| cfg.clone())
}

/// Starts the slot's zygote if it has none for `cfg` (off the async runtime,
/// before the run's clock starts: importing the preloads takes a while).
pub(super) async fn ensure_zygote(ctx: &Context<'_>, cfg: &Arc<ZygoteConfig>) -> Result<(), SandboxError> {
    let Some(slot) = &ctx.warm else { return Ok(()) };
    if slot.zygotes.ready(slot.index, cfg) {
        return Ok(());
    }
    let (zygotes, index, cfg, ns) = (slot.zygotes.clone(), slot.index, cfg.clone(), ctx.mnt_ns.clone());
    tokio::task::spawn_blocking(move || zygotes.ensure(index, &cfg, Launch::MountNs(&ns)))
        .await
        .map_err(|e| SandboxError::Other(format!("starting the zygote: {e}")))?
        .map_err(|e| SandboxError::Other(e.to_string()))
}

/// Gives the init its control channel and keeps copies of the program's
/// streams; the init then holds no stream of the program's itself.
pub(super) fn prepare(
    cfg: Arc<ZygoteConfig>,
    plan: &mut ChildPlan,
    stdio: [&OwnedFd; 3],
) -> Result<Prep, SandboxError> {
    let (init_end, ctl) = std::os::unix::net::UnixStream::pair().map_err(os("socketpair"))?;
    let (init_end, ctl) = (OwnedFd::from(init_end), OwnedFd::from(ctl));
    let copy = |fd: &OwnedFd| fd.try_clone().map_err(os("duplicating a stream"));
    let stdio = [copy(stdio[0])?, copy(stdio[1])?, copy(stdio[2])?];
    let streams = [plan.stdin_fd, plan.stdout_fd, plan.stderr_fd];
    plan.keep_fds.retain(|fd| !streams.contains(fd));
    let ready = crate::sys::pipe().map_err(os("pipe2"))?;
    plan.keep_fds.push(init_end.as_raw_fd());
    plan.keep_fds.push(ready.1.as_raw_fd());
    plan.keep_fds.sort_unstable();
    plan.warm_ctl_fd = init_end.as_raw_fd();
    plan.warm_ready_fd = ready.1.as_raw_fd();
    Ok(Prep {
        cfg,
        init_end,
        ctl,
        stdio,
        ready,
    })
}

/// Has the zygote fork the program into the init's namespaces at once: the
/// fork overlaps the init's set-up, and the child waits for the init to be
/// ready before it enters the run's mount namespace. None: no channel to the init.
#[allow(clippy::too_many_arguments)]
pub(super) async fn start(
    p: Prep,
    slot: &Slot<'_>,
    cgroup: Option<&SlotCgroup>,
    uid: u32,
    seccomp: &[Vec<libc::sock_filter>],
    net_scope: Option<&OwnedFd>,
    spec: &RunSpec,
    rlimits: Vec<(u32, libc::rlimit64)>,
) -> Option<Warm> {
    // The init holds its own copies now: an init that dies closes both.
    drop((p.init_end, p.ready.1));
    let ready_r = p.ready.0;
    let seat = slot.seat;
    let ctl = std::os::unix::net::UnixStream::from(p.ctl);
    let ctl = ctl
        .set_nonblocking(true)
        .and_then(|_| tokio::net::UnixStream::from_std(ctl))
        .ok()?;
    let mut warm = Warm {
        ctl,
        outcome: None,
        error: None,
        before_program: false,
        zygotes: slot.zygotes.clone(),
        slot: slot.index,
        cfg: p.cfg.clone(),
        shared: slot.seat,
    };
    let sent = async {
        let procs: Vec<OwnedFd> = match cgroup {
            Some(c) => c.join_files()?,
            None => vec![],
        };
        let ns = tokio::time::timeout(NAMESPACES_TIMEOUT, init_namespaces(&warm.ctl))
            .await
            .map_err(|_| ZygoteError::Fork("the init did not send its namespaces".into()))??;
        // The slot's zygotes are free but while a seats' zygote is being restarted (on the
        // blocking pool, up to its ready time-out): then the fork waits there, not here.
        let sock = match slot.zygotes.try_with(slot.index, &p.cfg, |z| z.fork(ns[0].as_fd())) {
            Some(sock) => sock?,
            None => {
                let (zygotes, index, cfg) = (slot.zygotes.clone(), slot.index, p.cfg.clone());
                let pid_ns = ns[0].try_clone()?;
                tokio::task::spawn_blocking(move || zygotes.with(index, &cfg, |z| z.fork(pid_ns.as_fd())))
                    .await
                    .map_err(|e| ZygoteError::Fork(format!("waiting for the zygote: {e}")))??
            }
        };
        let req = RunRequest {
            argv: &spec.argv,
            env: &spec.env,
            cwd: crate::WORK_DIR,
            prefix: p.cfg.interpreter.len(),
            uid,
            gid: uid,
            rlimits: &rlimits,
            seccomp,
            stdio: [
                p.stdio[0].as_raw_fd(),
                p.stdio[1].as_raw_fd(),
                p.stdio[2].as_raw_fd(),
                ready_r.as_raw_fd(),
            ],
            // A seat's init was cloned outside the seat's cgroup, so its cgroup namespace
            // (`ns[CGROUP_NS]`) shows the host's paths: the child makes its own instead.
            namespaces: ns[1..]
                .iter()
                .enumerate()
                .filter(|(i, _)| !(seat && *i + 1 == CGROUP_NS))
                .map(|(_, f)| f.as_raw_fd())
                .collect(),
            procs: procs.iter().map(|f| f.as_raw_fd()).collect(),
            new_cgroup_ns: seat,
            restricted: false,
            landlock: net_scope.map(|fd| fd.as_raw_fd()),
        };
        let msg = req.encode();
        let fds = req.fds();
        // What fits the socket's buffer at once is sent here; larger runs (a
        // MiB of args) block until the child reads them: off the runtime.
        if msg.len() <= 32 * 1024 {
            zygote::send_run(&sock, &msg, &fds)?;
            return Ok(sock);
        }
        tokio::task::spawn_blocking(move || {
            let r = zygote::send_run(&sock, &msg, &fds);
            drop((procs, ns, p.stdio, ready_r));
            r.map(|_| sock)
        })
        .await
        .map_err(|e| ZygoteError::Fork(e.to_string()))?
    }
    .await;
    match sent {
        Ok(sock) => warm.outcome = Some(Box::pin(zygote::outcome(sock))),
        // The init is told to end at once (see `finish`).
        Err(e) => {
            warm.before_program = true;
            warm.fail(e).await
        }
    }
    Some(warm)
}

impl Warm {
    /// True when the run failed because its init never got ready (the init's
    /// own report then says why, as for a cold run).
    pub fn init_not_ready(&self) -> bool {
        matches!(self.error, Some(ZygoteError::InitNotReady))
    }

    /// Resolves when the zygote reports the program's end (never, once it has).
    pub async fn ended(&mut self) -> Result<i32, ZygoteError> {
        match self.outcome.as_mut() {
            Some(f) => {
                let end = f.await;
                self.outcome = None;
                if end.result.is_err() && !end.started {
                    self.before_program = true;
                }
                end.result
            }
            None => std::future::pending().await,
        }
    }

    /// Hands the program's wait status to the init (which reports it and
    /// ends the run), or, on a zygote error, just ends the run.
    pub async fn finish(&mut self, res: Result<i32, ZygoteError>) {
        match res {
            Ok(status) => {
                let _ = self.ctl.write_all(&status.to_ne_bytes()).await;
            }
            Err(e) => return self.fail(e).await,
        }
        let _ = self.ctl.shutdown().await;
    }

    /// The warm start failed: the init ends the run, and a slot's zygote is replaced. The
    /// seats' zygote is replaced only once it has died: ending it would end every session it
    /// forked (their ends come back through it), and a start fails without its fault too (a
    /// session closed while its interpreter starts kills the init under it).
    async fn fail(&mut self, e: ZygoteError) {
        match self.shared {
            true => tracing::warn!(slot = self.slot, error = %e, "warm start failed"),
            false => tracing::warn!(slot = self.slot, error = %e, "warm start failed; replacing the zygote"),
        }
        self.forget_zygote().await;
        self.error = Some(e);
        let _ = self.ctl.shutdown().await;
    }

    /// Replaces a slot's zygote, or forgets the seats' one if it died (see [`Warm::fail`]).
    /// On the blocking pool: the seats' zygotes may be locked by a restart, and ending a
    /// zygote waits for it to exit. (Owned values: `&self` is not `Send` across an await.)
    fn forget_zygote(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (zygotes, slot, cfg, shared) = (self.zygotes.clone(), self.slot, self.cfg.clone(), self.shared);
        async move {
            let _ = tokio::task::spawn_blocking(move || match shared {
                true => zygotes.discard_dead(slot, &cfg),
                false => zygotes.discard(slot, &cfg),
            })
            .await;
        }
    }

    /// After the init is gone: a slot's zygote that has not reported its child's end
    /// within a grace period is stuck, and replaced. The seats' zygote is not (see
    /// [`Warm::fail`]): a large session's memory can take longer than that to be freed.
    pub async fn settle(&mut self) {
        if let Some(f) = self.outcome.as_mut()
            && tokio::time::timeout(Duration::from_secs(2), f).await.is_err()
        {
            match self.shared {
                true => tracing::warn!(
                    slot = self.slot,
                    "the seats' zygote did not report a child's end within 2 s"
                ),
                false => tracing::warn!(
                    slot = self.slot,
                    "the zygote did not report its child's end; replacing it"
                ),
            }
            self.forget_zygote().await;
        }
        self.outcome = None;
    }
}
