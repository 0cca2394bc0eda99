//! Where a request's work runs: request-shaped work off the async runtime ([`blocking`]),
//! and every wait bounded by the call's deadline ([`until`]). A leaf, shared by the engine,
//! the judge and sessions.

use crate::error::ExecError;

/// Runs `f` on the blocking pool: request-shaped work (validating thousands of paths,
/// writing or reading megabytes) must never hold up the async runtime that serves everyone.
///
/// The work is registered with the watchdog while it runs: work that never returns (it
/// should never wait on anything a sandbox controls) turns liveness NOT_SERVING.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, ExecError> {
    tokio::task::spawn_blocking(move || {
        let _job = crate::watchdog::BLOCKING.start();
        f()
    })
    .await
    .map_err(|e| ExecError::Internal(format!("request worker failed: {e}")))
}

/// The most request bytes (code, stdin, files) and paths [`small_request`] lets a request's
/// preparation run inline: hashing or writing 64 KiB into a tmpfs takes microseconds, less
/// than the two thread hops to the blocking pool and back it saves.
const INLINE_BYTES: usize = 64 << 10;
const INLINE_PATHS: usize = 16;

/// True when an Execute request is small enough to validate, key and write inline (see
/// [`blocking_unless`]).
pub fn small_request(req: &sandpool_proto::v1::ExecuteRequest) -> bool {
    let bytes = req.code.len() + req.stdin.len() + req.files.iter().map(|f| f.content.len()).sum::<usize>();
    bytes <= INLINE_BYTES && req.files.len() + req.fetch_files.len() <= INLINE_PATHS
}

/// Runs `f` inline when `inline` (work known to be small: a few files of a few KiB), else
/// on the blocking pool like [`blocking`].
pub async fn blocking_unless<T: Send + 'static>(
    inline: bool,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ExecError> {
    if inline { Ok(f()) } else { blocking(f).await }
}

/// Drops `held` on the blocking pool, without waiting, its parts in order: a run's detached
/// work dir first (its tmpfs goes with an RCU grace period), then what others wait on for it
/// (see [`crate::engine::Engine::release`]); the caller's response does not wait.
pub fn drop_later<T: Send + 'static>(held: T) {
    drop(tokio::task::spawn_blocking(move || {
        let _job = crate::watchdog::BLOCKING.start();
        drop(held)
    }));
}

/// Awaits `fut`, or DEADLINE_EXCEEDED at `deadline`.
pub async fn until<T>(deadline: Option<tokio::time::Instant>, fut: impl Future<Output = T>) -> Result<T, ExecError> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, fut)
            .await
            .map_err(|_| ExecError::DeadlineExceeded),
        None => Ok(fut.await),
    }
}
