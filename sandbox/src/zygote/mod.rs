//! Warm starts: per-slot interpreter zygotes that fork one child per run.
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

use crate::runio::resolve_exe;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) mod init;

/// The zygote's program: `python3 <flags> -c ZYGOTE_PY MODULE...`.
const ZYGOTE_PY: &str = include_str!("zygote.py");

/// How long a zygote may take to import its modules.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A language's warm start, from its table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZygoteConfig {
    /// The language's name (for logs).
    pub name: String,
    /// The run command up to the script: interpreter and flags (`["python3", "-B"]`).
    pub interpreter: Vec<String>,
    /// The runs' environment (the zygote starts with the same).
    pub env: Vec<(String, String)>,
    /// Modules imported before the first fork.
    pub preload: Vec<String>,
}

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

/// A started zygote.
#[derive(Debug)]
pub(crate) struct Zygote {
    cfg: Arc<ZygoteConfig>,
    child: std::process::Child,
    ctl: OwnedFd,
    /// Modules that failed to import (logged once).
    pub failed: Vec<String>,
}

fn socketpair(kind: libc::c_int) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    let r = unsafe { libc::socketpair(libc::AF_UNIX, kind | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// sendmsg of `data` with `fds` attached (SCM_RIGHTS).
fn send_with_fds(sock: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; zeroed is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space;
        // SAFETY: the control buffer holds one header of `space` bytes; the
        // macros compute pointers inside it, and `fds` is copied into its data.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr() as *const u8, libc::CMSG_DATA(c), fd_bytes);
        }
    }
    // SAFETY: msg points at live buffers for the call.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(std::io::Error::other("short send to the zygote"));
    }
    Ok(())
}

/// Waits up to `timeout` for `fd` to be readable.
fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> std::io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, alive for the call.
    let r = unsafe { libc::poll(&mut p, 1, timeout.as_millis().min(i32::MAX as u128) as i32) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r > 0)
}

impl Zygote {
    /// Starts a zygote in the mount namespace `mnt_ns` and waits until it
    /// has imported its modules (blocking: call it off the async runtime).
    pub fn start(cfg: Arc<ZygoteConfig>, mnt_ns: &OwnedFd) -> Result<Self, ZygoteError> {
        use std::os::unix::process::CommandExt;
        let start_err = |e| ZygoteError::Start(cfg.name.clone(), e);
        let (ours, theirs) = socketpair(libc::SOCK_SEQPACKET).map_err(start_err)?;
        let arg0 = cfg
            .interpreter
            .first()
            .ok_or_else(|| ZygoteError::NotReady(cfg.name.clone(), "no interpreter".into()))?;
        let exe = resolve_exe(arg0);
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg0(arg0)
            .args(&cfg.interpreter[1..])
            .arg("-c")
            .arg(ZYGOTE_PY)
            .args(&cfg.preload)
            .env_clear()
            .envs(cfg.env.iter().map(|(k, v)| (k, v)))
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let own_pid_ns = std::fs::File::open("/proc/self/ns/pid").map_err(start_err)?;
        let (ns, sock, pid_ns) = (mnt_ns.as_raw_fd(), theirs.as_raw_fd(), own_pid_ns.as_raw_fd());
        // SAFETY: between fork and exec the closure makes only async-signal-safe
        // system calls (setns, dup2, prctl, chdir) on descriptors alive in the parent.
        unsafe {
            cmd.pre_exec(move || {
                let check = |r: libc::c_int| {
                    if r < 0 {
                        Err(std::io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                };
                // The slot's mount namespace: the root, sys.path and module
                // files are exactly those a cold run sees.
                check(libc::setns(ns, libc::CLONE_NEWNS))?;
                check(libc::chdir(c"/".as_ptr()))?;
                check(libc::dup2(sock, 3))?;
                check(libc::dup2(pid_ns, 4))?;
                // A session of its own, as each run has: with autogroup
                // scheduling, forking runs then does not compete for the
                // executor's share of a busy machine.
                // No PR_SET_PDEATHSIG: it fires when the *thread* that forked
                // exits (a retiring blocking-pool thread), which killed idle
                // zygotes. The zygote exits when its control socket closes,
                // which the executor's death does.
                check(libc::setsid())
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
        let ready = wait_readable(z.ctl.as_fd(), READY_TIMEOUT).map_err(start_err)?;
        let mut buf = vec![0u8; 64 * 1024];
        let n = if ready {
            // SAFETY: recv into our buffer, of its length.
            unsafe { libc::recv(z.ctl.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) }
        } else {
            -1
        };
        let text = String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned();
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
        // Nothing more is read from it; the zygote's own errors go nowhere
        // (each run's child reports on the run's stderr).
        drop(z.child.stderr.take());
        Ok(z)
    }

    pub fn config(&self) -> &Arc<ZygoteConfig> {
        &self.cfg
    }

    /// True while the zygote process lives.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills and reaps the zygote.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks the zygote to fork a child into the pid namespace of `init`;
    /// returns the executor's end of the run's socket, where the run is sent
    /// ([`RunRequest::send`]) and the child's wait status comes back.
    pub fn fork(&self, init: BorrowedFd<'_>) -> Result<OwnedFd, ZygoteError> {
        let (ours, theirs) = socketpair(libc::SOCK_STREAM)?;
        send_with_fds(self.ctl.as_fd(), b"F", &[theirs.as_raw_fd(), init.as_raw_fd()])?;
        Ok(ours)
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
    /// stdin, stdout, stderr, and the init's readiness pipe.
    pub stdio: [RawFd; 4],
    /// The slot cgroup's `cgroup.procs`, one per hierarchy.
    pub procs: Vec<RawFd>,
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
        u32_(&mut b, self.procs.len());
        b
    }
}

/// Sends an encoded run ([`RunRequest::encode`]) and its descriptors (stdio,
/// then cgroup.procs) on `sock` (blocking: the body may be a MiB of args).
pub(crate) fn send_run(sock: &OwnedFd, body: &[u8], fds: &[RawFd]) -> Result<(), ZygoteError> {
    {
        send_with_fds(sock.as_fd(), &(body.len() as u32).to_le_bytes(), fds)?;
        let mut rest = body;
        while !rest.is_empty() {
            // SAFETY: write from our buffer.
            let n = unsafe {
                libc::send(
                    sock.as_raw_fd(),
                    rest.as_ptr() as *const libc::c_void,
                    rest.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e.into());
            }
            rest = &rest[n as usize..];
        }
        Ok(())
    }
}

/// Reads the run's end from its socket: the child's wait status, or why it could not start.
pub(crate) async fn outcome(sock: OwnedFd) -> Result<i32, ZygoteError> {
    use tokio::io::AsyncReadExt;
    let std_sock = std::os::unix::net::UnixStream::from(sock);
    std_sock.set_nonblocking(true)?;
    let mut s = tokio::net::UnixStream::from_std(std_sock)?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    match buf.split_first() {
        Some((b'S', rest)) if rest.len() == 4 => Ok(i32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]])),
        Some((b'N', _)) => Err(ZygoteError::InitNotReady),
        Some((b'E', rest)) => Err(ZygoteError::Fork(String::from_utf8_lossy(rest).into_owned())),
        _ => Err(ZygoteError::Gone),
    }
}

/// The zygotes of every slot: one per slot, for the language it last served.
#[derive(Debug, Default)]
pub(crate) struct Zygotes {
    slots: Vec<std::sync::Mutex<Option<Zygote>>>,
}

impl Zygotes {
    pub fn new(slots: usize) -> Self {
        Zygotes {
            slots: (0..slots).map(|_| std::sync::Mutex::new(None)).collect(),
        }
    }

    /// True when slot `slot` has a live zygote for `cfg` (never blocks for long).
    pub fn ready(&self, slot: usize, cfg: &Arc<ZygoteConfig>) -> bool {
        self.slots
            .get(slot)
            .and_then(|c| c.try_lock().ok())
            .is_some_and(|mut z| z.as_mut().is_some_and(|z| z.config() == cfg && z.alive()))
    }

    /// Starts slot `slot`'s zygote for `cfg` (blocking) if there is none, it
    /// died, or it serves another configuration.
    pub fn ensure(&self, slot: usize, cfg: &Arc<ZygoteConfig>, mnt_ns: &OwnedFd) -> Result<(), ZygoteError> {
        let cell = self
            .slots
            .get(slot)
            .ok_or_else(|| ZygoteError::Fork(format!("no slot {slot}")))?;
        let mut z = cell.lock().map_err(|_| ZygoteError::Gone)?;
        let usable = z.as_mut().is_some_and(|z| z.config() == cfg && z.alive());
        if !usable {
            *z = None;
            let t = Instant::now();
            let started = Zygote::start(cfg.clone(), mnt_ns)?;
            tracing::info!(
                language = %cfg.name,
                slot,
                ms = t.elapsed().as_millis() as u64,
                failed_preloads = ?started.failed,
                "zygote ready"
            );
            *z = Some(started);
        }
        Ok(())
    }

    /// Runs `f` with slot `slot`'s zygote, which must serve `cfg` (see [`Zygotes::ensure`]).
    pub fn with<T>(
        &self,
        slot: usize,
        cfg: &Arc<ZygoteConfig>,
        f: impl FnOnce(&Zygote) -> Result<T, ZygoteError>,
    ) -> Result<T, ZygoteError> {
        let cell = self
            .slots
            .get(slot)
            .ok_or_else(|| ZygoteError::Fork(format!("no slot {slot}")))?;
        let z = cell.lock().map_err(|_| ZygoteError::Gone)?;
        let res = match z.as_ref() {
            Some(zy) if zy.config() == cfg => f(zy),
            _ => Err(ZygoteError::Gone),
        };
        let mut z = z;
        if res.is_err() {
            // Misbehaved or gone: the next run gets a new one.
            *z = None;
        }
        res
    }

    /// Drops slot `slot`'s zygote (it misbehaved); the next warm run starts a new one.
    pub fn discard(&self, slot: usize) {
        if let Some(cell) = self.slots.get(slot)
            && let Ok(mut z) = cell.lock()
        {
            *z = None;
        }
    }
}
