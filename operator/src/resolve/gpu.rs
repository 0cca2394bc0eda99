//! GPU pools: the extended resource and count, the tolerations and node labels that put
//! the pods on GPU nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;

use super::invalid::InvalidSpec;
use crate::crd::{GpuSpec, SandboxPoolSpec};

/// Default GPU extended resource.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";

/// GPU settings with defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedGpu {
    /// GPUs per pod.
    pub count: i64,
    /// Extended resource name.
    pub resource_name: String,
    /// Tolerations for GPU nodes.
    pub tolerations: Vec<Toleration>,
}

/// The GPU settings, when the pool asks for GPUs: a positive count of an extended resource,
/// and by default a toleration for the taint GPU nodes carry under the resource's name.
pub(super) fn resolve_gpu(spec: Option<&GpuSpec>) -> Result<Option<ResolvedGpu>, InvalidSpec> {
    let Some(g) = spec else {
        return Ok(None);
    };
    if g.count < 1 {
        return Err(InvalidSpec::new("spec.gpu.count", "must be at least 1"));
    }
    let resource_name = g
        .resource_name
        .clone()
        .unwrap_or_else(|| DEFAULT_GPU_RESOURCE.to_owned());
    if !resource_name.contains('/') || resource_name.chars().any(char::is_whitespace) {
        return Err(InvalidSpec::new(
            "spec.gpu.resourceName",
            "must be an extended resource name such as nvidia.com/gpu",
        ));
    }
    let tolerations = g.tolerations.clone().unwrap_or_else(|| {
        vec![Toleration {
            key: Some(resource_name.clone()),
            operator: Some("Exists".to_owned()),
            effect: Some("NoSchedule".to_owned()),
            ..Default::default()
        }]
    });
    Ok(Some(ResolvedGpu {
        count: g.count,
        resource_name,
        tolerations,
    }))
}

/// `spec.nodeSelector` with `spec.gpu.nodeSelector` merged in; a key the two set differently
/// is refused rather than one silently winning.
pub(super) fn node_selector(spec: &SandboxPoolSpec) -> Result<BTreeMap<String, String>, InvalidSpec> {
    let mut node_selector = spec.node_selector.clone().unwrap_or_default();
    if let Some(gpu_selector) = spec.gpu.as_ref().and_then(|g| g.node_selector.as_ref()) {
        for (key, value) in gpu_selector {
            match node_selector.get(key) {
                Some(existing) if existing != value => {
                    return Err(InvalidSpec::new(
                        format!("spec.gpu.nodeSelector[{key:?}]"),
                        format!("conflicts with spec.nodeSelector ({existing:?} vs {value:?})"),
                    ));
                }
                _ => {
                    node_selector.insert(key.clone(), value.clone());
                }
            }
        }
    }
    Ok(node_selector)
}
