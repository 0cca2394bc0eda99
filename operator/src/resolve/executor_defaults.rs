//! The executor's own flag defaults (`executor/src/config.rs`, `ExecutorArgs`) that the
//! operator relies on: what applies when a pool leaves a limit unset, which flags it may
//! leave out, and how it words "the executor's default" in its messages.
//!
//! The operator does not depend on the executor crate (its gRPC server and sandbox would
//! come with it), so these are copies; `tests/tests/executor_defaults.rs` fails when one
//! drifts from the executor's, through [`flags`].

/// `--default-wall-time-ms`.
pub const WALL_TIME_MS: u64 = 10_000;
/// `--max-wall-time-ms`: also the pool's maximum when `limits.maxWallTime` is unset.
pub const MAX_WALL_TIME_MS: u64 = 60_000;
/// `--default-cpu-time-ms` and `--max-cpu-time-ms`.
pub const CPU_TIME_MS: (u64, u64) = (10_000, 60_000);
/// `--default-memory-bytes` and `--max-memory-bytes`.
pub const MEMORY_BYTES: (u64, u64) = (512 << 20, 4096 << 20);
/// `--default-output-bytes` and `--max-output-bytes`.
pub const OUTPUT_BYTES: (u64, u64) = (8 << 20, 64 << 20);
/// `--default-processes` and `--max-processes`.
pub const PROCESSES: (u64, u64) = (256, 1024);
/// `--result-cache-bytes`: a pool's cache size when it enables the cache without `maxBytes`.
pub const RESULT_CACHE_BYTES: u64 = 64 << 20;
/// `--result-cache-limit-verdicts`: the operator writes the flag only to turn it on.
pub const RESULT_CACHE_LIMIT_VERDICTS: bool = false;
/// `--warm-starts`: the operator writes the flag only to turn warm starts off.
pub const WARM_STARTS: bool = true;
/// `--session-idle-bytes`: what a session counts at against its pod's budget (the operator
/// always writes it, from `spec.sessions.idleMemory` or this).
pub const SESSION_IDLE_BYTES: u64 = 32 << 20;
/// `--work-dir-bytes`: how much one run or session may write under `/work`; the operator
/// never sets it, and estimates a session's pause from it (`resolve::pool`).
pub const WORK_DIR_BYTES: u64 = 256 << 20;

/// Every default above as `(executor flag, its default as the flag would take it)`, so one
/// test can hold them all against the executor's.
pub fn flags() -> Vec<(&'static str, String)> {
    vec![
        ("--default-wall-time-ms", WALL_TIME_MS.to_string()),
        ("--max-wall-time-ms", MAX_WALL_TIME_MS.to_string()),
        ("--default-cpu-time-ms", CPU_TIME_MS.0.to_string()),
        ("--max-cpu-time-ms", CPU_TIME_MS.1.to_string()),
        ("--default-memory-bytes", MEMORY_BYTES.0.to_string()),
        ("--max-memory-bytes", MEMORY_BYTES.1.to_string()),
        ("--default-output-bytes", OUTPUT_BYTES.0.to_string()),
        ("--max-output-bytes", OUTPUT_BYTES.1.to_string()),
        ("--default-processes", PROCESSES.0.to_string()),
        ("--max-processes", PROCESSES.1.to_string()),
        ("--result-cache-bytes", RESULT_CACHE_BYTES.to_string()),
        ("--result-cache-limit-verdicts", RESULT_CACHE_LIMIT_VERDICTS.to_string()),
        ("--warm-starts", WARM_STARTS.to_string()),
        ("--session-idle-bytes", SESSION_IDLE_BYTES.to_string()),
        ("--work-dir-bytes", WORK_DIR_BYTES.to_string()),
    ]
}
