//! Operator-wide defaults that fill in what a pool's spec leaves unset.

use crate::crd::IsolationMode;

/// The executor image tag that matches this operator build.
pub fn default_executor_image() -> String {
    format!("ghcr.io/sandpool/executor:{}", env!("CARGO_PKG_VERSION"))
}

/// The operator image tag that matches this operator build. It also carries
/// `/sandpool-gateway`, so it is the default gateway image.
pub fn default_operator_image() -> String {
    format!("ghcr.io/sandpool/operator:{}", env!("CARGO_PKG_VERSION"))
}

/// The API server ports gateways may reach unless `--gateway-api-server-ports` says otherwise.
pub const DEFAULT_API_SERVER_PORTS: [i32; 2] = [443, 6443];

/// Defaults the operator applies to every pool (set by `run`/`render` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolDefaults {
    /// Image used when `spec.image` is unset.
    pub executor_image: String,
    /// Image used when `spec.gateway.image` is unset: the operator's own image, which
    /// carries `/sandpool-gateway`.
    pub gateway_image: String,
    /// Ports gateways may reach the Kubernetes API server on (their EndpointSlice watch).
    /// NetworkPolicy sees the API server's own port after the `kubernetes` Service's
    /// translation, which is 443 or 6443 on most clusters.
    pub api_server_ports: Vec<i32>,
    /// Isolation mode used when `spec.isolation.mode` is unset.
    pub isolation: IsolationMode,
    /// RuntimeClass used when `spec.isolation.runtimeClassName` is unset.
    pub runtime_class_name: Option<String>,
    /// Cluster DNS domain used to build `status.endpoint`.
    pub cluster_domain: String,
}

impl Default for PoolDefaults {
    fn default() -> Self {
        Self {
            executor_image: default_executor_image(),
            gateway_image: default_operator_image(),
            api_server_ports: DEFAULT_API_SERVER_PORTS.to_vec(),
            isolation: IsolationMode::Namespaces,
            runtime_class_name: None,
            cluster_domain: "cluster.local".to_owned(),
        }
    }
}
