//! The executor's result cache: its size, and that it fits beside the executor in the
//! container's memory.

use super::executor_defaults;
use super::invalid::InvalidSpec;
use crate::crd::ResultCache;
use crate::units::{self, show_bytes};

/// The result cache's size when a pool enables it without `maxBytes` (the executor's default).
pub const DEFAULT_RESULT_CACHE_BYTES: u64 = executor_defaults::RESULT_CACHE_BYTES;

/// The executor's result cache, when enabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedResultCache {
    /// `--result-cache-entries`.
    pub entries: u64,
    /// `--result-cache-bytes`.
    pub bytes: u64,
    /// `--result-cache-limit-verdicts`.
    pub limit_verdicts: bool,
}

/// The cache's settings; it lives in the executor's own memory, so a container memory
/// limit must hold it and the executor's headroom.
pub(super) fn resolve_result_cache(
    spec: Option<&ResultCache>,
    container_memory: Option<u64>,
    headroom: u64,
) -> Result<Option<ResolvedResultCache>, InvalidSpec> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let entries = match spec.entries {
        None | Some(0) => return Ok(None),
        Some(n) => {
            u64::try_from(n).map_err(|_| InvalidSpec::new("spec.resultCache.entries", "must not be negative"))?
        }
    };
    let bytes = match &spec.max_bytes {
        Some(text) => units::bytes(text).map_err(|e| InvalidSpec::new("spec.resultCache.maxBytes", e))?,
        None => DEFAULT_RESULT_CACHE_BYTES,
    };
    if bytes == 0 {
        return Err(InvalidSpec::new(
            "spec.resultCache.maxBytes",
            "must be positive (set entries to 0 to turn the cache off)",
        ));
    }
    if let Some(container) = container_memory
        && bytes.saturating_add(headroom) >= container
    {
        return Err(InvalidSpec::new(
            "spec.resultCache.maxBytes",
            format!(
                "{} and the executor's own headroom of {} do not fit spec.resources.limits[\"memory\"] ({})",
                show_bytes(bytes),
                show_bytes(headroom),
                show_bytes(container)
            ),
        ));
    }
    Ok(Some(ResolvedResultCache {
        entries,
        bytes,
        limit_verdicts: spec.limit_verdicts.unwrap_or(false),
    }))
}
