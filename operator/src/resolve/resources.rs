//! Container resources: quantities checked, the GPU limit added, extended resources never
//! overcommitted, and the run slots they give.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::gpu::ResolvedGpu;
use super::invalid::InvalidSpec;
use crate::units;

/// Memory request per run slot of a GPU pool that names none (GPU pools are never BestEffort).
pub const GPU_MEMORY_REQUEST_PER_SLOT_GI: u32 = 2;

/// Adds the GPU limit and checks that extended resources are requested exactly as limited
/// (the API server refuses anything else, and would do so only at apply time).
pub(super) fn resolve_resources(
    resources: Option<ResourceRequirements>,
    gpu: Option<&ResolvedGpu>,
) -> Result<Option<ResourceRequirements>, InvalidSpec> {
    let mut resources = resources;
    for (section, map) in resources
        .iter()
        .flat_map(|r| [("requests", &r.requests), ("limits", &r.limits)])
    {
        for (key, value) in map.iter().flatten() {
            units::quantity(&value.0).map_err(|e| InvalidSpec::new(format!("spec.resources.{section}[{key:?}]"), e))?;
        }
    }
    if let Some(gpu) = gpu {
        let r = resources.get_or_insert_with(Default::default);
        let limits_map = r.limits.get_or_insert_with(Default::default);
        let wanted = Quantity(gpu.count.to_string());
        match limits_map.get(&gpu.resource_name) {
            Some(existing) if units::quantity(&existing.0) != units::quantity(&wanted.0) => {
                return Err(InvalidSpec::new(
                    format!("spec.resources.limits[{:?}]", gpu.resource_name),
                    format!("conflicts with spec.gpu.count ({})", gpu.count),
                ));
            }
            _ => {
                limits_map.insert(gpu.resource_name.clone(), wanted);
            }
        }
    }
    if let Some(r) = &resources {
        for (key, request) in r.requests.iter().flatten().filter(|(k, _)| is_extended(k)) {
            let limit = r.limits.as_ref().and_then(|l| l.get(key));
            if limit.map(|l| units::quantity(&l.0)) != Some(units::quantity(&request.0)) {
                return Err(InvalidSpec::new(
                    format!("spec.resources.requests[{key:?}]"),
                    format!(
                        "must equal spec.resources.limits[{key:?}] ({}): extended resources cannot be overcommitted",
                        limit.map_or("unset", |l| l.0.as_str())
                    ),
                ));
            }
        }
    }
    Ok(resources)
}

/// Extended resources (`vendor.example/thing`) and huge pages cannot be overcommitted.
fn is_extended(name: &str) -> bool {
    name.starts_with("hugepages-") || (name.contains('/') && !name.starts_with("kubernetes.io/"))
}

/// GPU pools that name no CPU or memory would be scheduled with none reserved next to an
/// expensive GPU: request a CPU per slot and some memory per slot.
pub(super) fn default_gpu_requests(resources: &mut Option<ResourceRequirements>, slots: u32) {
    let r = resources.get_or_insert_with(Default::default);
    let has = |r: &ResourceRequirements, key: &str| {
        [&r.requests, &r.limits]
            .into_iter()
            .any(|m| m.as_ref().is_some_and(|m| m.contains_key(key)))
    };
    let cpu = (!has(r, "cpu")).then(|| Quantity(slots.to_string()));
    let memory = (!has(r, "memory")).then(|| {
        Quantity(format!(
            "{}Gi",
            u64::from(slots) * u64::from(GPU_MEMORY_REQUEST_PER_SLOT_GI)
        ))
    });
    let requests = r.requests.get_or_insert_with(Default::default);
    if let Some(cpu) = cpu {
        requests.insert("cpu".to_owned(), cpu);
    }
    if let Some(memory) = memory {
        requests.insert("memory".to_owned(), memory);
    }
}

/// Default slots: the CPU request (or limit, which Kubernetes copies into an unset request)
/// rounded down, at least 1.
fn slots_from_cpu(resources: Option<&ResourceRequirements>) -> Result<u32, InvalidSpec> {
    let from = |section: &str, map: Option<&BTreeMap<String, Quantity>>| {
        map.and_then(|m| m.get("cpu")).map(|q| {
            units::quantity(&q.0)
                .map(units::Milli::floor)
                .map_err(|e| InvalidSpec::new(format!("spec.resources.{section}[\"cpu\"]"), e))
        })
    };
    let cpus = from("requests", resources.and_then(|r| r.requests.as_ref()))
        .or_else(|| from("limits", resources.and_then(|r| r.limits.as_ref())))
        .transpose()?
        .unwrap_or(1);
    Ok(u32::try_from(cpus).unwrap_or(u32::MAX).max(1))
}

/// Run slots per pod: `spec.concurrency`, else from the CPU request.
pub(super) fn slots(concurrency: Option<i32>, resources: Option<&ResourceRequirements>) -> Result<u32, InvalidSpec> {
    match concurrency {
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| InvalidSpec::new("spec.concurrency", "must be at least 1")),
        None => slots_from_cpu(resources),
    }
}
