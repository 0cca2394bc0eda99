//! Why a session call was refused: NOT_FOUND, RESOURCE_EXHAUSTED, a reset, or the engine's own errors.

use crate::error::ExecError;

/// Why a session call was refused.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(
        "no such session: unknown, closed or expired (sessions live on one executor; a restarted executor has none)"
    )]
    NotFound,
    #[error("{0}")]
    Exhausted(String),
    /// The session is paused (gRPC FAILED_PRECONDITION).
    #[error("session paused: resume it with ResumeSession (E2B: connect) first, or create sessions with auto_resume")]
    Paused,
    /// The session's interpreter died between calls (killed at the sessions' memory ceiling,
    /// or it exited): its variables are gone. The call did not run; the next one runs in a
    /// fresh interpreter (gRPC FAILED_PRECONDITION, E2B the cell's error).
    #[error("session reset: {0}")]
    Reset(String),
    /// Not served here now, but a retry is (gRPC UNAVAILABLE, HTTP 503): the session was
    /// paused by this executor's drain, or another executor is resuming it.
    #[error("{0}")]
    Retry(String),
    #[error(transparent)]
    Exec(#[from] ExecError),
}

impl From<crate::admission::AdmissionError> for SessionError {
    fn from(e: crate::admission::AdmissionError) -> Self {
        SessionError::Exec(e.into())
    }
}
