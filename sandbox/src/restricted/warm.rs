//! Warm Python starts in restricted mode: each slot keeps a zygote (`crate::zygote`),
//! started as the executor's uid with nothing to enter, and a run's child forks
//! from it instead of starting `python3`.
//!
//! Per run:
//! 1. the executor sends the zygote `R` and the run's socket; the zygote forks a child;
//! 2. the child sends its pid (`C`), then reads the run (argv, environment, uid,
//!    rlimits, seccomp filters, stdio and the run's Landlock ruleset) from the run's
//!    socket and confines itself exactly as a cold run's pre-exec does
//!    (`spawn::Confinement::apply`): a session of its own, rlimits, `no_new_privs`,
//!    the run's Landlock domain, the seccomp filters;
//! 3. the executor, holding the pid in a [`super::Tree`] (killed and swept however the
//!    run ends), says `G`; the child says `P` and runs the script. A child whose
//!    executor let go of it before `G` (a cancelled run) never runs anything;
//! 4. the executor supervises the child's process group as a cold run's, kills and
//!    sweeps it, then shuts its end of the run's socket: the zygote, which held the
//!    leader unreaped until then so that the group's number stayed the run's, reaps
//!    it and sends its wait status and rusage (`S`).
//!
//! Only where Landlock scopes signals (ABI 6): the child's domain is nested in
//! none of the zygote's or the other runs', so it cannot signal them; below ABI 6
//! restricted runs could signal any process of the executor's uid but the
//! executor, the zygote included. `ptrace` and `/proc/<pid>/mem` of the zygote
//! are refused by Landlock at every ABI (a domain reaches only its own and
//! nested domains' processes) and by seccomp.

use crate::ZygoteConfig;
use crate::zygote::{self, Launch, RunRequest, ZygoteError, Zygotes};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// How long a forked child may take to send its pid (its first act).
const PID_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the zygote may take to report a released leader's end.
const REPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// `S`, the wait status (i32), user and system CPU in µs and the peak RSS in KiB (i64 each).
const REPORT_LEN: usize = 1 + 4 + 3 * 8;

/// Starts slot `slot`'s zygote for `cfg` unless it has one (on the blocking pool, before the
/// run's clock starts: importing the preloads takes a while).
pub(super) async fn ensure(
    zygotes: &Arc<Zygotes>,
    slot: usize,
    cfg: &Arc<ZygoteConfig>,
    env: Vec<(String, String)>,
) -> Result<(), ZygoteError> {
    if zygotes.ready(slot, cfg) {
        return Ok(());
    }
    let (zygotes, cfg) = (zygotes.clone(), cfg.clone());
    tokio::task::spawn_blocking(move || zygotes.ensure(slot, &cfg, Launch::Restricted { env: &env }))
        .await
        .map_err(|e| ZygoteError::Fork(format!("starting the zygote: {e}")))?
}

/// What the run's child is sent; `stdio` is stdin, stdout, stderr and the Landlock ruleset,
/// closed here once sent (the run's output ends when the child's copies close).
pub(super) struct Request<'a> {
    pub argv: &'a [String],
    pub env: &'a [(String, String)],
    pub cwd: &'a str,
    pub uid: u32,
    pub rlimits: &'a [(u32, libc::rlimit64)],
    pub seccomp: &'a [Vec<libc::sock_filter>],
    pub stdio: [OwnedFd; 4],
}

/// Lets the zygote reap a run's leader: a copy of the executor's end of the run's socket,
/// which the zygote watches; dropped (once the run is swept) it lets the leader go.
#[derive(Debug)]
pub(super) struct Release(#[allow(dead_code)] OwnedFd);

/// The zygote of a warm run: to replace it when it misbehaves.
#[derive(Debug, Clone)]
struct Owner {
    zygotes: Arc<Zygotes>,
    slot: usize,
    cfg: Arc<ZygoteConfig>,
}

impl Owner {
    /// Ends the zygote (blocking: ending one waits for its exit).
    fn discard(&self) {
        self.zygotes.discard(self.slot, &self.cfg);
    }
}

/// A warm run whose child has said its pid.
pub(super) struct Warm {
    sock: tokio::net::UnixStream,
    pub leader: i32,
    owner: Owner,
}

/// Has the slot's zygote fork the run's child and sends it the run; returns once the
/// child has said its pid.
pub(super) async fn start(
    zygotes: &Arc<Zygotes>,
    slot: usize,
    cfg: &Arc<ZygoteConfig>,
    req: Request<'_>,
) -> Result<Warm, ZygoteError> {
    let sock = match zygotes.try_with(slot, cfg, |z| z.fork_restricted()) {
        Some(sock) => sock?,
        None => {
            let (zygotes, cfg) = (zygotes.clone(), cfg.clone());
            tokio::task::spawn_blocking(move || zygotes.with(slot, &cfg, |z| z.fork_restricted()))
                .await
                .map_err(|e| ZygoteError::Fork(format!("waiting for the zygote: {e}")))??
        }
    };
    let run = RunRequest {
        argv: req.argv,
        env: req.env,
        cwd: req.cwd,
        prefix: cfg.interpreter.len(),
        uid: req.uid,
        gid: req.uid,
        rlimits: req.rlimits,
        seccomp: req.seccomp,
        stdio: req.stdio.each_ref().map(|f| f.as_raw_fd()),
        namespaces: vec![],
        procs: vec![],
        new_cgroup_ns: false,
        restricted: true,
        landlock: None,
    };
    let (msg, fds) = (run.encode(), run.fds());
    // What fits the socket's buffer is sent here; larger runs (a MiB of args) block until
    // the child reads them: off the runtime, with copies of the descriptors.
    let stdio = req.stdio;
    let sock = if msg.len() <= 32 * 1024 {
        zygote::send_run(&sock, &msg, &fds)?;
        drop(stdio);
        sock
    } else {
        tokio::task::spawn_blocking(move || {
            let r = zygote::send_run(&sock, &msg, &fds);
            drop(stdio);
            r.map(|_| sock)
        })
        .await
        .map_err(|e| ZygoteError::Fork(e.to_string()))??
    };
    let std_sock = std::os::unix::net::UnixStream::from(sock);
    std_sock.set_nonblocking(true)?;
    let mut sock = tokio::net::UnixStream::from_std(std_sock)?;
    let mut first = [0u8; 5];
    let said = tokio::time::timeout(PID_TIMEOUT, sock.read_exact(&mut first)).await;
    let owner = Owner {
        zygotes: zygotes.clone(),
        slot,
        cfg: cfg.clone(),
    };
    match said {
        Ok(Ok(_)) if first[0] == b'C' => {
            let leader = i32::from_le_bytes([first[1], first[2], first[3], first[4]]);
            Ok(Warm { sock, leader, owner })
        }
        Ok(Ok(_)) | Ok(Err(_)) => {
            // The zygote's `E` (it could not fork), or the socket closed before a pid.
            let mut rest = Vec::new();
            let _ = tokio::time::timeout(REPORT_TIMEOUT, sock.read_to_end(&mut rest)).await;
            let text: String = String::from_utf8_lossy(&[&first[..], &rest].concat())
                .trim_matches('\0')
                .chars()
                .take(500)
                .collect();
            Err(ZygoteError::Fork(text))
        }
        Err(_) => {
            discard(owner).await;
            Err(ZygoteError::Fork("the zygote's child did not say its pid".into()))
        }
    }
}

/// Ends a misbehaving zygote off the async runtime (ending one waits for its exit).
async fn discard(owner: Owner) {
    let _ = tokio::task::spawn_blocking(move || owner.discard()).await;
}

/// How a warm run ended, once its group was swept.
pub(super) struct Ended {
    /// The child said it was about to run the program (`P`): a failure after this is
    /// the run's, before it the run can start again cold.
    pub started: bool,
    /// The leader's wait status and rusage; None when nobody could reap it.
    pub status: Option<(i32, libc::rusage)>,
    /// The zygote reported the leader's end. When it did not (it died, or hung), the
    /// leader may have been killed with it (`PR_SET_PDEATHSIG`): the run failed, not the program.
    pub reported: bool,
    /// What the child said went wrong before the program, if it did.
    pub error: Option<String>,
}

impl Warm {
    /// What lets the zygote reap the leader once dropped: for the run's [`super::Tree`],
    /// which drops it after the sweep however the run ends.
    pub fn release(&self) -> std::io::Result<Release> {
        use std::os::fd::AsFd;
        Ok(Release(self.sock.as_fd().try_clone_to_owned()?))
    }

    /// The run is watched (its [`super::Tree`] holds the leader): the child may run the program.
    pub async fn go(&mut self) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.sock.write_all(b"G").await
    }

    /// After the run's group is killed and swept: lets the zygote reap the leader (shuts
    /// the executor's end for writing) and reads what it and the child said. A zygote that
    /// does not answer is ended, and the leader, now the executor's orphan (its child
    /// subreaper), reaped here.
    pub async fn finish(mut self) -> Ended {
        use tokio::io::AsyncWriteExt;
        let leader = self.leader;
        let mut buf = Vec::new();
        let read = self.sock.shutdown().await.is_ok()
            && tokio::time::timeout(REPORT_TIMEOUT, self.sock.read_to_end(&mut buf))
                .await
                .is_ok_and(|r| r.is_ok());
        let mut ended = parse(&buf);
        ended.reported = read && ended.status.is_some();
        if !ended.reported {
            tracing::warn!(
                slot = self.owner.slot,
                leader,
                "the zygote did not report a run's end; replacing it"
            );
            let owner = self.owner.clone();
            ended.status = tokio::task::spawn_blocking(move || {
                owner.discard();
                reap_orphan(leader)
            })
            .await
            .ok()
            .flatten();
        }
        ended
    }
}

/// Reaps `leader` once its zygote is gone and it has come back to the executor.
fn reap_orphan(leader: i32) -> Option<(i32, libc::rusage)> {
    let until = std::time::Instant::now() + REPORT_TIMEOUT;
    loop {
        if let Some(r) = crate::sys::process::reap(leader) {
            return Some(r);
        }
        if std::time::Instant::now() > until {
            tracing::error!(leader, "a warm run's leader could not be reaped");
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What came on the run's socket after the pid: `P` or the child's `E` text, then the
/// zygote's report (always last, [`REPORT_LEN`] bytes).
fn parse(buf: &[u8]) -> Ended {
    let started = buf.first() == Some(&b'P');
    let (said, report) = match buf.len().checked_sub(REPORT_LEN) {
        Some(at) if buf[at] == b'S' => (&buf[..at], Some(&buf[at + 1..])),
        _ => (buf, None),
    };
    let status = report.map(|r| {
        let i64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&r[i..i + 8]);
            i64::from_le_bytes(b)
        };
        let status = i32::from_le_bytes([r[0], r[1], r[2], r[3]]);
        let tv = |us: i64| libc::timeval {
            tv_sec: (us / 1_000_000) as _,
            tv_usec: (us % 1_000_000) as _,
        };
        let mut ru = crate::sys::process::zero_rusage();
        ru.ru_utime = tv(i64_at(4));
        ru.ru_stime = tv(i64_at(12));
        ru.ru_maxrss = i64_at(20) as _;
        (status, ru)
    });
    let error = (!started && !said.is_empty()).then(|| {
        String::from_utf8_lossy(said.strip_prefix(b"E").unwrap_or(said))
            .chars()
            .take(500)
            .collect()
    });
    Ended {
        started,
        reported: status.is_some(),
        status,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(status: i32, utime_us: i64, stime_us: i64, rss_kib: i64) -> Vec<u8> {
        let mut b = vec![b'S'];
        b.extend_from_slice(&status.to_le_bytes());
        for v in [utime_us, stime_us, rss_kib] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    #[test]
    fn a_started_run_reports_its_status_and_usage() {
        let mut buf = b"P".to_vec();
        buf.extend(report(0x0100, 1_500_000, 20, 9000));
        let e = parse(&buf);
        assert!(e.started && e.error.is_none());
        let (status, ru) = e.status.expect("a report");
        assert_eq!(status, 0x0100);
        assert_eq!((ru.ru_utime.tv_sec, ru.ru_utime.tv_usec), (1, 500_000));
        assert_eq!((ru.ru_stime.tv_sec, ru.ru_stime.tv_usec), (0, 20));
        assert_eq!(ru.ru_maxrss, 9000);
    }

    #[test]
    fn a_failure_before_the_program_is_said_and_not_started() {
        let mut buf = b"Esetting up the run: OSError(1, 'seccomp')".to_vec();
        buf.extend(report(126 << 8, 0, 0, 0));
        let e = parse(&buf);
        assert!(!e.started);
        assert_eq!(e.error.as_deref(), Some("setting up the run: OSError(1, 'seccomp')"));
        assert!(e.status.is_some());
        // The zygote never reported (it died): no status, and nothing started.
        let e = parse(b"");
        assert!(!e.started && e.status.is_none() && e.error.is_none());
        let e = parse(b"P");
        assert!(e.started && e.status.is_none());
    }
}
