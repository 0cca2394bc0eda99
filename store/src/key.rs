//! What a blob is stored under: its tenant, its kind and its id, each checked before any
//! backend sees it, so that no key names a path outside the store's prefix.

use crate::error::StoreError;
use std::fmt;

/// Longest tenant name (the tenants file's names are at most 63 bytes).
pub const MAX_TENANT_BYTES: usize = 63;
/// Longest id (a session id is 32 hex characters, `-` and a pod's name of up to 63).
pub const MAX_ID_BYTES: usize = 200;

/// Which of a tenant's blobs: a paused session (one per session) or a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Paused,
    Snapshot,
}

impl Kind {
    pub(crate) fn dir(self) -> &'static str {
        match self {
            Kind::Paused => "paused",
            Kind::Snapshot => "snapshots",
        }
    }
}

/// A checked key: `tenant` and `id` are safe as single path segments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlobKey {
    tenant: String,
    kind: Kind,
    id: String,
}

impl BlobKey {
    /// A key for `tenant`'s blob `id` of `kind`; refused with the offending field named.
    pub fn new(tenant: &str, kind: Kind, id: &str) -> Result<BlobKey, StoreError> {
        check_tenant(tenant)?;
        check_id("id", id)?;
        Ok(BlobKey {
            tenant: tenant.to_owned(),
            kind,
            id: id.to_owned(),
        })
    }

    pub fn paused(tenant: &str, session_id: &str) -> Result<BlobKey, StoreError> {
        BlobKey::new(tenant, Kind::Paused, session_id)
    }

    pub fn snapshot(tenant: &str, snapshot_id: &str) -> Result<BlobKey, StoreError> {
        BlobKey::new(tenant, Kind::Snapshot, snapshot_id)
    }

    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The key's path below the store's prefix, without the object's suffix.
    pub(crate) fn rel(&self) -> String {
        format!("{}/{}/{}", self.tenant, self.kind.dir(), self.id)
    }
}

impl fmt::Display for BlobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rel())
    }
}

/// A tenant name as the tenants file has them: lowercase letters, digits and `-`, neither
/// first nor last.
pub(crate) fn check_tenant(t: &str) -> Result<(), StoreError> {
    let b = t.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty()
        || b.len() > MAX_TENANT_BYTES
        || !b.iter().all(|c| ok(c) || *c == b'-')
        || !b.first().is_some_and(ok)
        || !b.last().is_some_and(ok)
    {
        return Err(StoreError::InvalidKey {
            field: "tenant",
            reason: format!("{t:?} is not 1-{MAX_TENANT_BYTES} of a-z, 0-9 and '-' (not first or last)"),
        });
    }
    Ok(())
}

/// An id: ASCII letters, digits, `-`, `_` and `.`, starting with a letter or digit (so never
/// `.` or `..`), and no `/` (so one path segment).
pub(crate) fn check_id(field: &'static str, id: &str) -> Result<(), StoreError> {
    let b = id.as_bytes();
    if b.is_empty()
        || b.len() > MAX_ID_BYTES
        || !b.first().is_some_and(u8::is_ascii_alphanumeric)
        || !b
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    {
        return Err(StoreError::InvalidKey {
            field,
            reason: format!(
                "{id:?} is not 1-{MAX_ID_BYTES} of A-Z, a-z, 0-9, '-', '_' and '.' starting with a letter or digit"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_leave_their_directory_are_refused() {
        for bad in [
            "",
            "..",
            ".",
            "../x",
            "a/b",
            "a/../../etc",
            "/abs",
            ".hidden",
            "a\0b",
            "a b",
            "é",
        ] {
            let err = BlobKey::paused("t1", bad).unwrap_err();
            assert!(err.to_string().contains("id"), "{bad:?}: {err}");
        }
        for bad in ["", "..", "A", "-a", "a-", "a/b", "a_b", &"a".repeat(64)] {
            let err = BlobKey::paused(bad, "s1").unwrap_err();
            assert!(err.to_string().contains("tenant"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn session_ids_and_tenant_names_are_accepted() {
        let k = BlobKey::snapshot("team-a", "0123456789abcdef0123456789abcdef-sandpool-exec-7d9f.0").unwrap();
        assert_eq!(
            k.rel(),
            "team-a/snapshots/0123456789abcdef0123456789abcdef-sandpool-exec-7d9f.0"
        );
    }
}
