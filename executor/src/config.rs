//! Executor configuration: command-line flags with environment fallbacks.

use crate::engine::{EngineConfig, Identity};
use crate::limits::{LimitPolicy, Limits};
use sandpool_sandbox::{DEFAULT_RO_PATHS, IsolationMode, SandboxConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// Settings of the engine and sandbox, shared by the server and the embedded CLI.
#[derive(Debug, Clone, clap::Args)]
pub struct ExecutorArgs {
    /// Isolation mode: `namespaces` (root or CAP_SYS_ADMIN) or `restricted` (any non-root uid, no
    /// capabilities; Landlock and seccomp). The executor refuses to start if the kernel or its
    /// privileges cannot provide it, saying why.
    #[arg(long, env = "SANDPOOL_ISOLATION", default_value = "namespaces")]
    pub isolation: IsolationMode,
    /// Network isolation in `namespaces` mode: `namespace` (a network namespace per run),
    /// `seccomp` (none: a socket filter allowing only unix sockets, and Landlock scoping of
    /// abstract unix sockets and signals; needs Landlock ABI 6), or `auto` (`seccomp` where
    /// the kernel has it). The executor logs at start which one it uses.
    #[arg(long, env = "SANDPOOL_NETWORK_ISOLATION", default_value = "auto")]
    pub network_isolation: sandpool_sandbox::NetworkIsolation,
    /// Warm starts: runs of languages whose table entry has `warm` fork from a
    /// per-slot pre-initialised interpreter (docs/warm-starts.md); requests may opt out
    /// (`cold_start`), and `false` starts every run cold.
    #[arg(long, env = "SANDPOOL_WARM_STARTS", default_value_t = true, action = clap::ArgAction::Set)]
    pub warm_starts: bool,
    /// Concurrent run slots (default: the CPUs this process may use).
    #[arg(long, env = "SANDPOOL_SLOTS")]
    pub slots: Option<usize>,
    /// Requests that may wait for a slot before new ones get RESOURCE_EXHAUSTED (default: 4 x slots).
    #[arg(long, env = "SANDPOOL_QUEUE")]
    pub queue: Option<usize>,
    /// Language table (TOML); default: the built-in table.
    #[arg(long, env = "SANDPOOL_LANGUAGES")]
    pub languages: Option<PathBuf>,
    /// Offer only these languages (comma-separated).
    #[arg(long, env = "SANDPOOL_ENABLE_LANGUAGES", value_delimiter = ',')]
    pub enable_languages: Vec<String>,
    /// Directory for work dirs and the sandbox root (namespaces: root-owned; restricted: writable
    /// by the executor's uid, e.g. an emptyDir).
    #[arg(long, env = "SANDPOOL_WORK_ROOT", default_value = "/var/lib/sandpool")]
    pub work_root: PathBuf,
    /// Host paths visible read-only inside the sandbox (comma-separated).
    #[arg(long, env = "SANDPOOL_RO_PATHS", value_delimiter = ',', default_values_t = DEFAULT_RO_PATHS.iter().map(|s| s.to_string()).collect::<Vec<_>>())]
    pub ro_paths: Vec<String>,
    /// Directories of Python packages (a venv or a site-packages directory) that runs see
    /// read-only and import first: added to PYTHONPATH of the table's Python entries (comma-separated).
    #[arg(long, env = "SANDPOOL_PYTHON_PATH", value_delimiter = ',')]
    pub python_path: Vec<PathBuf>,
    /// uid/gid of slot 0; slot i runs as uid_base + i (restricted mode: only when the executor is
    /// root; otherwise runs keep the executor's uid).
    #[arg(long, env = "SANDPOOL_UID_BASE", default_value_t = 60000)]
    pub uid_base: u32,
    /// Give cuda and python_gpu runs the NVIDIA devices (default: on when /dev/nvidia* exists).
    #[arg(long, env = "SANDPOOL_GPU")]
    pub gpu: bool,
    /// Size cap of each run's work dir, bytes.
    #[arg(long, env = "SANDPOOL_WORK_DIR_BYTES", default_value_t = 256 * MIB)]
    pub work_dir_bytes: u64,
    /// Size cap of each run's /tmp and /dev/shm, bytes.
    #[arg(long, env = "SANDPOOL_TMP_BYTES", default_value_t = 256 * MIB)]
    pub tmp_bytes: u64,
    /// Largest file returned through fetch_files, bytes.
    #[arg(long, env = "SANDPOOL_FETCH_FILE_BYTES", default_value_t = 16 * MIB)]
    pub fetch_file_bytes: u64,
    /// Most bytes returned through fetch_files in one response, all files together.
    #[arg(long, env = "SANDPOOL_FETCH_TOTAL_BYTES", default_value_t = 64 * MIB)]
    pub fetch_total_bytes: u64,
    /// Bytes held in memory for callers at once, all requests together: request bodies as
    /// they arrive (before decoding), requests an EvaluateStream has read, files read for
    /// replies. Past it calls get RESOURCE_EXHAUSTED (HTTP 503) at once. At least
    /// --max-request-bytes, or the largest request allowed could never be taken.
    #[arg(long, env = "SANDPOOL_MAX_INFLIGHT_BYTES", default_value_t = 128 * MIB)]
    pub max_inflight_bytes: u64,
    /// Record requests that end with chosen verdicts (with their responses) as JSONL here.
    /// Off unless set. The records hold user code and inputs.
    #[arg(long, env = "SANDPOOL_CAPTURE_DIR")]
    pub capture_dir: Option<PathBuf>,
    /// Verdicts recorded by --capture-dir (comma-separated proto names, any case).
    #[arg(
        long,
        env = "SANDPOOL_CAPTURE_VERDICTS",
        value_delimiter = ',',
        default_value = "sandbox_error"
    )]
    pub capture_verdicts: Vec<String>,
    /// Bytes the capture files may hold in all; the oldest file is removed past it.
    #[arg(long, env = "SANDPOOL_CAPTURE_MAX_BYTES", default_value_t = 256 * MIB)]
    pub capture_max_bytes: u64,
    /// Capture files kept (the current one and the rotated ones).
    #[arg(long, env = "SANDPOOL_CAPTURE_FILES", default_value_t = 4)]
    pub capture_files: usize,
    /// Responses the result cache keeps: identical requests are answered from it without
    /// running. 0 (the default) turns the cache off.
    #[arg(long, env = "SANDPOOL_RESULT_CACHE_ENTRIES", default_value_t = 0)]
    pub result_cache_entries: usize,
    /// Bytes the result cache may hold (responses' encoded sizes plus overhead).
    #[arg(long, env = "SANDPOOL_RESULT_CACHE_BYTES", default_value_t = 64 * MIB)]
    pub result_cache_bytes: u64,
    /// Also cache TIME_LIMIT_EXCEEDED, WALL_TIME_LIMIT_EXCEEDED and MEMORY_LIMIT_EXCEEDED
    /// for every request (otherwise only for requests with CACHE_POLICY_INCLUDE_LIMITS).
    #[arg(long, env = "SANDPOOL_RESULT_CACHE_LIMIT_VERDICTS")]
    pub result_cache_limit_verdicts: bool,

    #[arg(long, env = "SANDPOOL_DEFAULT_WALL_TIME_MS", default_value_t = 10_000)]
    pub default_wall_time_ms: u64,
    #[arg(long, env = "SANDPOOL_MAX_WALL_TIME_MS", default_value_t = 60_000)]
    pub max_wall_time_ms: u64,
    #[arg(long, env = "SANDPOOL_DEFAULT_CPU_TIME_MS", default_value_t = 10_000)]
    pub default_cpu_time_ms: u64,
    #[arg(long, env = "SANDPOOL_MAX_CPU_TIME_MS", default_value_t = 60_000)]
    pub max_cpu_time_ms: u64,
    #[arg(long, env = "SANDPOOL_DEFAULT_MEMORY_BYTES", default_value_t = 512 * MIB)]
    pub default_memory_bytes: u64,
    #[arg(long, env = "SANDPOOL_MAX_MEMORY_BYTES", default_value_t = 4096 * MIB)]
    pub max_memory_bytes: u64,
    #[arg(long, env = "SANDPOOL_DEFAULT_OUTPUT_BYTES", default_value_t = 8 * MIB)]
    pub default_output_bytes: u64,
    #[arg(long, env = "SANDPOOL_MAX_OUTPUT_BYTES", default_value_t = 64 * MIB)]
    pub max_output_bytes: u64,
    #[arg(long, env = "SANDPOOL_DEFAULT_PROCESSES", default_value_t = 256)]
    pub default_processes: u32,
    #[arg(long, env = "SANDPOOL_MAX_PROCESSES", default_value_t = 1024)]
    pub max_processes: u32,
    #[arg(long, env = "SANDPOOL_DEFAULT_FILE_SIZE_BYTES", default_value_t = 64 * MIB)]
    pub default_file_size_bytes: u64,
    #[arg(long, env = "SANDPOOL_MAX_FILE_SIZE_BYTES", default_value_t = 256 * MIB)]
    pub max_file_size_bytes: u64,
    /// Whether assert tests get the language's prelude (default imports, docs/judging.md) when a
    /// request leaves `options.prelude` unspecified; `off` matches reference harnesses.
    #[arg(long, env = "SANDPOOL_ASSERT_PRELUDE", value_enum, default_value = "on")]
    pub assert_prelude: OnOff,
    /// Compile-phase defaults for wall and CPU time, ms.
    #[arg(long, env = "SANDPOOL_COMPILE_TIME_MS", default_value_t = 30_000)]
    pub compile_time_ms: u64,
    /// Compile-phase default memory, bytes.
    #[arg(long, env = "SANDPOOL_COMPILE_MEMORY_BYTES", default_value_t = 2048 * MIB)]
    pub compile_memory_bytes: u64,

    /// Stateful sessions alive at once (default 64). Each has a uid and a cgroup of its own
    /// (uids after the slots': uid_base + slots + k) and takes a run slot only while a call
    /// of it runs. 0 turns sessions off.
    #[arg(long, env = "SANDPOOL_MAX_SESSIONS")]
    pub max_sessions: Option<usize>,
    /// Python interpreters kept started ahead of demand, so that a new session's first call
    /// does not wait for one to start (docs/sessions.md). Each holds a seat (the sandbox has
    /// --max-sessions plus this many) and room left in --session-memory-bytes; a create with
    /// the default limits and no files takes one. 0: none.
    #[arg(long, env = "SANDPOOL_SESSION_SPARES", default_value_t = 0)]
    pub session_spares: usize,
    /// What each open session is counted at, at least, against --session-memory-bytes, bytes.
    #[arg(long, env = "SANDPOOL_SESSION_IDLE_BYTES", default_value_t = crate::session::policy::DEFAULT_IDLE_BYTES)]
    pub session_idle_bytes: u64,
    /// Memory all sessions may hold together, measured from their cgroups (each counted at
    /// least at --session-idle-bytes); a create past it gets RESOURCE_EXHAUSTED, bytes
    /// (default: --max-sessions x --session-idle-bytes).
    #[arg(long, env = "SANDPOOL_SESSION_MEMORY_BYTES")]
    pub session_memory_bytes: Option<u64>,
    /// A session's default absolute lifetime, ms.
    #[arg(long, env = "SANDPOOL_SESSION_LIFETIME_MS", default_value_t = 30 * 60 * 1000)]
    pub session_lifetime_ms: u64,
    /// The longest lifetime a session may ask for, ms.
    #[arg(long, env = "SANDPOOL_MAX_SESSION_LIFETIME_MS", default_value_t = 4 * 3600 * 1000)]
    pub max_session_lifetime_ms: u64,
    /// A session's default idle timeout (no call for this long ends it), ms.
    #[arg(long, env = "SANDPOOL_SESSION_IDLE_TIMEOUT_MS", default_value_t = 5 * 60 * 1000)]
    pub session_idle_timeout_ms: u64,
    /// Pause a session (filesystem mode, into the session store) after this long without a
    /// call, ms; 0: never (idle sessions end at their idle timeout).
    #[arg(long, env = "SANDPOOL_SESSION_PAUSE_AFTER_IDLE_MS", default_value_t = 0)]
    pub session_pause_after_idle_ms: u64,
    /// On SIGTERM, pause every live session into the session store (filesystem mode) within
    /// the drain timeout, before exiting: its next call on any executor sharing the store
    /// resumes it. false: sessions end with the executor.
    #[arg(long, env = "SANDPOOL_SESSION_PAUSE_ON_DRAIN", default_value_t = true, action = clap::ArgAction::Set)]
    pub session_pause_on_drain: bool,
    /// How often this executor sweeps the session store: paused sessions and snapshots past
    /// their TTL (--session-store-ttl-secs), claims and blobs left without their metadata.
    /// Every executor sharing a store may sweep it (a sweep lists the whole store, so not too
    /// often). 0: never, seconds
    #[arg(long, env = "SANDPOOL_SESSION_STORE_SWEEP_SECS", default_value_t = 600)]
    pub session_store_sweep_secs: u64,
    /// The longest idle timeout a session may ask for, ms.
    #[arg(long, env = "SANDPOOL_MAX_SESSION_IDLE_TIMEOUT_MS", default_value_t = 3600 * 1000)]
    pub max_session_idle_timeout_ms: u64,
    /// A session's default number of calls.
    #[arg(long, env = "SANDPOOL_SESSION_CALLS", default_value_t = 1000)]
    pub session_calls: u32,
    /// The most calls a session may ask for.
    #[arg(long, env = "SANDPOOL_MAX_SESSION_CALLS", default_value_t = 100_000)]
    pub max_session_calls: u32,
    /// A session's default CPU time, all calls together, ms.
    #[arg(long, env = "SANDPOOL_SESSION_CPU_TIME_MS", default_value_t = 10 * 60 * 1000)]
    pub session_cpu_time_ms: u64,
    /// The most CPU time a session may ask for, ms.
    #[arg(long, env = "SANDPOOL_MAX_SESSION_CPU_TIME_MS", default_value_t = 3600 * 1000)]
    pub max_session_cpu_time_ms: u64,
    #[command(flatten)]
    pub session_store: SessionStoreArgs,
}

/// Where paused sessions and snapshots are kept (docs/sessions.md, "The session store").
/// Checked at start-up (no network call is made then).
#[derive(Debug, Clone, clap::Args)]
pub struct SessionStoreArgs {
    /// The local directory of the store (default: <--work-root>/session-store); in Kubernetes a
    /// PVC. Not with --session-store-s3-bucket.
    #[arg(long, env = "SANDPOOL_SESSION_STORE_DIR")]
    pub session_store_dir: Option<PathBuf>,
    /// Keep the store in this S3-compatible bucket instead (needs --session-store-key-file).
    #[arg(long, env = "SANDPOOL_SESSION_STORE_S3_BUCKET", conflicts_with = "session_store_dir")]
    pub session_store_s3_bucket: Option<String>,
    /// The S3 endpoint, `http(s)://host:port` (default: AWS's for the region).
    #[arg(long, env = "SANDPOOL_SESSION_STORE_S3_ENDPOINT")]
    pub session_store_s3_endpoint: Option<String>,
    #[arg(long, env = "SANDPOOL_SESSION_STORE_S3_REGION", default_value = "us-east-1")]
    pub session_store_s3_region: String,
    /// A directory with files `access_key_id` and `secret_access_key` (a Secret's mount);
    /// default: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
    #[arg(long, env = "SANDPOOL_SESSION_STORE_S3_CREDENTIALS_DIR")]
    pub session_store_s3_credentials_dir: Option<PathBuf>,
    /// Keys below this prefix in the directory or bucket.
    #[arg(long, env = "SANDPOOL_SESSION_STORE_PREFIX", default_value = "")]
    pub session_store_prefix: String,
    /// A file with the 32-byte key (raw, or 64 hex digits) the store's blobs are sealed with
    /// (XChaCha20-Poly1305). Required with S3; optional for a directory.
    #[arg(long, env = "SANDPOOL_SESSION_STORE_KEY_FILE")]
    pub session_store_key_file: Option<PathBuf>,
    /// Largest paused session or snapshot, bytes.
    #[arg(long, env = "SANDPOOL_SESSION_STORE_BLOB_BYTES", default_value_t = 1024 * MIB)]
    pub session_store_blob_bytes: u64,
    /// Bytes one tenant's paused sessions and snapshots may hold in the store in all.
    #[arg(long, env = "SANDPOOL_SESSION_STORE_TENANT_BYTES", default_value_t = 10 * 1024 * MIB)]
    pub session_store_tenant_bytes: u64,
    /// How long a paused session or snapshot is kept before the sweep deletes it, seconds.
    #[arg(long, env = "SANDPOOL_SESSION_STORE_TTL_SECS", default_value_t = 7 * 24 * 3600)]
    pub session_store_ttl_secs: u64,
    /// How long one call to the session store (a read of a record, a listing, a piece of an
    /// archive streaming in or out) may go unanswered before the pause, resume or listing
    /// that made it is refused as retryable (UNAVAILABLE, HTTP 503), ms. A resume fetches its
    /// archive before it takes a run slot, so a hung store holds no slot.
    #[arg(long, env = "SANDPOOL_SESSION_STORE_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub session_store_timeout_ms: u64,
}

impl SessionStoreArgs {
    /// The store's configuration, checked (no file or network is touched).
    pub fn config(
        &self,
        work_root: &std::path::Path,
    ) -> Result<sandpool_store::StoreConfig, sandpool_store::StoreError> {
        let backend = match &self.session_store_s3_bucket {
            Some(bucket) => sandpool_store::Backend::S3(sandpool_store::S3Config {
                endpoint: self.session_store_s3_endpoint.clone(),
                bucket: bucket.clone(),
                region: self.session_store_s3_region.clone(),
                credentials_dir: self.session_store_s3_credentials_dir.clone(),
            }),
            None => sandpool_store::Backend::Dir(
                self.session_store_dir
                    .clone()
                    .unwrap_or_else(|| work_root.join("session-store")),
            ),
        };
        let cfg = sandpool_store::StoreConfig {
            backend,
            prefix: self.session_store_prefix.clone(),
            key_file: self.session_store_key_file.clone(),
            max_blob_bytes: self.session_store_blob_bytes,
            tenant_quota_bytes: self.session_store_tenant_bytes,
            timeout: std::time::Duration::from_millis(self.session_store_timeout_ms),
        };
        cfg.check()?;
        Ok(cfg)
    }
}

/// A switch given as `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// Flags of the gRPC server binary.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "sandpool-executor",
    version,
    about = "Sandpool executor: runs untrusted code in sandboxes over gRPC"
)]
pub struct ServerArgs {
    /// gRPC address (sandpool.v1.Executor, grpc.health.v1, reflection).
    #[arg(long, env = "SANDPOOL_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// SandboxFusion-compatible HTTP address (off unless set).
    #[arg(long, env = "SANDPOOL_HTTP_LISTEN")]
    pub http_listen: Option<SocketAddr>,
    /// Prometheus /metrics address (off unless set).
    #[arg(long, env = "SANDPOOL_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Largest decoded request, bytes; larger ones get RESOURCE_EXHAUSTED.
    #[arg(long, env = "SANDPOOL_MAX_REQUEST_BYTES", default_value_t = 64 * MIB as usize)]
    pub max_request_bytes: usize,
    /// On SIGTERM, how long pausing the live sessions (--session-pause-on-drain) and the
    /// in-flight runs may take, together, before the executor exits anyway
    /// (default: a whole request at the ceilings, compile and run, plus 10 s: 2 x --max-wall-time-ms + 10 s).
    /// The pod's terminationGracePeriodSeconds must be longer.
    #[arg(long, env = "SANDPOOL_DRAIN_TIMEOUT_MS")]
    pub drain_timeout_ms: Option<u64>,
    /// A file holding the bearer token every gRPC Executor call and HTTP API call must carry
    /// (`authorization: Bearer <token>`); or set SANDPOOL_AUTH_TOKEN. Health, reflection,
    /// /v1/ping and /metrics stay open.
    #[arg(long, env = "SANDPOOL_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// A tenants file (TOML, docs/tenants.md): each tenant's token, weight and caps on this
    /// executor. Re-read every 2 s while running. Not with --auth-token-file.
    #[arg(long, env = "SANDPOOL_TENANTS_FILE")]
    pub tenants_file: Option<PathBuf>,
    /// HTTP: a request's headers must arrive within this (also an idle connection's next request), ms.
    #[arg(long, env = "SANDPOOL_HTTP_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub http_header_timeout_ms: u64,
    /// HTTP: a request's whole body must arrive within this, ms (408 otherwise).
    #[arg(long, env = "SANDPOOL_HTTP_BODY_TIMEOUT_MS", default_value_t = 60_000)]
    pub http_body_timeout_ms: u64,
    /// HTTP: connections served at once; more wait to be accepted.
    #[arg(long, env = "SANDPOOL_HTTP_MAX_CONNECTIONS", default_value_t = 1024)]
    pub http_max_connections: usize,
    /// gRPC: connections served at once; more wait to be accepted.
    #[arg(long, env = "SANDPOOL_GRPC_MAX_CONNECTIONS", default_value_t = 1024)]
    pub grpc_max_connections: usize,
    /// Exit (status 70, with a termination message) when the async runtime has not run for
    /// this long, seconds: a wedged executor answers no probe, so it ends. 0: never.
    #[arg(long, env = "SANDPOOL_WATCHDOG_STALL_SECS", default_value_t = 30)]
    pub watchdog_stall_secs: u64,
    /// gRPC: a connection whose client has not sent the HTTP/2 preface and its first frame
    /// header within this is closed, ms (a socket that sends one byte, then nothing, included).
    #[arg(long, env = "SANDPOOL_GRPC_SILENT_TIMEOUT_MS", default_value_t = 10_000)]
    pub grpc_silent_timeout_ms: u64,
    /// gRPC: a call's request (every call but EvaluateStream's) must have arrived whole
    /// within this, ms; a client that sends part of one and stalls holds its share of
    /// --max-inflight-bytes that long at most.
    #[arg(long, env = "SANDPOOL_GRPC_BODY_TIMEOUT_MS", default_value_t = 60_000)]
    pub grpc_body_timeout_ms: u64,
    /// gRPC: calls in flight at once on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
    #[arg(long, env = "SANDPOOL_GRPC_MAX_STREAMS", default_value_t = 1024)]
    pub grpc_max_streams: u32,
    /// "host:port" a session's create response names as its executor, for clients to
    /// send the session's later calls to (default: $POD_IP with the --listen port, else
    /// the --listen address; an unspecified listen IP becomes the host name).
    #[arg(long, env = "SANDPOOL_ADVERTISE_ADDRESS")]
    pub advertise_address: Option<String>,
    /// Log as JSON lines.
    #[arg(long, env = "SANDPOOL_LOG_JSON")]
    pub log_json: bool,
    #[command(flatten)]
    pub executor: ExecutorArgs,
}

impl ServerArgs {
    /// Drain timeout as a duration: a request's compile and run at the ceilings, and a margin,
    /// unless set.
    pub fn drain_timeout(&self) -> Duration {
        let whole_request = self.executor.max_wall_time_ms.saturating_mul(2).saturating_add(10_000);
        Duration::from_millis(self.drain_timeout_ms.unwrap_or(whole_request))
    }

    /// Who may call and on what terms: the tenants file's table, the single token's one
    /// tenant, or open (no auth). Files runs could read are refused.
    pub fn tenants(&self) -> Result<std::sync::Arc<crate::tenants::Tenants>, crate::auth::AuthError> {
        let ro: Vec<PathBuf> = self.executor.ro_paths.iter().map(PathBuf::from).collect();
        let restricted = self.executor.isolation == IsolationMode::Restricted;
        if let Some(file) = &self.tenants_file {
            if self.auth_token_file.is_some() || std::env::var("SANDPOOL_AUTH_TOKEN").is_ok_and(|v| !v.is_empty()) {
                return Err(crate::auth::AuthError::TenantsAndToken);
            }
            let tenants = crate::tenants::Tenants::from_file(file)?;
            if restricted {
                crate::auth::check_out_of_reach(file, &ro)?;
                for f in tenants.table().token_files() {
                    crate::auth::check_out_of_reach(f, &ro)?;
                }
                // And every table reloaded later: a token file moved under them is refused.
                tenants.refuse_files_under(ro);
            }
            return Ok(tenants);
        }
        if let (true, Some(file)) = (restricted, &self.auth_token_file) {
            crate::auth::check_out_of_reach(file, &ro)?;
        }
        if let Some(file) = &self.auth_token_file {
            if std::env::var("SANDPOOL_AUTH_TOKEN").is_ok_and(|v| !v.is_empty()) {
                return Err(crate::auth::AuthError::Both);
            }
            // From a file: re-read while running, so a rotated Secret needs no restart.
            let tenants = crate::tenants::Tenants::from_token_file(file).map_err(|e| match e {
                crate::tenants::TenantsError::Read(f, e) => crate::auth::AuthError::Read(f, e),
                _ => crate::auth::AuthError::Empty(file.display().to_string()),
            })?;
            if restricted {
                tenants.refuse_files_under(ro);
            }
            return Ok(tenants);
        }
        let token = crate::auth::Token::load(
            self.auth_token_file.as_deref(),
            std::env::var("SANDPOOL_AUTH_TOKEN").ok(),
        )?;
        Ok(token.map_or_else(crate::tenants::Tenants::open, crate::auth::Token::into_tenants))
    }

    /// The address sessions advertise (see `--advertise-address`).
    pub fn advertise(&self) -> String {
        advertise_address(
            self.advertise_address.as_deref(),
            std::env::var("POD_IP").ok().as_deref(),
            self.listen,
        )
    }

    /// The HTTP server's settings.
    pub fn http_options(&self) -> crate::http::HttpOptions {
        crate::http::HttpOptions {
            max_body_bytes: self.max_request_bytes,
            header_timeout: Duration::from_millis(self.http_header_timeout_ms.max(1)),
            body_timeout: Duration::from_millis(self.http_body_timeout_ms.max(1)),
            max_connections: self.http_max_connections.max(1),
            // The server's, filled in when it starts (crate::server::serve).
            tenants: None,
            // The engine's, filled in when the server starts (crate::http::serve_on).
            budget: None,
            // The server's, filled in when it starts (crate::server::serve_with_http).
            sessions: None,
        }
    }
}

/// The address clients reach this executor at: `flag` if set, else `pod_ip` with the
/// listen port, else the listen address (an unspecified IP replaced by the host name).
pub fn advertise_address(flag: Option<&str>, pod_ip: Option<&str>, listen: SocketAddr) -> String {
    if let Some(a) = flag.filter(|a| !a.is_empty()) {
        return a.to_owned();
    }
    let host = match pod_ip.filter(|p| !p.is_empty()) {
        Some(ip) => ip.to_owned(),
        None if listen.ip().is_unspecified() => nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".into()),
        None => return listen.to_string(),
    };
    // An IPv6 literal needs brackets before the port.
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{}", listen.port())
    } else {
        format!("{host}:{}", listen.port())
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

fn gpu_devices(force: bool) -> Vec<PathBuf> {
    let devs: Vec<PathBuf> = std::fs::read_dir("/dev")
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("nvidia"))
                        && !p.is_dir()
                })
                .collect()
        })
        .unwrap_or_default();
    if force || !devs.is_empty() { devs } else { vec![] }
}

impl ExecutorArgs {
    /// The sandbox part of the configuration.
    pub fn sandbox_config(&self) -> SandboxConfig {
        let slots = self.slots.unwrap_or_else(cpus).max(1);
        SandboxConfig {
            mode: self.isolation,
            network: self.network_isolation,
            work_root: self.work_root.clone(),
            ro_paths: self.ro_paths.iter().map(PathBuf::from).collect(),
            slots,
            // Sessions run only in namespaces mode (docs/sessions.md).
            seats: match self.isolation {
                IsolationMode::Namespaces => self.max_sessions() + self.session_spares,
                IsolationMode::Restricted => 0,
            },
            uid_base: self.uid_base,
            gpu_devices: gpu_devices(self.gpu),
            // The sessions' budget is also their ceiling while they run (docs/sessions.md,
            // "Memory"), with the spares beside it as the operator sizes the pod.
            seat_memory: Some(sandpool_sandbox::SeatMemory {
                ceiling: self
                    .session_memory_budget()
                    .saturating_add((self.session_spares as u64).saturating_mul(self.session_idle_bytes)),
                floor: self.session_idle_bytes,
            }),
            work_dir_bytes: self.work_dir_bytes,
            tmp_bytes: self.tmp_bytes,
            shared_dir: Some(self.work_root.join("shared")),
        }
    }

    /// `--session-memory-bytes`, or its default: every session at the idle bytes.
    pub fn session_memory_budget(&self) -> u64 {
        self.session_memory_bytes
            .unwrap_or((self.max_sessions() as u64).saturating_mul(self.session_idle_bytes))
    }

    /// Sessions alive at once: `--max-sessions`, or its default.
    pub fn max_sessions(&self) -> usize {
        self.max_sessions
            .unwrap_or(crate::session::policy::DEFAULT_MAX_SESSIONS)
    }

    /// Default and ceiling limits.
    pub fn policy(&self) -> LimitPolicy {
        let ms = Duration::from_millis;
        let run_defaults = Limits {
            wall: ms(self.default_wall_time_ms),
            cpu: ms(self.default_cpu_time_ms),
            memory: self.default_memory_bytes,
            output: self.default_output_bytes,
            processes: self.default_processes,
            file_size: self.default_file_size_bytes,
        };
        let max = Limits {
            wall: ms(self.max_wall_time_ms),
            cpu: ms(self.max_cpu_time_ms),
            memory: self.max_memory_bytes,
            output: self.max_output_bytes,
            processes: self.max_processes,
            file_size: self.max_file_size_bytes,
        };
        let compile_defaults = Limits {
            wall: ms(self.compile_time_ms),
            cpu: ms(self.compile_time_ms),
            memory: self.compile_memory_bytes,
            ..run_defaults
        };
        LimitPolicy {
            run_defaults,
            compile_defaults,
            max,
        }
    }

    /// Session cap, defaults and ceilings.
    pub fn session_policy(&self) -> crate::session::SessionPolicy {
        let ms = Duration::from_millis;
        let max_sessions = self.max_sessions();
        crate::session::SessionPolicy {
            max_sessions,
            spares: self.session_spares,
            idle_bytes: self.session_idle_bytes,
            memory_budget: self.session_memory_budget(),
            lifetime: ms(self.session_lifetime_ms),
            max_lifetime: ms(self.max_session_lifetime_ms),
            idle: ms(self.session_idle_timeout_ms),
            max_idle: ms(self.max_session_idle_timeout_ms),
            pause_after_idle: (self.session_pause_after_idle_ms > 0).then(|| ms(self.session_pause_after_idle_ms)),
            pause_on_drain: self.session_pause_on_drain,
            store_sweep: (self.session_store_sweep_secs > 0)
                .then(|| std::time::Duration::from_secs(self.session_store_sweep_secs)),
            calls: self.session_calls,
            max_calls: self.max_session_calls,
            cpu: ms(self.session_cpu_time_ms),
            max_cpu: ms(self.max_session_cpu_time_ms),
            uid_base: self.uid_base,
        }
    }

    /// Bad-case capture, when --capture-dir is set.
    pub fn capture(&self) -> Result<Option<crate::capture::Capture>, crate::capture::CaptureError> {
        let Some(dir) = &self.capture_dir else {
            return Ok(None);
        };
        let cfg = crate::capture::CaptureConfig {
            dir: dir.clone(),
            verdicts: crate::capture::parse_verdicts(&self.capture_verdicts)?,
            max_bytes: self.capture_max_bytes,
            files: self.capture_files,
        };
        crate::capture::Capture::start(cfg).map(Some)
    }

    /// The engine part of the configuration (without capture; see [`ExecutorArgs::capture`]).
    pub fn engine_config(&self) -> EngineConfig {
        let slots = self.slots.unwrap_or_else(cpus).max(1);
        let name = std::env::var("SANDPOOL_NAME")
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()))
            .unwrap_or_else(|| "sandpool-executor".into());
        EngineConfig {
            policy: self.policy(),
            queue_capacity: self.queue.unwrap_or(4 * slots),
            fetch_file_bytes: self.fetch_file_bytes,
            fetch_total_bytes: self.fetch_total_bytes,
            inflight_bytes: self.max_inflight_bytes,
            work_dir_bytes: self.work_dir_bytes,
            identity: Identity {
                name,
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
            capture: None,
            warm_starts: self.warm_starts,
            assert_prelude: self.assert_prelude == OnOff::On,
            result_cache: (self.result_cache_entries > 0).then_some(crate::result_cache::CacheConfig {
                entries: self.result_cache_entries,
                bytes: self.result_cache_bytes,
                limit_verdicts: self.result_cache_limit_verdicts,
            }),
        }
    }

    /// Builds the whole engine: sandbox, language table, probes.
    pub async fn build_engine(&self) -> Result<crate::engine::Engine, StartError> {
        let mut table = crate::languages::LanguageTable::load(self.languages.as_deref())?;
        if !self.enable_languages.is_empty() {
            table.retain(&self.enable_languages);
        }
        if self.isolation == IsolationMode::Restricted {
            table.use_restricted_commands();
        }
        let mut sandbox_config = self.sandbox_config();
        check_uids(sandbox_config.uid_base, sandbox_config.slots + sandbox_config.seats)?;
        for (lang, dir) in table.expose_own_import_dirs(&mut sandbox_config.ro_paths) {
            tracing::info!(language = %lang, dir = %dir.display(), "import_dirs entry not found; skipped");
        }
        let python_path = crate::languages::expose_import_dirs(&self.python_path, &mut sandbox_config.ro_paths)?;
        table.add_import_dirs("PYTHONPATH", &python_path);
        let mut cfg = self.engine_config();
        cfg.capture = self.capture()?;
        let sandbox = sandpool_sandbox::open(sandbox_config)?;
        let engine = crate::engine::Engine::new(sandbox, table, cfg).await;
        enabled_languages_work(&self.enable_languages, &engine)?;
        Ok(engine)
    }
}

/// Languages named with `--enable-languages` (a pool's `spec.languages`) are a promise: one
/// the table lacks or the image cannot run stops the executor with a message naming it and
/// why, instead of serving a pool that answers "unavailable" to every request for it. The
/// message is what `kubectl describe sbp` quotes from the crash-looping container.
fn enabled_languages_work(enabled: &[String], engine: &crate::engine::Engine) -> Result<(), StartError> {
    use crate::languages::Availability;
    let mut missing = Vec::new();
    for name in enabled {
        let found = engine.languages().get(name).map(|l| engine.availability().get(&l.name));
        match found {
            None => missing.push(format!("{name}: not in the language table")),
            Some(Some(Availability::Available { .. })) => {}
            Some(Some(Availability::Unavailable { reason })) => missing.push(format!("{name}: {reason}")),
            Some(None) => missing.push(format!("{name}: not probed")),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(StartError::LanguagesUnavailable(missing.join("; ")))
    }
}

/// Why the executor could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Table(#[from] crate::languages::TableError),
    #[error("starting the sandbox: {0}")]
    Sandbox(#[from] sandpool_sandbox::SandboxError),
    #[error(transparent)]
    Capture(#[from] crate::capture::CaptureError),
    #[error("--enable-languages names languages this executor cannot run: {0}")]
    LanguagesUnavailable(String),
    #[error("{0}")]
    Uids(String),
}

/// The sandbox's uids, `uid_base` and the `n` after it (slots, then session seats), must be
/// unprivileged and nobody else's: not root, not `nobody` (65534, which the host's own
/// daemons may run as), and within a uid's 32 bits.
fn check_uids(uid_base: u32, n: usize) -> Result<(), StartError> {
    let last = u64::from(uid_base) + n as u64;
    let bad = if uid_base == 0 {
        Some("includes root (0)")
    } else if last > u64::from(u32::MAX) {
        Some("runs past the largest uid")
    } else if (u64::from(uid_base)..last).contains(&65534) {
        Some("includes nobody (65534)")
    } else {
        None
    };
    match bad {
        Some(why) => Err(StartError::Uids(format!(
            "the sandbox's uids {uid_base}..{last} (--uid-base, one per slot and per session, --max-sessions) {why}: choose another --uid-base"
        ))),
        None => Ok(()),
    }
}

/// Whether log lines written to `out` get colour codes: only on a terminal, and never
/// with `NO_COLOR` set (no-color.org). Logs a pod writes go to `kubectl logs` and the
/// container's termination message, where escape codes are noise.
pub fn colour(out: &impl std::io::IsTerminal) -> bool {
    out.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::{advertise_address, check_uids};

    #[test]
    fn the_sandbox_uids_stay_clear_of_root_and_nobody() {
        assert!(check_uids(60000, 16 + 64).is_ok());
        let e = check_uids(65000, 16 + 1000).unwrap_err().to_string();
        assert!(e.contains("nobody (65534)") && e.contains("--max-sessions"), "{e}");
        assert!(check_uids(0, 4).unwrap_err().to_string().contains("root"));
        assert!(
            check_uids(u32::MAX - 10, 64)
                .unwrap_err()
                .to_string()
                .contains("largest uid")
        );
    }

    #[test]
    fn advertised_address_prefers_the_flag_then_the_pod_ip() {
        let l = "0.0.0.0:50051".parse().unwrap();
        assert_eq!(
            advertise_address(Some("exec-0.pool:7000"), Some("10.0.0.5"), l),
            "exec-0.pool:7000"
        );
        assert_eq!(advertise_address(None, Some("10.0.0.5"), l), "10.0.0.5:50051");
        assert_eq!(advertise_address(Some(""), Some("fd00::5"), l), "[fd00::5]:50051");
        let lo = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(advertise_address(None, None, lo), "127.0.0.1:4000");
        assert!(advertise_address(None, None, l).ends_with(":50051"));
    }
}
