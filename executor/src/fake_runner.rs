//! A scripted [`Runner`] for unit tests of the engine and the judge without root.
//!
//! Work dirs are plain directories under a temporary root; every run is answered by
//! the test's script from what the run would see (argv, stdin, the work dir's files),
//! and recorded. Languages' version probes are answered here (argv `fake-version`)
//! and not recorded.

use crate::engine::{Engine, EngineConfig, Identity};
use crate::languages::LanguageTable;
use crate::limits::{LimitPolicy, Limits};
use sandpool_sandbox::{
    BoxFuture, Features, IsolationMode, RunOutcome, RunSpec, Runner, SandboxError, Termination, WorkDir,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The argv[0] of version probes in [`TABLE`].
pub const VERSION: &str = "fake-version";

/// Languages the fake understands: `fake` (interpreted), `fakewarm` (interpreted with a
/// warm-up program), `fakec` (compiled by `fake-cc` into `a.out`).
pub const TABLE: &str = r#"
[fake]
source = "main.fk"
run = ["fake-run", "main.fk"]
version = ["fake-version"]

[fakewarm]
source = "main.fk"
run = ["fake-run", "main.fk"]
version = ["fake-version"]
judge = { warm_up = "WARMUP" }

[fakec]
source = "main.fc"
compile = ["fake-cc", "main.fc"]
run = ["./a.out"]
version = ["fake-version"]
"#;

/// One run, as the fake saw it.
#[derive(Debug, Clone)]
pub struct Call {
    pub argv: Vec<String>,
    pub stdin: Vec<u8>,
    /// The work dir's top-level regular files when the run started.
    pub files: BTreeMap<String, Vec<u8>>,
}

impl Call {
    /// A file of the work dir as text ("" when absent).
    pub fn file(&self, name: &str) -> String {
        self.files
            .get(name)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .unwrap_or_default()
    }

    /// The program run: `a.out` for compiled languages, else the source.
    pub fn program(&self) -> String {
        match self.argv.first().map(String::as_str) {
            Some("./a.out") => self.file("a.out"),
            _ => self.argv.get(1).map(|s| self.file(s)).unwrap_or_default(),
        }
    }

    pub fn stdin_text(&self) -> String {
        String::from_utf8_lossy(&self.stdin).into_owned()
    }
}

/// What the script answers for one run.
#[derive(Debug)]
pub struct Reply {
    pub outcome: Result<RunOutcome, SandboxError>,
    /// How long the run takes (tokio time: tests pause the clock).
    pub delay: Duration,
    /// Files the run leaves in its work dir.
    pub writes: Vec<(String, Vec<u8>)>,
}

impl Reply {
    /// Exit 0 with `stdout`.
    pub fn ok(stdout: impl Into<Vec<u8>>) -> Reply {
        Reply::exit(0, stdout, "")
    }

    /// Exit `code` with `stdout` and `stderr`.
    pub fn exit(code: i32, stdout: impl Into<Vec<u8>>, stderr: impl Into<Vec<u8>>) -> Reply {
        Reply {
            outcome: Ok(RunOutcome {
                exit_code: code,
                stdout: stdout.into(),
                stderr: stderr.into(),
                ..Default::default()
            }),
            delay: Duration::ZERO,
            writes: vec![],
        }
    }

    /// Killed by the executor for `why` (SIGKILL).
    pub fn killed(why: Termination) -> Reply {
        Reply {
            outcome: Ok(RunOutcome {
                signal: 9,
                cpu_exceeded: why == Termination::CpuTime,
                killed_by: Some(why),
                ..Default::default()
            }),
            delay: Duration::ZERO,
            writes: vec![],
        }
    }

    /// The sandbox failed.
    pub fn sandbox_error(msg: &str) -> Reply {
        Reply {
            outcome: Err(SandboxError::Other(msg.to_owned())),
            delay: Duration::ZERO,
            writes: vec![],
        }
    }

    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    pub fn writing(mut self, path: &str, content: impl Into<Vec<u8>>) -> Reply {
        self.writes.push((path.to_owned(), content.into()));
        self
    }
}

type Script = dyn Fn(&Call) -> Reply + Send + Sync;

/// The scripted runner.
pub struct FakeRunner {
    slots: usize,
    root: tempfile::TempDir,
    next: AtomicUsize,
    features: Features,
    script: Box<Script>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl std::fmt::Debug for FakeRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeRunner").field("slots", &self.slots).finish()
    }
}

/// The runs a [`FakeRunner`] saw, readable after the engine took the runner.
#[derive(Debug, Clone, Default)]
pub struct Calls(Arc<Mutex<Vec<Call>>>);

impl Calls {
    pub fn all(&self) -> Vec<Call> {
        self.0.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Runs whose argv[0] is `exe`.
    pub fn of(&self, exe: &str) -> Vec<Call> {
        self.all()
            .into_iter()
            .filter(|c| c.argv.first().is_some_and(|a| a == exe))
            .collect()
    }
}

impl FakeRunner {
    /// A runner with `slots` slots answering runs with `script`; and the record of its runs.
    pub fn new(slots: usize, script: impl Fn(&Call) -> Reply + Send + Sync + 'static) -> (FakeRunner, Calls) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let runner = FakeRunner {
            slots,
            root: tempfile::Builder::new()
                .prefix("sandpool-fake-")
                .tempdir()
                .expect("temporary directory"),
            next: AtomicUsize::new(0),
            features: Features(vec![]),
            script: Box::new(script),
            calls: calls.clone(),
        };
        (runner, Calls(calls))
    }
}

fn files(work: &WorkDir) -> BTreeMap<String, Vec<u8>> {
    let Some(dir) = work.host_path() else {
        return BTreeMap::new();
    };
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| Some((e.file_name().into_string().ok()?, std::fs::read(e.path()).ok()?)))
        .collect()
}

impl Runner for FakeRunner {
    fn mode(&self) -> IsolationMode {
        IsolationMode::Namespaces
    }

    fn features(&self) -> &Features {
        &self.features
    }

    fn slots(&self) -> usize {
        self.slots
    }

    fn has_gpu(&self) -> bool {
        false
    }

    fn work_dir(&self, slot: usize) -> Result<WorkDir, SandboxError> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let path = self.root.path().join(format!("slot{slot}-{n}"));
        let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        Ok(WorkDir::directory(path, uid, gid)?)
    }

    fn run<'a>(
        &'a self,
        _slot: usize,
        work: &'a WorkDir,
        spec: &'a RunSpec,
    ) -> BoxFuture<'a, Result<RunOutcome, SandboxError>> {
        Box::pin(async move {
            if spec.argv.first().is_some_and(|a| a == VERSION) {
                return Ok(RunOutcome {
                    stdout: b"Fake 1.0\n".to_vec(),
                    ..Default::default()
                });
            }
            let call = Call {
                argv: spec.argv.clone(),
                stdin: spec.stdin.clone(),
                files: files(work),
            };
            let reply = (self.script)(&call);
            if let Ok(mut calls) = self.calls.lock() {
                calls.push(call);
            }
            if !reply.delay.is_zero() {
                tokio::time::sleep(reply.delay).await;
            }
            for (path, content) in &reply.writes {
                work.write_file(path, content, false)?;
            }
            reply.outcome
        })
    }
}

/// Limits the fake engine's policy uses everywhere.
pub fn limits() -> Limits {
    Limits {
        wall: Duration::from_secs(10),
        cpu: Duration::from_secs(10),
        memory: 1 << 30,
        output: 1 << 20,
        processes: 64,
        file_size: 1 << 20,
    }
}

/// An engine over `runner` with [`TABLE`]'s languages (probed through the fake).
pub async fn engine(runner: FakeRunner) -> Arc<Engine> {
    engine_with(runner, None).await
}

/// [`engine`] with a result cache.
pub async fn engine_with(runner: FakeRunner, cache: Option<crate::result_cache::CacheConfig>) -> Arc<Engine> {
    let table = LanguageTable::parse(TABLE).expect("fake language table");
    let cfg = EngineConfig {
        policy: LimitPolicy {
            run_defaults: limits(),
            compile_defaults: limits(),
            max: Limits {
                wall: Duration::from_secs(60),
                cpu: Duration::from_secs(60),
                ..limits()
            },
        },
        queue_capacity: 64,
        assert_prelude: true,
        fetch_file_bytes: 1 << 20,
        fetch_total_bytes: 1 << 20,
        inflight_bytes: 64 << 20,
        work_dir_bytes: 1 << 24,
        identity: Identity {
            name: "fake".into(),
            version: "0".into(),
        },
        capture: None,
        result_cache: cache,
        warm_starts: false,
    };
    Arc::new(Engine::new(Box::new(runner), table, cfg).await)
}
