//! The container's memory: its limit, and the share the executor keeps for itself, which
//! runs and the result cache must leave free.

use k8s_openapi::api::core::v1::ResourceRequirements;

use super::invalid::InvalidSpec;
use crate::units;

/// Memory the executor keeps for itself inside the container: a run may use at most the
/// container's memory limit minus this (plus [`ZYGOTE_MEMORY_PER_SLOT`] per slot with warm
/// starts, see [`executor_headroom`]).
pub const EXECUTOR_MEMORY_HEADROOM: u64 = 256 << 20;
/// What one slot's Python zygotes keep resident in the executor's own memory: with the
/// shipped table about 19 MiB for the plain one and 34 MiB for the one with numpy, once a
/// program has named numpy (docs/warm-starts.md).
pub const ZYGOTE_MEMORY_PER_SLOT: u64 = 64 << 20;

/// The executor's own memory in a pool's container: the base headroom, plus a zygote per
/// slot where runs start warm (namespaces mode with warm starts on; restricted mode has none).
pub fn executor_headroom(slots: u32, warm_starts: bool) -> u64 {
    EXECUTOR_MEMORY_HEADROOM
        + if warm_starts {
            u64::from(slots) * ZYGOTE_MEMORY_PER_SLOT
        } else {
            0
        }
}

/// The container's memory limit in bytes, if set.
pub(super) fn container_memory_limit(resources: Option<&ResourceRequirements>) -> Result<Option<u64>, InvalidSpec> {
    let Some(limit) = resources.and_then(|r| r.limits.as_ref()).and_then(|l| l.get("memory")) else {
        return Ok(None);
    };
    let field = "spec.resources.limits[\"memory\"]";
    let bytes = units::quantity(&limit.0)
        .map(units::Milli::floor)
        .map_err(|e| InvalidSpec::new(field, e))?;
    Ok(Some(u64::try_from(bytes).unwrap_or(u64::MAX)))
}
