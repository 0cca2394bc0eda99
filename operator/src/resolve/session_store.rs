//! `spec.sessions`' store, auto-pause and grace override: where paused sessions are kept and
//! the executor flags that say so.

use super::invalid::InvalidSpec;
use crate::crd::{SecretKeyRef, Sessions};
use crate::units;

/// Most `pauseAfterIdle`: a day (past it a session's idle timeout has long ended it).
pub const MAX_PAUSE_AFTER_IDLE_MS: u64 = 24 * 3600 * 1000;
/// Most store TTL: a year.
pub const MAX_STORE_TTL_SECS: u64 = 366 * 24 * 3600;

/// Where a pool's paused sessions are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreBackend {
    /// A directory in the pod's work root (an emptyDir): lost with the pod.
    PodLocal,
    /// A PVC mounted into every executor pod.
    Pvc { claim_name: String },
    /// S3-compatible object storage, credentials from a Secret.
    S3 {
        bucket: String,
        endpoint: Option<String>,
        region: Option<String>,
        prefix: Option<String>,
        credentials_secret: String,
    },
}

/// A pool's session store, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedStore {
    pub backend: StoreBackend,
    /// The key blobs are sealed with (required with S3).
    pub encryption_key: Option<SecretKeyRef>,
    /// `--session-store-blob-bytes`, when set.
    pub max_blob_bytes: Option<u64>,
    /// `--session-store-tenant-bytes`, when set.
    pub tenant_quota_bytes: Option<u64>,
    /// `--session-store-ttl-secs`, when set.
    pub ttl_secs: Option<u64>,
}

impl Default for ResolvedStore {
    fn default() -> Self {
        Self {
            backend: StoreBackend::PodLocal,
            encryption_key: None,
            max_blob_bytes: None,
            tenant_quota_bytes: None,
            ttl_secs: None,
        }
    }
}

/// `spec.sessions.pauseAfterIdle` in ms, when set.
pub(super) fn resolve_pause_after_idle(spec: &Sessions) -> Result<Option<u64>, InvalidSpec> {
    let Some(text) = &spec.pause_after_idle else {
        return Ok(None);
    };
    let field = "spec.sessions.pauseAfterIdle";
    let ms = units::duration_ms(text).map_err(|e| InvalidSpec::new(field, e))?;
    if ms == 0 || ms > MAX_PAUSE_AFTER_IDLE_MS {
        return Err(InvalidSpec::new(field, format!("{text} is outside 1ms..=24h")));
    }
    Ok(Some(ms))
}

/// `spec.sessions.store`, checked (the CRD's rules again, for `render` and for pools stored
/// before them).
pub(super) fn resolve_store(spec: &Sessions) -> Result<ResolvedStore, InvalidSpec> {
    let Some(store) = &spec.store else {
        return Ok(ResolvedStore::default());
    };
    let backend = match (&store.pvc, &store.s3) {
        (Some(_), Some(_)) => {
            return Err(InvalidSpec::new("spec.sessions.store", "set pvc or s3, not both"));
        }
        (Some(pvc), None) => {
            if pvc.claim_name.is_empty() {
                return Err(InvalidSpec::new(
                    "spec.sessions.store.pvc.claimName",
                    "must not be empty",
                ));
            }
            StoreBackend::Pvc {
                claim_name: pvc.claim_name.clone(),
            }
        }
        (None, Some(s3)) => {
            if store.encryption_key_secret.is_none() {
                return Err(InvalidSpec::new(
                    "spec.sessions.store.encryptionKeySecret",
                    "is required with s3: the bucket is shared, so the executor seals every blob and refuses to start without a key",
                ));
            }
            if s3.bucket.is_empty() {
                return Err(InvalidSpec::new("spec.sessions.store.s3.bucket", "must not be empty"));
            }
            if s3.credentials_secret.is_empty() {
                return Err(InvalidSpec::new(
                    "spec.sessions.store.s3.credentialsSecret",
                    "must not be empty",
                ));
            }
            StoreBackend::S3 {
                bucket: s3.bucket.clone(),
                endpoint: s3.endpoint.clone(),
                region: s3.region.clone(),
                prefix: s3.prefix.clone().filter(|p| !p.is_empty()),
                credentials_secret: s3.credentials_secret.clone(),
            }
        }
        (None, None) => StoreBackend::PodLocal,
    };
    let bytes = |field: &str, text: &Option<String>| -> Result<Option<u64>, InvalidSpec> {
        let Some(text) = text else { return Ok(None) };
        let field = format!("spec.sessions.store.{field}");
        match units::bytes(text).map_err(|e| InvalidSpec::new(&field, e))? {
            0 => Err(InvalidSpec::new(field, "must be more than 0")),
            n => Ok(Some(n)),
        }
    };
    let ttl_secs = match &store.ttl {
        None => None,
        Some(text) => {
            let field = "spec.sessions.store.ttl";
            let ms = units::duration_ms(text).map_err(|e| InvalidSpec::new(field, e))?;
            let secs = ms.div_ceil(1000);
            if secs == 0 || secs > MAX_STORE_TTL_SECS {
                return Err(InvalidSpec::new(field, format!("{text} is outside 1s..=8784h")));
            }
            Some(secs)
        }
    };
    Ok(ResolvedStore {
        backend,
        encryption_key: store.encryption_key_secret.clone(),
        max_blob_bytes: bytes("maxBlobSize", &store.max_blob_size)?,
        tenant_quota_bytes: bytes("tenantQuota", &store.tenant_quota)?,
        ttl_secs,
    })
}
