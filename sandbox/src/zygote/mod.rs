//! Warm starts: per-slot interpreter zygotes that fork one child per run.
//!
//! Both modes fork Python runs from these. What follows is namespaces mode's
//! walk; restricted mode's (no namespaces, no cgroups: the child confines itself
//! as a restricted cold run is confined) is in `restricted/warm.rs`.
//!
//! A Python run spends most of its time starting the interpreter and importing
//! the same modules as every other run. A zygote is an interpreter started
//! once per slot (as root, in the slot's mount namespace, with the language
//! entry's flags and environment, in the executor's cgroup so that its pages
//! are never charged to a run) that has imported the entry's `warm.preload`
//! modules and never runs user code. Per run (see `docs/warm-starts.md`):
//!
//! 1. the run's init is set up exactly as for a cold run (its own pid, IPC,
//!    UTS, cgroup and network namespaces, fresh `/work`, `/tmp`, `/dev/shm`,
//!    `/proc`), reports ready and waits instead of starting the program;
//! 2. the executor sends the zygote one byte and two descriptors: the run's
//!    socket and the init's pidfd. The zygote joins the init's pid namespace
//!    for its children only, forks the run's child G, and goes back;
//! 3. G reads the run (argv, env, uid, rlimits, seccomp filters, stdio and
//!    cgroup descriptors) from the run's socket itself, so the zygote's memory
//!    never holds one run's data when it forks the next; G joins the slot's
//!    cgroup, enters the init's other namespaces with `setns(pidfd)`, drops
//!    everything exactly as the cold path's program does (`child::prog_main`),
//!    closes every other descriptor and runs the script as `python3 main.py`
//!    would (`zygote.py`);
//! 4. the zygote reaps G and sends its wait status on the run's socket; the
//!    executor then tells the init to end, which kills whatever the run left.

use crate::ZygoteConfig;
use crate::runio::resolve_exe;
use crate::sys::socket::{self, send_with_fds, socketpair};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The zygote's program: `python3 <flags> -c ZYGOTE_PY MODULE...`.
const ZYGOTE_PY: &str = include_str!("zygote.py");

/// How long a zygote may take to import its modules.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long ending a zygote waits for it to exit before a thread of its own reaps it.
const KILL_WAIT: Duration = Duration::from_millis(50);

/// Errors of warm starts; a run that meets one is a SANDBOX_ERROR (the
/// zygote is replaced), never the program's fault.
#[derive(Debug, thiserror::Error)]
pub enum ZygoteError {
    #[error("starting the {0} zygote: {1}")]
    Start(String, std::io::Error),
    #[error("the {0} zygote did not start: {1}")]
    NotReady(String, String),
    #[error("talking to the zygote: {0}")]
    Io(#[from] std::io::Error),
    #[error("the zygote could not fork the run: {0}")]
    Fork(String),
    #[error("the zygote ended during the run")]
    Gone,
    #[error("the run's init ended before it was ready")]
    InitNotReady,
}

/// Where and how a zygote is started.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Launch<'a> {
    /// Namespaces mode: as root, in this (the slot's) mount namespace.
    MountNs(&'a OwnedFd),
    /// Restricted mode: as the executor's uid, in the executor's view of the host, with
    /// `env` (the configuration's, its paths rewritten as a restricted run's are).
    Restricted { env: &'a [(String, String)] },
}

/// A started zygote.
#[derive(Debug)]
pub(crate) struct Zygote {
    cfg: Arc<ZygoteConfig>,
    child: std::process::Child,
    ctl: OwnedFd,
    /// Modules that failed to import (logged once).
    pub failed: Vec<String>,
}

impl Zygote {
    /// Starts a zygote as `launch` says and waits until it has imported its
    /// modules (blocking: call it off the async runtime).
    pub fn start(cfg: Arc<ZygoteConfig>, launch: Launch<'_>) -> Result<Self, ZygoteError> {
        use std::os::unix::process::CommandExt;
        let start_err = |e| ZygoteError::Start(cfg.name.clone(), e);
        let (ours, theirs) = socketpair(libc::SOCK_SEQPACKET).map_err(start_err)?;
        let arg0 = cfg
            .interpreter
            .first()
            .ok_or_else(|| ZygoteError::NotReady(cfg.name.clone(), "no interpreter".into()))?;
        let exe = resolve_exe(arg0);
        let mut cmd = std::process::Command::new(&exe);
        let restricted = matches!(launch, Launch::Restricted { .. });
        cmd.arg0(arg0)
            .args(&cfg.interpreter[1..])
            .arg("-c")
            .arg(ZYGOTE_PY)
            .args(restricted.then_some("--restricted"))
            .args(cfg.command.iter().flat_map(|c| ["--command", c.as_str()]))
            .args(&cfg.preload)
            .env_clear()
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let mnt_ns = match launch {
            Launch::MountNs(ns) => {
                cmd.envs(cfg.env.iter().map(|(k, v)| (k, v)));
                ns.as_raw_fd()
            }
            Launch::Restricted { env } => {
                cmd.envs(env.iter().map(|(k, v)| (k, v)));
                -1
            }
        };
        let own_pid_ns = std::fs::File::open("/proc/self/ns/pid").map_err(start_err)?;
        let (ns, sock, pid_ns) = (mnt_ns, theirs.as_raw_fd(), own_pid_ns.as_raw_fd());
        // SAFETY: between fork and exec the closure makes only async-signal-safe
        // system calls (rt_sigaction, rt_sigprocmask, setns, dup2, setsid, chdir) on
        // descriptors alive in the parent.
        unsafe {
            cmd.pre_exec(move || {
                use crate::sys::raw;
                let check = |r: raw::Res| r.map(drop).map_err(std::io::Error::from_raw_os_error);
                // Signals as a cold run gets them (the spawner resets them too): an executor
                // started with SIGINT ignored (a background job of a script, nohup) must not
                // hand that to the zygote, whose Python then installs no KeyboardInterrupt
                // handler, nor to the warm runs forked from it.
                raw::default_signals();
                // The slot's mount namespace: the root, sys.path and module
                // files are exactly those a cold run sees. (Restricted mode: the host's,
                // as its cold runs see it.)
                if ns >= 0 {
                    check(raw::setns(ns, libc::CLONE_NEWNS))?;
                    check(raw::chdir(c"/"))?;
                }
                check(raw::dup2(sock, 3))?;
                if ns >= 0 {
                    check(raw::dup2(pid_ns, 4))?;
                }
                // A session of its own, as each run has: with autogroup
                // scheduling, forking runs then does not compete for the
                // executor's share of a busy machine.
                // No PR_SET_PDEATHSIG: it fires when the *thread* that forked
                // exits (a retiring blocking-pool thread), which killed idle
                // zygotes. The zygote exits when its control socket closes,
                // which the executor's death does.
                check(raw::setsid())
            });
        }
        let child = cmd.spawn().map_err(start_err)?;
        drop((theirs, own_pid_ns));
        let mut z = Zygote {
            cfg: cfg.clone(),
            child,
            ctl: ours,
            failed: vec![],
        };
        let ready = socket::wait_readable(z.ctl.as_fd(), READY_TIMEOUT).map_err(start_err)?;
        let mut buf = vec![0u8; 64 * 1024];
        let n = if ready {
            socket::recv(z.ctl.as_fd(), &mut buf).unwrap_or(0)
        } else {
            0
        };
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        let Some(failed) = text.strip_prefix("ready\n") else {
            let mut err = String::new();
            z.kill();
            if let Some(mut e) = z.child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let why = if ready {
                err
            } else {
                format!("no answer within {READY_TIMEOUT:?}")
            };
            return Err(ZygoteError::NotReady(
                cfg.name.clone(),
                why.trim().chars().take(2000).collect(),
            ));
        };
        z.failed = failed.lines().map(str::to_owned).collect();
        // The zygote's own stderr (each run's child has the run's) goes to the
        // log: closing it would turn the zygote's next warning into EPIPE.
        if let Some(err) = z.child.stderr.take() {
            forward_stderr(z.cfg.name.clone(), z.child.id(), err);
        }
        Ok(z)
    }

    pub fn config(&self) -> &Arc<ZygoteConfig> {
        &self.cfg
    }

    /// True while the zygote process lives.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills and reaps the zygote. It is dropped on the async runtime's threads too (a
    /// failed warm start), where a wait must not block: one that has not exited after
    /// [`KILL_WAIT`] (stuck in the kernel, in `D` state) is reaped by a thread of its own.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let until = Instant::now() + KILL_WAIT;
        while Instant::now() < until {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let pid = self.child.id();
        let reaped = std::thread::Builder::new().name("zygote-reap".into()).spawn(move || {
            // Our own child, which the `Child` is not asked to reap again.
            let _ = crate::sys::process::waitpid(pid as i32);
        });
        if reaped.is_err() {
            let _ = self.child.wait();
        }
    }

    /// Asks the zygote to fork a child into the pid namespace `pid_ns` (a
    /// namespace file, not a pidfd: see `namespaces::zygote_init::send_namespaces`); returns the
    /// executor's end of the run's socket, where the run is sent
    /// ([`send_run`]) and the child's wait status comes back.
    pub fn fork(&self, pid_ns: BorrowedFd<'_>) -> Result<OwnedFd, ZygoteError> {
        let (ours, theirs) = socketpair(libc::SOCK_STREAM)?;
        send_with_fds(self.ctl.as_fd(), b"F", &[theirs.as_raw_fd(), pid_ns.as_raw_fd()])?;
        Ok(ours)
    }

    /// Restricted mode: asks the zygote to fork a run's child; returns the executor's end
    /// of the run's socket, where the child first sends its pid. The zygote reaps the
    /// child once this end is shut down for writing or closed (`restricted/warm.rs`).
    pub fn fork_restricted(&self) -> Result<OwnedFd, ZygoteError> {
        let (ours, theirs) = socketpair(libc::SOCK_STREAM)?;
        send_with_fds(self.ctl.as_fd(), b"R", &[theirs.as_raw_fd()])?;
        Ok(ours)
    }
}

/// How much of one zygote's stderr reaches the log (the rest is read and dropped).
const STDERR_LOG_BYTES: usize = 64 * 1024;

/// Logs what a zygote writes on its stderr, a line at a time, until it exits.
fn forward_stderr(language: String, pid: u32, err: std::process::ChildStderr) {
    use std::io::BufRead;
    let name = language.clone();
    let spawned = std::thread::Builder::new().name("zygote-stderr".into()).spawn(move || {
        let mut logged = 0;
        let mut lines = std::io::BufReader::new(err);
        let mut line = Vec::new();
        while matches!(lines.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            if logged < STDERR_LOG_BYTES {
                logged += line.len();
                let text = String::from_utf8_lossy(&line);
                tracing::warn!(%language, pid, "zygote stderr: {}", text.trim_end());
            }
            line.clear();
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(language = %name, pid, "not logging the zygote's stderr: {e}");
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a run's child needs, sent on the run's socket (parsed by `zygote.py`'s `_child`).
pub(crate) struct RunRequest<'a> {
    pub argv: &'a [String],
    pub env: &'a [(String, String)],
    pub cwd: &'a str,
    /// How many argv entries are the interpreter and its flags.
    pub prefix: usize,
    pub uid: u32,
    pub gid: u32,
    pub rlimits: &'a [(u32, libc::rlimit64)],
    pub seccomp: &'a [Vec<libc::sock_filter>],
    /// stdin, stdout, stderr, and the init's readiness pipe (restricted mode: the run's
    /// Landlock ruleset, which the child enforces on itself).
    pub stdio: [RawFd; 4],
    /// The run's namespaces the child enters, in order (the mount namespace last).
    pub namespaces: Vec<RawFd>,
    /// The slot cgroup's `cgroup.procs`, one per hierarchy.
    pub procs: Vec<RawFd>,
    /// The child makes a cgroup namespace of its own once it is in the cgroup, instead of
    /// entering the init's: a seat's init lives outside the seat's cgroup.
    pub new_cgroup_ns: bool,
    /// A restricted run (`zygote.py`'s `_child_restricted`).
    pub restricted: bool,
    /// Namespaces mode without a network namespace: the Landlock ruleset that scopes the
    /// run's abstract unix sockets and signals, which the child enforces on itself (sent last).
    pub landlock: Option<RawFd>,
}

impl RunRequest<'_> {
    pub fn encode(&self) -> Vec<u8> {
        fn u32_(b: &mut Vec<u8>, v: usize) {
            b.extend_from_slice(&(v as u32).to_le_bytes());
        }
        fn blob(b: &mut Vec<u8>, s: &[u8]) {
            u32_(b, s.len());
            b.extend_from_slice(s);
        }
        let mut b = Vec::with_capacity(4096);
        u32_(&mut b, self.argv.len());
        self.argv.iter().for_each(|a| blob(&mut b, a.as_bytes()));
        u32_(&mut b, self.env.len());
        self.env
            .iter()
            .for_each(|(k, v)| blob(&mut b, format!("{k}={v}").as_bytes()));
        blob(&mut b, self.cwd.as_bytes());
        u32_(&mut b, self.prefix);
        u32_(&mut b, self.uid as usize);
        u32_(&mut b, self.gid as usize);
        u32_(&mut b, self.rlimits.len());
        for (res, l) in self.rlimits {
            u32_(&mut b, *res as usize);
            b.extend_from_slice(&l.rlim_cur.to_le_bytes());
            b.extend_from_slice(&l.rlim_max.to_le_bytes());
        }
        u32_(&mut b, self.seccomp.len());
        for f in self.seccomp {
            let mut raw = Vec::with_capacity(f.len() * 8);
            for ins in f {
                raw.extend_from_slice(&ins.code.to_ne_bytes());
                raw.push(ins.jt);
                raw.push(ins.jf);
                raw.extend_from_slice(&ins.k.to_ne_bytes());
            }
            blob(&mut b, &raw);
        }
        u32_(&mut b, self.namespaces.len());
        u32_(&mut b, self.procs.len());
        u32_(&mut b, usize::from(self.new_cgroup_ns));
        u32_(&mut b, usize::from(self.restricted));
        u32_(&mut b, usize::from(self.landlock.is_some()));
        b
    }

    /// The descriptors sent with the body, in the order the child takes them.
    pub fn fds(&self) -> Vec<RawFd> {
        self.stdio
            .iter()
            .chain(&self.namespaces)
            .chain(&self.procs)
            .chain(&self.landlock)
            .copied()
            .collect()
    }
}

/// Sends an encoded run ([`RunRequest::encode`]) and its descriptors (stdio,
/// then cgroup.procs) on `sock` (blocking: the body may be a MiB of args).
pub(crate) fn send_run(sock: &OwnedFd, body: &[u8], fds: &[RawFd]) -> Result<(), ZygoteError> {
    {
        send_with_fds(sock.as_fd(), &(body.len() as u32).to_le_bytes(), fds)?;
        socket::send_all(sock.as_fd(), body)?;
        Ok(())
    }
}

/// How a warm run's socket ended.
pub(crate) struct Ended {
    /// The child said it was about to run the program (`P`): a failure
    /// after this is the run's, before it the run can start again cold.
    pub started: bool,
    /// The child's wait status, or why it could not run.
    pub result: Result<i32, ZygoteError>,
}

/// Reads the run's end from its socket: the child's wait status, or why it could not start.
pub(crate) async fn outcome(sock: OwnedFd) -> Ended {
    use tokio::io::AsyncReadExt;
    let read = async {
        let std_sock = std::os::unix::net::UnixStream::from(sock);
        std_sock.set_nonblocking(true)?;
        let mut s = tokio::net::UnixStream::from_std(std_sock)?;
        let mut buf = Vec::new();
        // A reset (the zygote closed the socket with the run unread) keeps what came before.
        let r = s.read_to_end(&mut buf).await;
        Ok::<_, std::io::Error>((buf, r.err()))
    };
    let (buf, err) = match read.await {
        Ok(r) => r,
        Err(e) => {
            return Ended {
                started: false,
                result: Err(e.into()),
            };
        }
    };
    let started = buf.first() == Some(&b'P');
    let rest = if started { &buf[1..] } else { &buf[..] };
    let result = match rest.split_first() {
        Some((b'S', r)) if r.len() == 4 => Ok(i32::from_ne_bytes([r[0], r[1], r[2], r[3]])),
        Some((b'N', _)) => Err(ZygoteError::InitNotReady),
        Some((b'E', r)) => Err(ZygoteError::Fork(
            String::from_utf8_lossy(r).chars().take(500).collect(),
        )),
        _ => Err(err.map_or(ZygoteError::Gone, ZygoteError::Io)),
    };
    Ended { started, result }
}

/// How many zygotes a slot keeps (e.g. Python's plain one and the one with
/// numpy imported, see `warm.heavy` in the language table); a configuration
/// beyond that replaces the one used least recently.
const ZYGOTES_PER_SLOT: usize = 2;

/// The zygotes of every slot: up to [`ZYGOTES_PER_SLOT`] each, one per
/// configuration the slot served lately, most recently used last.
#[derive(Debug, Default)]
pub(crate) struct Zygotes {
    slots: Vec<std::sync::Mutex<Vec<Zygote>>>,
}

impl Zygotes {
    pub fn new(slots: usize) -> Self {
        Zygotes {
            slots: (0..slots).map(|_| std::sync::Mutex::new(Vec::new())).collect(),
        }
    }

    fn cell(&self, slot: usize) -> Result<&std::sync::Mutex<Vec<Zygote>>, ZygoteError> {
        self.slots
            .get(slot)
            .ok_or_else(|| ZygoteError::Fork(format!("no slot {slot}")))
    }

    /// True when slot `slot` has a live zygote for `cfg` (never blocks for long).
    pub fn ready(&self, slot: usize, cfg: &Arc<ZygoteConfig>) -> bool {
        self.slots
            .get(slot)
            .and_then(|c| c.try_lock().ok())
            .is_some_and(|mut zs| zs.iter_mut().any(|z| z.config() == cfg && z.alive()))
    }

    /// Starts slot `slot`'s zygote for `cfg` (blocking) if it has none, or
    /// the one it had died; makes room by ending the least recently used.
    pub fn ensure(&self, slot: usize, cfg: &Arc<ZygoteConfig>, launch: Launch<'_>) -> Result<(), ZygoteError> {
        let mut zs = self.cell(slot)?.lock().map_err(|_| ZygoteError::Gone)?;
        if let Some(i) = zs.iter().position(|z| z.config() == cfg) {
            if zs[i].alive() {
                let z = zs.remove(i);
                zs.push(z);
                return Ok(());
            }
            zs.remove(i);
        }
        while zs.len() >= ZYGOTES_PER_SLOT {
            zs.remove(0);
        }
        let t = Instant::now();
        let started = Zygote::start(cfg.clone(), launch)?;
        tracing::info!(
            language = %cfg.name,
            preload = cfg.preload.len(),
            slot,
            ms = t.elapsed().as_millis() as u64,
            failed_preloads = ?started.failed,
            "zygote ready"
        );
        zs.push(started);
        Ok(())
    }

    /// As [`Zygotes::with`], without waiting for the slot's zygotes: None while another
    /// thread holds them (a seats' zygote being restarted), for the caller to wait for
    /// them off the async runtime.
    pub fn try_with<T>(
        &self,
        slot: usize,
        cfg: &Arc<ZygoteConfig>,
        f: impl FnOnce(&Zygote) -> Result<T, ZygoteError>,
    ) -> Option<Result<T, ZygoteError>> {
        let mut zs = match self.cell(slot) {
            Ok(cell) => match cell.try_lock() {
                Ok(zs) => zs,
                Err(std::sync::TryLockError::WouldBlock) => return None,
                Err(std::sync::TryLockError::Poisoned(_)) => return Some(Err(ZygoteError::Gone)),
            },
            Err(e) => return Some(Err(e)),
        };
        Some(Self::use_one(&mut zs, cfg, f))
    }

    /// Runs `f` with the zygote for `cfg` among `zs`; one that fails it is forgotten.
    fn use_one<T>(
        zs: &mut Vec<Zygote>,
        cfg: &Arc<ZygoteConfig>,
        f: impl FnOnce(&Zygote) -> Result<T, ZygoteError>,
    ) -> Result<T, ZygoteError> {
        let Some(i) = zs.iter().position(|z| z.config() == cfg) else {
            return Err(ZygoteError::Gone);
        };
        let res = f(&zs[i]);
        if res.is_err() {
            zs.remove(i);
        }
        res
    }

    /// Runs `f` with slot `slot`'s zygote for `cfg` (see [`Zygotes::ensure`]);
    /// a zygote that fails it is ended (the next run starts a new one).
    pub fn with<T>(
        &self,
        slot: usize,
        cfg: &Arc<ZygoteConfig>,
        f: impl FnOnce(&Zygote) -> Result<T, ZygoteError>,
    ) -> Result<T, ZygoteError> {
        let mut zs = self.cell(slot)?.lock().map_err(|_| ZygoteError::Gone)?;
        Self::use_one(&mut zs, cfg, f)
    }

    /// Forgets slot `slot`'s zygote for `cfg` if it has exited; the next warm run starts a new one.
    pub fn discard_dead(&self, slot: usize, cfg: &Arc<ZygoteConfig>) {
        if let Ok(cell) = self.cell(slot)
            && let Ok(mut zs) = cell.lock()
        {
            zs.retain_mut(|z| z.config() != cfg || z.alive());
        }
    }

    /// Ends slot `slot`'s zygote for `cfg` (it misbehaved); the next warm run starts a new one.
    pub fn discard(&self, slot: usize, cfg: &Arc<ZygoteConfig>) {
        if let Ok(cell) = self.cell(slot)
            && let Ok(mut zs) = cell.lock()
        {
            zs.retain(|z| z.config() != cfg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// What the zygote's side writes, then how it closes: the executor's reading of it.
    async fn ended(write: &[u8], unread: bool) -> Ended {
        let (ours, theirs) = socketpair(libc::SOCK_STREAM).expect("socketpair");
        let mut theirs = std::os::unix::net::UnixStream::from(theirs);
        if unread {
            // The run, sent but never read: closing then resets the connection.
            send_run(&ours, b"the run", &[]).expect("send");
        }
        theirs.write_all(write).expect("write");
        drop(theirs);
        outcome(ours).await
    }

    #[tokio::test]
    async fn a_failure_before_the_program_says_so_even_when_the_socket_was_reset() {
        let e = ended(b"Esetting up the run", true).await;
        assert!(!e.started);
        assert!(e.result.is_err());
        let e = ended(b"", true).await;
        assert!(!e.started);
        assert!(e.result.is_err());
        let e = ended(b"N", false).await;
        assert!(!e.started);
        assert!(matches!(e.result, Err(ZygoteError::InitNotReady)));
    }

    #[tokio::test]
    async fn a_started_program_reports_its_status_or_its_loss() {
        let status = 0x0100i32;
        let mut msg = b"PS".to_vec();
        msg.extend_from_slice(&status.to_ne_bytes());
        let e = ended(&msg, false).await;
        assert!(e.started);
        assert_eq!(e.result.ok(), Some(status));
        // The zygote died mid-run: the program had started, so no cold rerun.
        let e = ended(b"P", false).await;
        assert!(e.started);
        assert!(matches!(e.result, Err(ZygoteError::Gone)));
    }
}
