//! A blob's metadata: written by the executor beside the blob (never by a session), as JSON.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How much of a session a blob keeps (docs/sessions.md): the sandbox's code made it, the
/// store only records which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `/work` only; the interpreter starts cold.
    Filesystem,
    /// `/work` and the interpreter's state that could be serialised.
    Full,
}

/// What the caller says about a blob it stores.
#[derive(Debug, Clone)]
pub struct PutOptions {
    pub mode: Mode,
    /// Deleted by the sweep this long after it was stored.
    pub ttl: Duration,
    /// The session it belongs to: deleted with it ([`crate::Store::delete_session`]).
    pub session: Option<String>,
    /// What its writer records of the session beside the blob (the executor's own JSON, never
    /// the session's): enough to resume it on any executor sharing the store.
    pub record: Option<serde_json::Value>,
}

/// A stored blob's metadata.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    /// Bytes the caller stored (before sealing).
    pub size: u64,
    /// Bytes the store holds for it (after sealing): what the tenant's quota counts.
    pub stored: u64,
    /// When it was stored, seconds since the epoch.
    pub created_unix: u64,
    /// Its time to live, seconds.
    pub ttl_secs: u64,
    pub mode: Mode,
    /// Whether it is sealed (a store with a key seals every blob and opens only sealed ones).
    pub sealed: bool,
    pub session: Option<String>,
    /// [`PutOptions::record`]. Absent in metadata written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<serde_json::Value>,
}

impl Meta {
    pub fn created(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.created_unix)
    }

    /// Whether its TTL has passed at `now`.
    pub fn expired(&self, now: SystemTime) -> bool {
        self.created() + Duration::from_secs(self.ttl_secs) <= now
    }
}

pub(crate) fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
