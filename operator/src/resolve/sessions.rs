//! Sessions: how many each executor pod holds open, the memory each is counted at, and
//! the budget all of them share, which the container's memory grows by.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::invalid::InvalidSpec;
use super::session_store::{self, ResolvedStore};
use crate::crd::Sessions;
use crate::units::{self, show_bytes};

/// Most sessions a pool may ask each pod to hold open.
pub const MAX_SESSIONS_PER_POD: u32 = 4096;
/// `idleMemory` when unset (the executor's `--session-idle-bytes` default).
pub const DEFAULT_SESSION_IDLE_BYTES: u64 = super::executor_defaults::SESSION_IDLE_BYTES;
/// Least `idleMemory`: below it an interpreter's own pages are not counted at all.
pub const MIN_SESSION_IDLE_BYTES: u64 = 4 << 20;
/// Most `idleMemory`: a session larger than this when idle is a run, not a session.
pub const MAX_SESSION_IDLE_BYTES: u64 = 4 << 30;
/// Most `spares` a pool may ask each pod to keep.
pub const MAX_SPARES_PER_POD: u32 = 64;
/// Most `memory`, 16Ti: every session of the largest pool at the largest `idleMemory`.
pub const MAX_SESSION_MEMORY_BYTES: u64 = MAX_SESSIONS_PER_POD as u64 * MAX_SESSION_IDLE_BYTES;

/// Least `drainGracePeriodSeconds`: the termination margin and a few seconds of drain.
pub const MIN_GRACE_OVERRIDE_S: i64 = 15;
/// Most `drainGracePeriodSeconds`: a day.
pub const MAX_GRACE_OVERRIDE_S: i64 = 86_400;

/// A pool's sessions, checked: the executor's session flags.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResolvedSessions {
    /// `--max-sessions`; 0: the pool serves no sessions.
    pub max_per_pod: u32,
    /// `--session-idle-bytes`.
    pub idle_bytes: u64,
    /// `--session-memory-bytes`; 0 when `max_per_pod` is 0. The container's memory request
    /// (and limit, when set) grows by it.
    pub memory_bytes: u64,
    /// `--session-spares`: interpreters kept started; the container's memory grows by
    /// `spares` × `idle_bytes` too (see [`ResolvedSessions::container_bytes`]).
    pub spares: u32,
    /// `--session-pause-after-idle-ms`, when set.
    pub pause_after_idle_ms: Option<u64>,
    /// Where paused sessions are kept.
    pub store: ResolvedStore,
    /// `spec.sessions.drainGracePeriodSeconds`: the pods' grace, instead of the estimate.
    pub grace_override_s: Option<i64>,
}

impl ResolvedSessions {
    /// What the container's memory grows by: the sessions' budget, and the spares beside it
    /// (the executor starts spares only in room the sessions leave in the budget, so sessions
    /// created after them can pass it by at most this).
    pub fn container_bytes(&self) -> u64 {
        self.memory_bytes
            .saturating_add(u64::from(self.spares).saturating_mul(self.idle_bytes))
    }
}

pub(super) fn resolve_sessions(spec: Option<&Sessions>) -> Result<Option<ResolvedSessions>, InvalidSpec> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let max_per_pod = u32::try_from(spec.max_per_pod)
        .ok()
        .filter(|n| *n <= MAX_SESSIONS_PER_POD)
        .ok_or_else(|| {
            InvalidSpec::new(
                "spec.sessions.maxPerPod",
                format!("{} is outside 0..={MAX_SESSIONS_PER_POD}", spec.max_per_pod),
            )
        })?;
    let idle_bytes = match &spec.idle_memory {
        None => DEFAULT_SESSION_IDLE_BYTES,
        Some(text) => {
            let field = "spec.sessions.idleMemory";
            let bytes = units::bytes(text).map_err(|e| InvalidSpec::new(field, e))?;
            if !(MIN_SESSION_IDLE_BYTES..=MAX_SESSION_IDLE_BYTES).contains(&bytes) {
                return Err(InvalidSpec::new(
                    field,
                    format!(
                        "{text} is outside {}..={}",
                        show_bytes(MIN_SESSION_IDLE_BYTES),
                        show_bytes(MAX_SESSION_IDLE_BYTES)
                    ),
                ));
            }
            bytes
        }
    };
    // Each open session counts at least `idle_bytes`, so a budget below this would refuse
    // sessions before `maxPerPod` and the status would overstate the capacity.
    let least = u64::from(max_per_pod) * idle_bytes;
    let memory_bytes = match &spec.memory {
        None => least,
        Some(_) if max_per_pod == 0 => {
            return Err(InvalidSpec::new(
                "spec.sessions.memory",
                "must be left out when maxPerPod is 0 (the pool serves no sessions)",
            ));
        }
        Some(text) => {
            let field = "spec.sessions.memory";
            let bytes = units::bytes(text).map_err(|e| InvalidSpec::new(field, e))?;
            if bytes < least {
                return Err(InvalidSpec::new(
                    field,
                    format!(
                        "{text} holds fewer than maxPerPod ({max_per_pod}) sessions at idleMemory {} \
                         ({} together); raise it or lower maxPerPod",
                        show_bytes(idle_bytes),
                        show_bytes(least)
                    ),
                ));
            }
            if bytes > MAX_SESSION_MEMORY_BYTES {
                return Err(InvalidSpec::new(
                    field,
                    format!("{text} exceeds 16Ti ({MAX_SESSIONS_PER_POD} sessions at 4Gi)"),
                ));
            }
            bytes
        }
    };
    let spares = match spec.spares.unwrap_or(0) {
        0 => 0,
        _ if max_per_pod == 0 => {
            return Err(InvalidSpec::new(
                "spec.sessions.spares",
                "must be 0 when maxPerPod is 0 (the pool serves no sessions)",
            ));
        }
        n => u32::try_from(n)
            .ok()
            .filter(|n| *n <= MAX_SPARES_PER_POD)
            .ok_or_else(|| {
                InvalidSpec::new(
                    "spec.sessions.spares",
                    format!("{n} is outside 0..={MAX_SPARES_PER_POD}"),
                )
            })?,
    };
    let pause_after_idle_ms = session_store::resolve_pause_after_idle(spec)?;
    let store = session_store::resolve_store(spec)?;
    let grace_override_s = match spec.drain_grace_period_seconds {
        None => None,
        Some(s) if (MIN_GRACE_OVERRIDE_S..=MAX_GRACE_OVERRIDE_S).contains(&s) => Some(s),
        Some(s) => {
            return Err(InvalidSpec::new(
                "spec.sessions.drainGracePeriodSeconds",
                format!("{s} is outside {MIN_GRACE_OVERRIDE_S}..={MAX_GRACE_OVERRIDE_S}"),
            ));
        }
    };
    Ok(Some(ResolvedSessions {
        max_per_pod,
        idle_bytes,
        memory_bytes,
        spares,
        pause_after_idle_ms,
        store,
        grace_override_s,
    }))
}

/// Grows the container's memory by the sessions' budget: sessions live in the executor's
/// container, beside the runs and the executor, which keep what the spec gave them.
///
/// - a memory request grows; with none, a limit alone is what Kubernetes copies into the
///   request, so growing the limit grows it; with neither, the request is the budget;
/// - a memory limit grows too, or the sessions would push the pod over it (OOM-killing the
///   executor and every session and run on the pod).
pub(super) fn add_session_memory(resources: &mut Option<ResourceRequirements>, budget: u64) -> Result<(), InvalidSpec> {
    if budget == 0 {
        return Ok(());
    }
    let r = resources.get_or_insert_with(Default::default);
    let has_limit = r.limits.as_ref().is_some_and(|l| l.contains_key("memory"));
    let has_request = r.requests.as_ref().is_some_and(|l| l.contains_key("memory"));
    if has_limit {
        grow(&mut r.limits, "limits", budget)?;
    }
    if has_request || !has_limit {
        grow(&mut r.requests, "requests", budget)?;
    }
    Ok(())
}

/// Adds `budget` bytes to `map["memory"]` (0 when absent).
fn grow(map: &mut Option<BTreeMap<String, Quantity>>, section: &str, budget: u64) -> Result<(), InvalidSpec> {
    let field = || format!("spec.resources.{section}[\"memory\"]");
    let map = map.get_or_insert_with(Default::default);
    let sum = match map.get("memory") {
        None => Some(u128::from(budget) * 1000),
        Some(q) => units::quantity(&q.0)
            .map_err(|e| InvalidSpec::new(field(), e))?
            .milli()
            .checked_add(u128::from(budget) * 1000),
    };
    // The API server refuses a quantity past 2^63-1.
    let Some(sum) = sum.filter(|milli| *milli / 1000 <= i64::MAX as u128) else {
        return Err(InvalidSpec::new(
            field(),
            format!("too large with the sessions' memory ({}) added", show_bytes(budget)),
        ));
    };
    map.insert("memory".to_owned(), Quantity(units::show_milli(sum)));
    Ok(())
}
