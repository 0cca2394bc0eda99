//! The pool's gateway: whether it runs, and its replicas, image and resources.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::invalid::InvalidSpec;
use crate::crd::Gateway;
use crate::defaults::PoolDefaults;
use crate::units;

/// Most gateway pods a pool may ask for (the CRD schema says the same).
pub const MAX_GATEWAY_REPLICAS: i32 = 20;
/// `<pool>-gateway` names a Service, which is a DNS-1035 label of at most 63 characters.
pub const MAX_POOL_NAME_WITH_GATEWAY: usize = 63 - "-gateway".len();

/// The gateway, checked and defaulted.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedGateway {
    /// Gateway pods.
    pub replicas: i32,
    /// Image carrying `/sandpool-gateway`.
    pub image: String,
    /// Container resources.
    pub resources: ResourceRequirements,
    /// Ports the gateway may reach the API server on (operator-wide).
    pub api_server_ports: Vec<i32>,
}

/// Small defaults: the gateway only copies bytes between sockets.
pub fn default_gateway_resources() -> ResourceRequirements {
    let q = |s: &str| Quantity(s.to_owned());
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), q("100m")),
            ("memory".to_owned(), q("64Mi")),
        ])),
        limits: Some(BTreeMap::from([("memory".to_owned(), q("256Mi"))])),
        ..Default::default()
    }
}

/// The gateway, or `None` when the pool has none: it fronts the HTTP API only, so a pool
/// without `access.http` gets none, and `gateway.enabled: false` turns it off.
pub(super) fn resolve_gateway(
    spec: Option<&Gateway>,
    http: bool,
    pool_name: &str,
    defaults: &PoolDefaults,
) -> Result<Option<ResolvedGateway>, InvalidSpec> {
    let spec = spec.cloned().unwrap_or_default();
    if !http || spec.enabled == Some(false) {
        return Ok(None);
    }
    if pool_name.len() > MAX_POOL_NAME_WITH_GATEWAY {
        return Err(InvalidSpec::new(
            "metadata.name",
            format!(
                "must be at most {MAX_POOL_NAME_WITH_GATEWAY} characters for a pool with a gateway (the Service <pool>-gateway takes its name); set spec.gateway.enabled: false or shorten the name"
            ),
        ));
    }
    let replicas = spec.replicas.unwrap_or(1);
    if !(1..=MAX_GATEWAY_REPLICAS).contains(&replicas) {
        return Err(InvalidSpec::new(
            "spec.gateway.replicas",
            format!("must be between 1 and {MAX_GATEWAY_REPLICAS}"),
        ));
    }
    let image = spec.image.unwrap_or_else(|| defaults.gateway_image.clone());
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        return Err(InvalidSpec::new(
            "spec.gateway.image",
            "must be a non-empty image reference",
        ));
    }
    let resources = spec.resources.unwrap_or_else(default_gateway_resources);
    for (section, map) in [("requests", &resources.requests), ("limits", &resources.limits)] {
        for (key, value) in map.iter().flatten() {
            units::quantity(&value.0)
                .map_err(|e| InvalidSpec::new(format!("spec.gateway.resources.{section}[{key:?}]"), e))?;
        }
    }
    Ok(Some(ResolvedGateway {
        replicas,
        image,
        resources,
        api_server_ports: defaults.api_server_ports.clone(),
    }))
}
