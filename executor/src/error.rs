//! The request error every layer returns ([`ExecError`]), and the rule that keeps host
//! paths out of what callers see ([`scrub_host_paths`]). A leaf: the engine, the judge,
//! sessions, the result cache and validation all speak it, and it names none of them.

use crate::admission::AdmissionError;
use crate::limits::LimitError;

/// Errors that reject a request before or instead of running it.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{field}: {message}")]
    InvalidArgument { field: String, message: String },
    #[error("language {0:?} is not available on this executor: {1}")]
    Unavailable(String, String),
    #[error(transparent)]
    Admission(#[from] AdmissionError),
    /// The request asked for more than its tenant may have (PERMISSION_DENIED, HTTP 403).
    #[error(transparent)]
    Priority(#[from] crate::tenants::PriorityDenied),
    #[error("deadline exceeded while running")]
    DeadlineExceeded,
    /// The executor holds its byte budget's worth for other callers (see [`crate::budget`]).
    #[error(transparent)]
    Budget(#[from] crate::budget::Exhausted),
    #[error("internal error: {0}")]
    Internal(String),
}

impl ExecError {
    /// An INVALID_ARGUMENT naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ExecError::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<LimitError> for ExecError {
    fn from(e: LimitError) -> Self {
        ExecError::InvalidArgument {
            field: e.field().to_owned(),
            message: e.to_string(),
        }
    }
}

/// A sandbox failure's message without host paths (cgroup directories, the work root):
/// clients see the file's name, the executor's log keeps the whole path.
pub fn scrub_host_paths(msg: &str) -> String {
    msg.split(' ')
        .map(|w| {
            if w.starts_with('/') && w.len() > 1 && w[1..].contains('/') {
                let (base, tail) = match w.find([':', ',', ')']) {
                    Some(i) => w.split_at(i),
                    None => (w, ""),
                };
                let name = base.rsplit('/').find(|c| !c.is_empty()).unwrap_or("");
                format!("{name}{tail}")
            } else {
                w.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::scrub_host_paths;

    #[test]
    fn host_paths_leave_only_their_file_name() {
        let m = "/sys/fs/cgroup/memory/pod/x/slot-0/memory.limit_in_bytes: Device or resource busy (os error 16)";
        assert_eq!(
            scrub_host_paths(m),
            "memory.limit_in_bytes: Device or resource busy (os error 16)"
        );
        assert_eq!(
            scrub_host_paths("work dir main.py/x: creating: Not a directory"),
            "work dir main.py/x: creating: Not a directory"
        );
        assert_eq!(
            scrub_host_paths("could not start /usr/bin/python3: ENOENT"),
            "could not start python3: ENOENT"
        );
    }
}
