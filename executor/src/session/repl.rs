//! A Python session's interpreter: one long-lived sandboxed run of the driver
//! (`driver.py`), spoken to through files in the session's /work.
//!
//! The host writes `.sandpool/in/N.json` (and `N.stdin`), then the marker `N.go`;
//! the driver answers with `.sandpool/out/N/{stdout,stderr}` and then `out/N.json`.
//! Everything read back was written by the user's uid: it is capped and parsed
//! defensively, and the host alone decides when a call has run too long.

use super::SessionError;
use crate::engine::Engine;
use crate::error::ExecError;
use crate::limits::Limits;
use crate::metrics::Phase;
use crate::sandbox::{FetchError, RunOutcome, RunSpec, SandboxError, WorkDir};
use crate::task::blocking;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The driver's source, run as `python3 -B -c <source>`: no file in /work for a cell to edit.
const DRIVER: &str = include_str!("driver.py");

/// The modules the driver imports at its start (checked against `driver.py` by a test): the
/// seats' zygote imports them once, so a session's interpreter starts without importing.
const DRIVER_IMPORTS: &[&str] = &[
    "ast",
    "fcntl",
    "io",
    "json",
    "linecache",
    "os",
    "resource",
    "shutil",
    "subprocess",
    "threading",
    "time",
    "traceback",
    "types",
];

/// The zygote sessions' interpreters fork from: Python's warm preloads and the driver's
/// imports, and the driver compiled (3 to 5 ms a start otherwise). None where Python has no warm starts (`--warm-starts false`, no cgroups).
pub fn driver_zygote(engine: &Engine) -> Option<Arc<crate::sandbox::ZygoteConfig>> {
    engine.command_zygote("python", DRIVER, DRIVER_IMPORTS)
}

/// How long the driver may take to start before the call fails.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times a reply is looked for a millisecond apart before the pause grows.
const FINE_POLLS: u32 = 16;

/// The longest `display` a call returns, characters (a notebook shows no more either).
pub const DISPLAY_CHARS: u64 = 256 << 10;

/// The largest reply metadata read back: the display string JSON-escaped (at most 6 bytes a
/// character) and the rest.
const META_CAP: u64 = 6 * DISPLAY_CHARS + (64 << 10);

/// A running interpreter.
#[derive(Debug)]
pub struct Repl {
    /// Ends with the run's outcome when the interpreter exits or is killed at a limit.
    task: JoinHandle<Option<Result<RunOutcome, SandboxError>>>,
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    /// Becomes true when the run has ended (see [`Repl::ended`]).
    ended: tokio::sync::watch::Receiver<bool>,
    /// Tells this start's `ready` file from an earlier one's.
    epoch: u64,
    ready: bool,
    /// The last call's request needed the reserve (see [`super::RESERVE_BYTES`]).
    pub reserve_used: bool,
}

/// What a finished call sent back.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct Reply {
    pub status: String,
    pub display: String,
    pub exit_code: i64,
    pub error: String,
    pub cwd: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub display_truncated: bool,
    /// The driver gave up the reserve to write this reply (its output is not returned).
    pub reserve_used: bool,
    pub cpu_us: u64,
    pub max_rss: u64,
    #[serde(skip)]
    pub stdout: Vec<u8>,
    #[serde(skip)]
    pub stderr: Vec<u8>,
}

/// How a call ended.
#[derive(Debug)]
pub enum CallEnd {
    Replied(Box<Reply>),
    /// The interpreter exited (or was killed at a session limit) during the call.
    Exited(Result<RunOutcome, SandboxError>),
    /// The call's wall time ran out; the interpreter is still running.
    TimedOut,
}

/// True once the driver of start `epoch` has written its `ready` file.
pub async fn is_ready(work: &Arc<WorkDir>, epoch: u64) -> bool {
    let w = work.clone();
    let got = blocking(move || w.read_file(".sandpool/ready", 64)).await;
    matches!(got, Ok(Ok(b)) if String::from_utf8_lossy(&b).trim() == epoch.to_string())
}

/// How many times a starting driver is looked for a millisecond apart before the pause
/// grows: one forked from the seats' zygote is ready 10 to 25 ms after its start.
const FINE_READY_POLLS: u32 = 32;

/// Waits (polling, up to [`START_TIMEOUT`]) until the driver of start `epoch` is ready.
pub async fn until_ready(work: &Arc<WorkDir>, epoch: u64) {
    let until = tokio::time::Instant::now() + START_TIMEOUT;
    let mut polls = 0u32;
    while !is_ready(work, epoch).await && tokio::time::Instant::now() < until {
        polls += 1;
        let pause = match polls.checked_sub(FINE_READY_POLLS) {
            None => Duration::from_millis(1),
            Some(k) => Duration::from_millis(2u64 << k.min(4)).min(Duration::from_millis(20)),
        };
        tokio::time::sleep(pause).await;
    }
}

impl Repl {
    /// Starts the driver in sandbox identity `seat` (a session's seat) with `work` at /work.
    /// `warm`: the seats' zygote to fork it from (see [`driver_zygote`]); cold without one.
    /// `home`: it runs in [`crate::sandbox::SEAT_HOME`] as E2B's user (see
    /// [`super::Extras::home`]).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        engine: &Arc<Engine>,
        seat: usize,
        work: &Arc<WorkDir>,
        limits: Limits,
        epoch: u64,
        first_call: u64,
        home: bool,
        warm: Option<Arc<crate::sandbox::ZygoteConfig>>,
    ) -> Result<Repl, ExecError> {
        let (lang, _) = engine.language("python", "language")?;
        let python = lang.run.first().cloned().unwrap_or_else(|| "python3".into());
        let mut env = lang.run_env();
        env.push(("SANDPOOL_EPOCH".into(), epoch.to_string()));
        env.push(("SANDPOOL_FIRST_CALL".into(), first_call.to_string()));
        if home {
            // E2B's base template: user `user` (the seat's passwd name), at home in its files.
            let home = crate::sandbox::SEAT_HOME;
            env.retain(|(k, _)| !matches!(k.as_str(), "HOME" | "USER" | "LOGNAME"));
            env.extend(
                [
                    ("HOME", home),
                    ("USER", "user"),
                    ("LOGNAME", "user"),
                    ("SANDPOOL_CWD", home),
                ]
                .map(|(k, v)| (k.into(), v.into())),
            );
        }
        let spec = RunSpec {
            argv: vec![python, "-B".into(), "-c".into(), DRIVER.into()],
            env,
            stdin: vec![],
            limits,
            gpu: false,
            warm,
        };
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        let (engine, work) = (engine.clone(), work.clone());
        let (ended_tx, ended) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let r = tokio::select! {
                // The engine's one way in, as every run: the watchdog tracks it against its
                // lifetime, and its life is recorded as the `interpreter` phase.
                r = engine.run_in(seat, &work, &spec, Phase::Interpreter) => Some(r),
                // Dropping the run kills everything it started.
                _ = killed => None,
            };
            ended_tx.send_replace(true);
            r
        });
        Ok(Repl {
            task,
            ended,
            kill: Some(kill),
            epoch,
            ready: false,
            reserve_used: false,
        })
    }

    /// Waits until the interpreter's run has ended (a handle that outlives the borrow).
    pub fn ended(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut ended = self.ended.clone();
        async move {
            let _ = ended.wait_for(|e| *e).await;
        }
    }

    /// True while the interpreter runs.
    pub fn alive(&self) -> bool {
        !self.task.is_finished()
    }

    /// True once the driver said it was ready (it has joined its seat's cgroup).
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Kills the interpreter and waits for its run to end (its processes die with its
    /// pid namespace; the caller checks from the host that they are gone).
    pub async fn kill(mut self) -> Option<Result<RunOutcome, SandboxError>> {
        if let Some(k) = self.kill.take() {
            let _ = k.send(());
        }
        (&mut self.task).await.ok().flatten()
    }

    /// Waits for the driver's `ready` file; Err(outcome) when it exited first.
    async fn wait_ready(&mut self, work: &Arc<WorkDir>) -> Result<(), CallEnd> {
        if self.ready {
            return Ok(());
        }
        let ended = tokio::select! {
            _ = until_ready(work, self.epoch) => false,
            _ = self.ended() => true,
        };
        if is_ready(work, self.epoch).await {
            self.ready = true;
            return Ok(());
        }
        if !ended {
            return Err(CallEnd::TimedOut);
        }
        // Its run ended (the task returns right after saying so).
        Err(CallEnd::Exited((&mut self.task).await.ok().flatten().unwrap_or_else(
            || Err(SandboxError::Other("the interpreter was stopped".into())),
        )))
    }

    /// Runs call `n`: writes it, then waits for the reply, the interpreter's end or `wall`.
    pub async fn call(
        &mut self,
        work: &Arc<WorkDir>,
        n: u64,
        request: serde_json::Value,
        stdin: Vec<u8>,
        wall: Duration,
        output_cap: u64,
    ) -> Result<CallEnd, SessionError> {
        if let Err(end) = self.wait_ready(work).await {
            return Ok(end);
        }
        let w = work.clone();
        let body = request.to_string();
        self.reserve_used = blocking(move || {
            let (req, inp, go) = (
                format!(".sandpool/in/{n}.json"),
                format!(".sandpool/in/{n}.stdin"),
                format!(".sandpool/in/{n}.go"),
            );
            let mut writes: Vec<(&str, &[u8])> = vec![(&req, body.as_bytes())];
            if !stdin.is_empty() {
                writes.push((&inp, &stdin));
            }
            // Last: its existence says the request is whole.
            writes.push((&go, b""));
            super::write_state(&w, &writes)
        })
        .await??;

        let until = tokio::time::Instant::now() + wall;
        let mut pause = Duration::from_millis(1);
        let mut polls = 0u32;
        loop {
            let w = work.clone();
            match blocking(move || w.read_file(&format!(".sandpool/out/{n}.json"), META_CAP)).await? {
                Ok(meta) => {
                    let w = work.clone();
                    let cap = output_cap;
                    let (out, err) = blocking(move || {
                        let read = |s: &str| w.read_file(&format!(".sandpool/out/{n}/{s}"), cap).unwrap_or_default();
                        (read("stdout"), read("stderr"))
                    })
                    .await?;
                    let mut reply: Reply = serde_json::from_slice(&meta).unwrap_or_else(|e| Reply {
                        status: "error".into(),
                        error: format!("sandpool: the interpreter's reply was unreadable: {e}"),
                        exit_code: 1,
                        ..Default::default()
                    });
                    reply.stdout = out;
                    reply.stderr = err;
                    return Ok(CallEnd::Replied(Box::new(reply)));
                }
                Err(FetchError::NotFound) => {}
                // Anything else there (too large, not a file) is the cell's doing: no reply.
                Err(e) => {
                    let reply = Reply {
                        status: "error".into(),
                        error: format!("sandpool: the interpreter's reply was unreadable: {e}"),
                        exit_code: 1,
                        ..Default::default()
                    };
                    return Ok(CallEnd::Replied(Box::new(reply)));
                }
            }
            if self.task.is_finished() {
                let o = (&mut self.task).await.ok().flatten();
                return Ok(CallEnd::Exited(o.unwrap_or_else(|| {
                    Err(SandboxError::Other("the interpreter was stopped".into()))
                })));
            }
            if tokio::time::Instant::now() >= until {
                return Ok(CallEnd::TimedOut);
            }
            tokio::time::sleep(pause).await;
            // Most cells answer within a few milliseconds (an expression, a definition):
            // looked for every millisecond at first, then less often for long ones.
            polls += 1;
            if polls >= FINE_POLLS {
                pause = (pause * 2).min(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for Repl {
    fn drop(&mut self) {
        if let Some(k) = self.kill.take() {
            let _ = k.send(());
        }
    }
}

#[cfg(test)]
mod driver_tests {
    /// The zygote preloads what the driver imports: a module added to `driver.py` and not
    /// to the list would be imported again by every session's start.
    #[test]
    fn the_driver_imports_what_the_zygote_preloads() {
        let imported: Vec<&str> = super::DRIVER
            .lines()
            .filter_map(|l| l.strip_prefix("import "))
            .map(|m| m.split_whitespace().next().unwrap_or(m))
            .filter(|m| *m != "sys")
            .collect();
        assert!(!imported.is_empty());
        for m in &imported {
            assert!(
                super::DRIVER_IMPORTS.contains(m),
                "driver.py imports {m}: add it to DRIVER_IMPORTS"
            );
        }
        for m in super::DRIVER_IMPORTS {
            assert!(
                imported.contains(m),
                "DRIVER_IMPORTS names {m}, which driver.py does not import"
            );
        }
    }
}
