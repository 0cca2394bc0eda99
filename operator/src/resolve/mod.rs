//! Turns a `SandboxPool` into a fully defaulted, checked [`ResolvedPool`], or an
//! [`InvalidSpec`] naming the field the operator cannot honour.
//!
//! The CRD schema catches most mistakes at admission; this catches the rest (and everything,
//! for `render` and for API servers that skip CEL), so builders never see unchecked input.
//! [`resolve`] reads the spec top to bottom, and the first field it cannot honour is the one
//! reported; each part of the spec has a module:
//!
//! - `pool`: the [`ResolvedPool`] and the timings derived from it;
//! - `invalid`: [`InvalidSpec`];
//! - `names`: the pool's name, its languages and pod labels;
//! - `gpu`, `resources`, `memory`: GPUs, container resources and run slots, and the memory
//!   the executor keeps for itself;
//! - `limits`: per-run limits; [`executor_defaults`]: the executor's own defaults they
//!   fall back on;
//! - `restricted`: what restricted mode refuses;
//! - `result_cache`, `access`, `disruption_budget`, `auth`: the rest of the spec;
//! - `sessions`: sessions per pod and their memory, which the container's memory grows by;
//!   `session_store`: where paused sessions are kept, and auto-pause;
//! - `tenants`: the pool's callers, their shares and caps;
//! - `gateway`: the pool's gateway (only for pools that serve HTTP).

mod access;
mod auth;
mod disruption_budget;
pub mod executor_defaults;
mod gateway;
mod gpu;
mod invalid;
mod limits;
mod memory;
mod names;
mod pool;
mod resources;
mod restricted;
mod result_cache;
mod session_store;
mod sessions;
mod tenants;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::crd::{IsolationMode, RunLimits, SandboxPool};
use crate::defaults::PoolDefaults;

pub use access::default_clients;
pub use auth::{AUTH_TOKEN_KEY, ResolvedAuth};
pub use gateway::{MAX_GATEWAY_REPLICAS, MAX_POOL_NAME_WITH_GATEWAY, ResolvedGateway, default_gateway_resources};
pub use gpu::{DEFAULT_GPU_RESOURCE, ResolvedGpu};
pub use invalid::InvalidSpec;
pub use limits::{DEFAULT_MAX_WALL_TIME_MS, ResolvedLimits};
pub use memory::{EXECUTOR_MEMORY_HEADROOM, ZYGOTE_MEMORY_PER_SLOT, ZYGOTE_MEMORY_SHARED, executor_headroom};
pub use pool::{
    ASSUMED_STORE_BYTES_PER_SEC, DRAIN_MARGIN_MS, MAX_SESSION_GRACE_S, ResolvedPool, TERMINATION_MARGIN_S,
    gateway_name, session_pause_ms,
};
pub use resources::GPU_MEMORY_REQUEST_PER_SLOT_GI;
pub use restricted::SECURITY_ANNOTATION_PREFIXES;
pub use result_cache::{DEFAULT_RESULT_CACHE_BYTES, ResolvedResultCache};
pub use session_store::{ResolvedStore, StoreBackend};
pub use sessions::{
    DEFAULT_SESSION_IDLE_BYTES, MAX_SESSION_IDLE_BYTES, MAX_SESSION_MEMORY_BYTES, MAX_SESSIONS_PER_POD,
    MIN_SESSION_IDLE_BYTES, ResolvedSessions,
};
pub use tenants::{DEFAULT_TENANT_WEIGHT, MAX_TENANT_WEIGHT, ResolvedTenant};

/// Checks and defaults a pool. `namespace` is used when the object carries none (rendering).
pub fn resolve(pool: &SandboxPool, defaults: &PoolDefaults, namespace: &str) -> Result<ResolvedPool, InvalidSpec> {
    let spec = &pool.spec;
    let name = pool.name_any();
    names::check_name(&name)?;
    let namespace = pool.namespace().unwrap_or_else(|| namespace.to_owned());

    if spec.replicas < 0 {
        return Err(InvalidSpec::new("spec.replicas", "must not be negative"));
    }
    let image = spec.image.clone().unwrap_or_else(|| defaults.executor_image.clone());
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        return Err(InvalidSpec::new("spec.image", "must be a non-empty image reference"));
    }

    let languages = match &spec.languages {
        None => None,
        Some(list) => Some(names::check_languages(list)?),
    };

    let container_memory = memory::container_memory_limit(spec.resources.as_ref())?;
    let gpu = gpu::resolve_gpu(spec.gpu.as_ref())?;
    let mut resources = resources::resolve_resources(spec.resources.clone(), gpu.as_ref())?;
    let slots = resources::slots(spec.concurrency, resources.as_ref())?;
    if gpu.is_some() {
        resources::default_gpu_requests(&mut resources, slots);
    }

    let isolation_spec = spec.isolation.clone().unwrap_or_default();
    let isolation = isolation_spec.mode.unwrap_or(defaults.isolation);
    if isolation == IsolationMode::Restricted {
        let from_default = isolation_spec.mode.is_none();
        restricted::check_restricted(spec, from_default)?;
    }
    let warm_starts = spec.warm_starts.unwrap_or(executor_defaults::WARM_STARTS);
    // Both modes keep zygotes where runs start warm (restricted mode where the node's Landlock
    // scopes signals, which the operator cannot see: it keeps the room either way).
    let headroom = executor_headroom(slots, warm_starts);
    let limits = limits::resolve_limits(
        spec.limits.as_ref().unwrap_or(&RunLimits::default()),
        container_memory,
        headroom,
    )?;
    let result_cache = result_cache::resolve_result_cache(spec.result_cache.as_ref(), container_memory, headroom)?;
    let runtime_class_name = isolation_spec
        .runtime_class_name
        .or_else(|| defaults.runtime_class_name.clone());

    let access = access::resolve_access(spec.access.as_ref())?;
    let node_selector = gpu::node_selector(spec)?;

    let template = spec.pod_template.clone().unwrap_or_default();
    let pod_labels = template.labels.unwrap_or_default();
    names::check_pod_labels(&pod_labels)?;

    let max_unavailable = disruption_budget::max_unavailable(spec.disruption_budget.as_ref())?;
    let auth = auth::resolve_auth(spec.auth.as_ref(), &name);
    let sessions = sessions::resolve_sessions(spec.sessions.as_ref())?;
    // After every check that reads the spec's own memory (runs, result cache): the sessions'
    // budget comes on top of what the spec gave them.
    if let Some(s) = &sessions {
        sessions::add_session_memory(&mut resources, s.container_bytes())?;
    }
    let tenants = tenants::resolve_tenants(
        spec.tenants.as_deref(),
        spec.auth.as_ref(),
        sessions.as_ref().map(|s| s.max_per_pod),
    )?;
    let gateway = gateway::resolve_gateway(spec.gateway.as_ref(), access.http, &name, defaults)?;

    Ok(ResolvedPool {
        // Foreground deletion of the pool waits for its children.
        owner: pool
            .controller_owner_ref(&())
            .filter(|o| !o.uid.is_empty())
            .map(|o| OwnerReference {
                block_owner_deletion: Some(true),
                ..o
            }),
        name,
        namespace,
        replicas: spec.replicas,
        image,
        image_pull_secrets: spec.image_pull_secrets.clone().unwrap_or_default(),
        languages,
        slots,
        resources,
        limits,
        isolation,
        runtime_class_name,
        http: access.http,
        clients: access.clients,
        metrics_clients: access.metrics_clients,
        gpu,
        node_selector,
        affinity: spec.affinity.clone(),
        tolerations: spec.tolerations.clone().unwrap_or_default(),
        pod_labels,
        pod_annotations: template.annotations.unwrap_or_default(),
        max_unavailable,
        auth,
        tenants,
        result_cache,
        warm_starts,
        sessions,
        gateway,
    })
}

#[cfg(test)]
mod tests;
