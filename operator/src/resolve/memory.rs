//! The container's memory: its limit, and the share the executor keeps for itself, which
//! runs and the result cache must leave free.

use k8s_openapi::api::core::v1::ResourceRequirements;

use super::invalid::InvalidSpec;
use crate::units;

/// Memory the executor keeps for itself inside the container: a run may use at most the
/// container's memory limit minus this (plus the zygotes' share with warm starts, see
/// [`executor_headroom`]).
pub const EXECUTOR_MEMORY_HEADROOM: u64 = 256 << 20;
/// What each slot's Python zygotes keep in the executor's own memory, apart from what all
/// slots share: with the shipped table the plain and the numpy zygote of one slot are 28 MiB
/// of PSS together at 16 slots (`cargo bench -p sandpool-executor --bench memory`; README,
/// "Memory"), 53 MiB of RSS, most of the rest the interpreter's and numpy's libraries.
pub const ZYGOTE_MEMORY_PER_SLOT: u64 = 32 << 20;
/// What every slot's zygotes share, counted once: the pages of libpython, numpy and
/// OpenBLAS (about 25 MiB: a slot's RSS less its PSS at 16 slots).
pub const ZYGOTE_MEMORY_SHARED: u64 = 32 << 20;

/// The executor's own memory in a pool's container: the base headroom, plus the zygotes
/// where runs start warm (warm starts on, in either mode: docs/warm-starts.md).
/// One slot keeps 64 MiB for its zygotes, as much as their RSS; each further slot 32 MiB.
pub fn executor_headroom(slots: u32, warm_starts: bool) -> u64 {
    EXECUTOR_MEMORY_HEADROOM
        + if warm_starts && slots > 0 {
            ZYGOTE_MEMORY_SHARED + u64::from(slots) * ZYGOTE_MEMORY_PER_SLOT
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
