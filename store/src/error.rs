//! The store's errors: each names what was refused and why, so the session code can map it to
//! a status (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, NOT_FOUND, DATA_LOSS, UNAVAILABLE).

/// What went wrong with a store call.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A key's part is malformed (it could name a path outside the store).
    #[error("invalid {field}: {reason}")]
    InvalidKey { field: &'static str, reason: String },
    /// The store's configuration is unusable.
    #[error("session store configuration: {0}")]
    Config(String),
    /// No blob under this key.
    #[error("no stored blob {0}")]
    NotFound(String),
    /// Another taker holds the blob's claim ([`crate::Store::claim`]): it is being resumed
    /// elsewhere.
    #[error("blob {0} is claimed by another executor")]
    Claimed(String),
    /// The blob is larger than one blob may be.
    #[error("blob {key} is over the store's limit of {limit} bytes per blob (--session-store-blob-bytes)")]
    BlobTooLarge { key: String, limit: u64 },
    /// Storing the blob would take the tenant past its quota.
    #[error(
        "tenant {tenant}'s session store quota of {quota} bytes would be exceeded \
         ({used} bytes stored or being stored; --session-store-tenant-bytes)"
    )]
    QuotaExceeded { tenant: String, quota: u64, used: u64 },
    /// The blob cannot be decrypted: a wrong key, or it was altered, truncated or swapped.
    #[error("blob {key} cannot be opened: {reason}")]
    Sealed { key: String, reason: String },
    /// The stored metadata or blob is not what the store wrote (unsealed stores only detect
    /// what the metadata shows, such as a size that differs).
    #[error("blob {key} is damaged: {reason}")]
    Corrupt { key: String, reason: String },
    /// Reading the blob's input or writing its output failed.
    #[error("blob {key}: {source}")]
    Io {
        key: String,
        #[source]
        source: std::io::Error,
    },
    /// A backend call did not answer in time ([`crate::StoreConfig::timeout`]).
    #[error("session store: {op} did not answer within {} s (--session-store-timeout-ms)", after.as_secs_f64())]
    TimedOut {
        op: &'static str,
        after: std::time::Duration,
    },
    /// The backend failed (unreachable, refused, ...).
    #[error("session store backend: {0}")]
    Backend(#[from] object_store::Error),
}

impl StoreError {
    pub(crate) fn sealed(key: impl ToString, reason: impl Into<String>) -> StoreError {
        StoreError::Sealed {
            key: key.to_string(),
            reason: reason.into(),
        }
    }
}
