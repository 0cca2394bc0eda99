//! Pure builders: a [`ResolvedPool`] in, the Kubernetes objects for it out. No I/O here, so
//! every field can be unit-tested without a cluster.

mod auth_secret;
mod deployment;
mod disruption_budget;
mod gateway;
mod network_policy;
mod service;
mod service_account;
mod session_store;
mod tenants;

#[cfg(test)]
mod tests;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::labels;
use crate::resolve::ResolvedPool;

pub use auth_secret::{auth_secret, random_token};
pub use deployment::{NAMESPACES_CAPABILITIES, deployment, executor_args};
pub use disruption_budget::disruption_budget;
pub use gateway::{GATEWAY_COMMAND, GATEWAY_CONTAINER, GATEWAY_UID, GatewayChildren, dns_peer, gateway, gateway_args};
pub use network_policy::network_policy;
pub use service::service;
pub use service_account::service_account;
pub use session_store::{S3_CREDENTIAL_KEYS, S3_CREDENTIALS_DIR, SESSION_STORE_DIR, STORE_KEY_DIR, STORE_KEY_FILE};
pub use tenants::{
    TENANT_TOKENS_DIR, TENANTS_CONFIG_DIR, TENANTS_FILE_ENV, TENANTS_FILE_KEY, tenants_config_map,
    tenants_config_map_name, tenants_toml, token_file,
};

/// Every object the operator wants for one pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    /// Identity of the executor pods (no token).
    pub service_account: ServiceAccount,
    /// Locks the pods down; applied before the Deployment so no pod runs unprotected.
    pub network_policy: NetworkPolicy,
    /// Headless Service for client-side round-robin.
    pub service: Service,
    /// Budget for voluntary disruptions; `None` means the pool wants none (and any is removed).
    pub disruption_budget: Option<PodDisruptionBudget>,
    /// The tenants file (`<pool>-tenants`); `None` means the pool has no tenants (and any is
    /// removed once the Deployment no longer mounts it).
    pub tenants: Option<ConfigMap>,
    /// The executor pods.
    pub deployment: Deployment,
    /// The gateway's objects; `None` means the pool has none (and any is removed). Boxed:
    /// six more objects would double the size of every future that holds the children.
    pub gateway: Option<Box<GatewayChildren>>,
}

/// Builds every object for a pool.
pub fn children(pool: &ResolvedPool) -> Children {
    Children {
        service_account: service_account(pool),
        network_policy: network_policy(pool),
        service: service(pool),
        disruption_budget: disruption_budget(pool),
        tenants: tenants_config_map(pool),
        deployment: deployment(pool),
        gateway: gateway(pool).map(Box::new),
    }
}

/// Metadata shared by every child: the pool's name and namespace, common labels, and the
/// owner reference that makes deletion cascade.
fn child_meta(pool: &ResolvedPool) -> ObjectMeta {
    ObjectMeta {
        name: Some(pool.name.clone()),
        namespace: Some(pool.namespace.clone()),
        labels: Some(labels::common_labels(&pool.name)),
        owner_references: pool.owner.clone().map(|o| vec![o]),
        ..Default::default()
    }
}
