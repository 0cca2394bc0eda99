//! Helpers for Sandpool's end-to-end tests: start the real `sandpool-executor`
//! binary on a free loopback port and connect a gRPC client to it.
//!
//! Build the binaries first (`cargo build --workspace`); the helper finds them
//! next to the test executable, or at `$SANDPOOL_EXECUTOR_BIN`.

pub mod session_calls;

use sandpool_proto::v1 as pb;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Path of a workspace binary built next to the test executable.
pub fn binary(name: &str) -> PathBuf {
    if let Ok(p) = std::env::var(format!(
        "SANDPOOL_{}_BIN",
        name.trim_start_matches("sandpool-").to_uppercase()
    )) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let p = dir.join(name);
    // `cargo test -p sandpool-tests` builds no other crate's binaries (`sandpool` is
    // sandpool-cli's, the rest are named for their crates).
    assert!(
        p.exists(),
        "{} not found: run `cargo build --workspace` before the tests",
        p.display()
    );
    p
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

static INSTANCE: AtomicU32 = AtomicU32::new(0);

/// A running executor process, killed (SIGTERM, then SIGKILL) on drop.
pub struct Executor {
    child: Option<Child>,
    pub addr: String,
    pub metrics_addr: String,
    pub work_root: tempfile::TempDir,
    pub client: pb::executor_client::ExecutorClient<Channel>,
    pub channel: Channel,
    /// The HTTP API's address, when [`Options::http`] asked for it.
    pub http_addr: Option<String>,
    /// uid of slot 0 (slot i runs as `uid_base + i`).
    pub uid_base: u32,
}

/// Options for [`Executor::start`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub slots: usize,
    /// The gRPC port (default: a free one).
    pub port: Option<u16>,
    pub queue: Option<usize>,
    /// Languages to enable (empty: all).
    pub languages: Vec<&'static str>,
    pub extra_args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Also serve the SandboxFusion-compatible HTTP API (address in [`Executor::http_addr`]).
    pub http: bool,
    /// The isolation mode, and with it how the executor is started.
    pub isolation: Isolation,
    /// The uid of slot 0, instead of a range of this executor's own: executors given the
    /// same one share uids, as the pods of a pool on one node do.
    pub uid_base: Option<u32>,
    /// Shell commands run in a private mount namespace of the executor's own
    /// just before it starts there (`$WORK_ROOT` is its work root): to give it
    /// the filesystem a pod would, e.g. a read-only `/` and volumes.
    pub mount_setup: Option<String>,
}

/// How a test's executor isolates runs, and what privileges it starts with.
///
/// The default is `namespaces`, or `restricted` when `SANDPOOL_TEST_ISOLATION=restricted`:
/// any suite that does not choose a mode itself can be run in restricted mode that way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// `--isolation namespaces`, started as root (as a privileged pod).
    Namespaces,
    /// `--isolation restricted`, started as a Pod Security `restricted` pod
    /// would be: a non-root uid of its own, no capabilities (none inheritable,
    /// an empty bounding set), `no_new_privs`, and a seccomp filter standing in
    /// for the runtime's default that refuses namespaces and mounts
    /// (`sandpool-pod-seccomp`).
    Restricted,
}

impl Default for Isolation {
    fn default() -> Self {
        match std::env::var("SANDPOOL_TEST_ISOLATION").as_deref() {
            Ok("restricted") => Isolation::Restricted,
            _ => Isolation::Namespaces,
        }
    }
}

impl Isolation {
    /// Both modes, for tests that run in each.
    pub const ALL: [Isolation; 2] = [Isolation::Namespaces, Isolation::Restricted];

    /// The mode's name on the executor's command line and in GetCapabilities.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Namespaces => "namespaces",
            Isolation::Restricted => "restricted",
        }
    }
}

impl Executor {
    /// Starts an executor with `opts` and waits until its health check says SERVING.
    pub async fn start(opts: Options) -> Executor {
        let n = INSTANCE.fetch_add(1, Ordering::SeqCst);
        // Distinct uid ranges keep concurrent executors' rlimits apart: 100 uids each, room
        // for the slots and the default 64 session seats (uid_base + slots + k).
        let uid_base = opts
            .uid_base
            .unwrap_or(100_000 + (std::process::id() % 50) * 4000 + n * 100);
        // A port `free_port` picked can be taken before the executor binds it (by a client
        // connection's ephemeral port, say): an executor that exits during start-up is
        // started again on fresh ports, twice at most. A real start-up bug fails each time.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once(&opts, uid_base).await {
                Ok(ex) => return ex,
                Err(status) if attempt < 3 => {
                    eprintln!("sandpool-executor exited during start-up ({status}); starting it again on new ports")
                }
                Err(status) => panic!("sandpool-executor exited during start-up: {status}"),
            }
        }
    }

    /// One try of [`Executor::start`]: Err(status) when the executor exited during start-up.
    async fn start_once(opts: &Options, uid_base: u32) -> Result<Executor, std::process::ExitStatus> {
        let port = opts.port.unwrap_or_else(free_port);
        let metrics_port = free_port();
        let work_root = tempfile::Builder::new()
            .prefix("sandpool-test-")
            .tempdir()
            .expect("tempdir");
        let mut cmd = match opts.isolation {
            Isolation::Namespaces => {
                // Exactly the capabilities the operator grants the executor's
                // container (root, nothing inheritable): what a pod has, not
                // what root on this machine has. CAP_SYS_PTRACE, for one, is
                // not among them (warm starts once needed it unawares).
                let bound: Vec<String> = sandpool_operator::build::NAMESPACES_CAPABILITIES
                    .iter()
                    .map(|c| format!("+{}", c.to_lowercase()))
                    .collect();
                let mut c = Command::new("setpriv");
                c.args(["--inh-caps=-all", "--ambient-caps=-all"])
                    .arg(format!("--bounding-set=-all,{}", bound.join(",")))
                    .arg("--")
                    .arg(binary("sandpool-executor"));
                c
            }
            Isolation::Restricted => {
                // A uid of its own: RLIMIT_NPROC counts per uid, and tests run executors side by side.
                let uid = uid_base.to_string();
                std::os::unix::fs::chown(work_root.path(), Some(uid_base), Some(uid_base)).expect("chown work root");
                let mut c = Command::new(binary("sandpool-pod-seccomp"));
                c.arg("setpriv")
                    .arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={uid}"))
                    .args([
                        "--clear-groups",
                        "--inh-caps=-all",
                        "--bounding-set=-all",
                        "--no-new-privs",
                        "--",
                    ])
                    .arg(binary("sandpool-executor"))
                    .args(["--isolation", "restricted"]);
                c
            }
        };
        cmd.arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .arg("--work-root")
            .arg(work_root.path())
            .arg("--uid-base")
            .arg(uid_base.to_string())
            .arg("--slots")
            .arg(opts.slots.max(1).to_string());
        if let Some(q) = opts.queue {
            cmd.arg("--queue").arg(q.to_string());
        }
        if !opts.languages.is_empty() {
            cmd.arg("--enable-languages").arg(opts.languages.join(","));
        }
        let http_addr = opts.http.then(|| format!("127.0.0.1:{}", free_port()));
        if let Some(a) = &http_addr {
            // By environment, as every setting a test needs from an older binary too.
            cmd.env("SANDPOOL_HTTP_LISTEN", a);
        }
        cmd.args(&opts.extra_args);
        if let Some(setup) = &opts.mount_setup {
            let inner = cmd;
            cmd = Command::new("unshare");
            cmd.args(["--mount", "--propagation", "private", "--", "sh", "-euc"])
                .arg(format!("{setup}\nexec \"$@\""))
                .arg("sh")
                .arg(inner.get_program())
                .args(inner.get_args())
                .env("WORK_ROOT", work_root.path());
            for (k, v) in inner.get_envs() {
                if let Some(v) = v {
                    cmd.env(k, v);
                }
            }
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null());
        if std::env::var_os("SANDPOOL_TEST_QUIET").is_some() {
            cmd.stderr(Stdio::null());
        }
        let mut child = cmd.spawn().expect("spawning sandpool-executor");
        let addr = format!("127.0.0.1:{port}");
        let channel = wait_ready(&addr, &mut child).await?;
        let client = pb::executor_client::ExecutorClient::new(channel.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Ok(Executor {
            child: Some(child),
            addr,
            metrics_addr: format!("127.0.0.1:{metrics_port}"),
            work_root,
            client,
            channel,
            http_addr,
            uid_base,
        })
    }

    /// Sum of the samples of metric `name` (with or without labels) on /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&self.metrics_addr).expect("metrics connect");
        write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").expect("metrics request");
        let mut body = String::new();
        s.read_to_string(&mut body).expect("metrics read");
        body.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// A field of the executor's /proc/<pid>/status in KiB (VmRSS, VmHWM, ...).
    pub fn status_kib(&self, field: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("reading status");
        s.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in status"))
    }

    /// Descriptors the executor has open.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Sets the executor's descriptor limit (soft and hard) to `n`.
    pub fn limit_fds(&self, n: u64) {
        if let Err(e) = sandpool_sandbox::host::set_fd_limit(self.pid(), n) {
            panic!("prlimit: {e}");
        }
    }

    /// Sends `sig` to the executor.
    pub fn signal(&self, sig: i32) {
        signal(self.pid(), sig);
    }

    /// Waits up to `timeout` for the executor to exit on its own; None if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let t = Instant::now();
        while t.elapsed() < timeout {
            if let Some(Ok(Some(s))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// A client on a new connection of its own.
    pub async fn fresh_client(&self) -> Result<pb::executor_client::ExecutorClient<Channel>, tonic::transport::Error> {
        let ch = Channel::from_shared(format!("http://{}", self.addr))
            .expect("uri")
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await?;
        Ok(pb::executor_client::ExecutorClient::new(ch).max_decoding_message_size(usize::MAX))
    }

    /// A fresh client on the same channel.
    pub fn client(&self) -> pb::executor_client::ExecutorClient<Channel> {
        self.client.clone()
    }

    /// Executes `req`, panicking on a gRPC error (tests of errors call `client()`).
    pub async fn run(&self, req: pb::ExecuteRequest) -> pb::ExecuteResponse {
        match self.client().execute(req).await {
            Ok(r) => r.into_inner(),
            Err(s) => panic!("Execute failed: {s:?}"),
        }
    }

    /// Sends `req` in a task of its own: a run in flight while the test does something to the executor.
    pub fn execute_in_background(
        &self,
        req: pb::ExecuteRequest,
    ) -> tokio::task::JoinHandle<Result<pb::ExecuteResponse, tonic::Status>> {
        let mut c = self.client();
        tokio::spawn(async move { c.execute(req).await.map(|r| r.into_inner()) })
    }

    /// Sum of `sandpool_runs_total` samples on the executor's /metrics: the runs it finished.
    pub fn runs_total(&self) -> f64 {
        self.metric("sandpool_runs_total")
    }

    /// Pid of the executor process.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Sends SIGTERM and waits (up to `timeout`) for the process to exit; returns its exit status.
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        signal(child.id(), libc::SIGTERM);
        let t = Instant::now();
        while t.elapsed() < timeout {
            if let Ok(Some(s)) = child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        child.wait().ok()
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.terminate(Duration::from_secs(10));
    }
}

/// Waits until the executor at `addr` serves; Err(status) when it exits first.
async fn wait_ready(addr: &str, child: &mut Child) -> Result<Channel, std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(status);
        }
        assert!(
            Instant::now() < deadline,
            "sandpool-executor at {addr} not ready after 120 s"
        );
        if let Ok(ch) = Channel::from_shared(format!("http://{addr}"))
            .expect("uri")
            .connect()
            .await
        {
            let mut health = tonic_health::pb::health_client::HealthClient::new(ch.clone());
            let req = tonic_health::pb::HealthCheckRequest { service: String::new() };
            if let Ok(r) = health.check(req).await
                && r.into_inner().status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
            {
                return Ok(ch);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Defines, for each listed `async fn name(mode: Isolation)`, a module `name`
/// with one test per mode: `name::namespaces` and `name::restricted`.
#[macro_export]
macro_rules! in_each_mode {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn namespaces() {
                    super::$name($crate::Isolation::Namespaces).await
                }
                #[tokio::test]
                async fn restricted() {
                    super::$name($crate::Isolation::Restricted).await
                }
            }
        )*
    };
}

impl Executor {
    /// GetCapabilities, panicking on a gRPC error.
    pub async fn capabilities(&self) -> pb::Capabilities {
        self.client()
            .get_capabilities(pb::GetCapabilitiesRequest {})
            .await
            .expect("GetCapabilities")
            .into_inner()
    }

    /// The capabilities' entry for `language`.
    pub async fn language_info(&self, language: &str) -> pb::LanguageInfo {
        let caps = self.capabilities().await;
        caps.languages
            .into_iter()
            .find(|l| l.name == language)
            .unwrap_or_else(|| panic!("{language} not in the capabilities"))
    }

    /// For a cell the README marks as not promised in this executor's mode:
    /// asserts that the executor itself reports `feature` as not in force
    /// (so the skip cannot hide a regression in a mode that promises it),
    /// and says why the cell is skipped.
    pub async fn not_promised(&self, feature: &str, why: &str) {
        let iso = self.capabilities().await.isolation.expect("isolation");
        let f = iso.features.iter().find(|f| f.name == feature);
        assert!(
            f.is_some_and(|f| !f.in_use),
            "mode {} claims {feature}, yet the test treats it as not promised: {:?}",
            iso.mode,
            iso.features
        );
        println!("not promised in {} mode ({feature}): {why}", iso.mode);
    }
}

/// A request for `language` with `code` and `stdin`.
pub fn request(language: &str, code: &str, stdin: &str) -> pb::ExecuteRequest {
    pb::ExecuteRequest {
        language: language.into(),
        code: code.into(),
        stdin: stdin.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// Name of a verdict code.
pub fn verdict(v: i32) -> &'static str {
    pb::Verdict::try_from(v).map(|v| v.as_str_name()).unwrap_or("?")
}

/// Whether executors started by the tests run Python warm: the executor's
/// default (on) unless `SANDPOOL_WARM_STARTS` (inherited by the executors
/// the harness starts) turns warm starts off. scripts/test.sh runs the
/// isolation and limits suites both ways.
pub fn warm_starts() -> bool {
    !matches!(
        std::env::var("SANDPOOL_WARM_STARTS")
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Ok("false" | "0" | "off" | "no")
    )
}

/// Asserts a Python response that ran its program started as the variant
/// under test says ([`warm_starts`]; mode `restricted` starts warm only where
/// Landlock scopes signals, [`sandpool_sandbox::host::restricted_warm_starts`]);
/// a sandbox failure has no start to check.
pub fn assert_start_variant(r: &pb::ExecuteResponse) {
    let mode_warm = match r.executor.as_ref().map(|e| e.isolation.as_str()) {
        Some("namespaces") => true,
        Some("restricted") => sandpool_sandbox::host::restricted_warm_starts(),
        _ => false,
    };
    if let Some(p) = &r.run
        && r.verdict != pb::Verdict::SandboxError as i32
    {
        let expected = warm_starts() && mode_warm;
        assert_eq!(p.warm, expected, "warm start expected: {expected}; {}", describe(r));
    }
}

/// Stdout of the run phase, lossily decoded.
pub fn stdout(r: &pb::ExecuteResponse) -> String {
    r.run
        .as_ref()
        .map(|p| String::from_utf8_lossy(&p.stdout).into_owned())
        .unwrap_or_default()
}

/// Everything useful for a failed assertion about a response.
pub fn describe(r: &pb::ExecuteResponse) -> String {
    let p = |p: &Option<pb::PhaseResult>| {
        p.as_ref()
            .map(|p| {
                format!(
                    "[{} exit={} sig={} stdout={:?} stderr={:?}]",
                    verdict(p.verdict),
                    p.exit_code,
                    p.signal,
                    String::from_utf8_lossy(&p.stdout),
                    String::from_utf8_lossy(&p.stderr)
                )
            })
            .unwrap_or_default()
    };
    format!(
        "verdict={} message={:?} compile={} run={}",
        verdict(r.verdict),
        r.message,
        p(&r.compile),
        p(&r.run)
    )
}

/// Sends signal `sig` (0: only check) to `pid`; true when it was delivered,
/// i.e. the process exists.
pub fn signal(pid: u32, sig: i32) -> bool {
    let sig = match sig {
        0 => None,
        s => match nix::sys::signal::Signal::try_from(s) {
            Ok(s) => Some(s),
            Err(_) => return false,
        },
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).is_ok()
}

/// One HTTP/1.1 request (Connection: close, blocking: call it off the runtime) with extra header lines; the status and body.
pub fn http(addr: &str, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut raw = String::new();
    let _ = conn.read_to_string(&mut raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, body.to_owned())
}

/// An executor in namespaces mode (python, bash, two slots) whose session store is the
/// directory `store`, with `extra` flags: the pause, snapshot and drain tests' executor
/// (executors sharing `store` resume each other's sessions).
pub async fn session_executor(store: &std::path::Path, extra: &[&str]) -> Executor {
    let mut args = vec!["--session-store-dir".to_owned(), store.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    Executor::start(Options {
        slots: 2,
        languages: vec!["python", "bash"],
        extra_args: args,
        isolation: Isolation::Namespaces,
        ..Default::default()
    })
    .await
}

/// `msg` sent as `who` (`authorization: Bearer WHO`): a session's owner, or someone else.
pub fn as_caller<T>(who: &str, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {who}").parse().expect("header"));
    r
}
