//! Operator-wide defaults that fill in what a pool's spec leaves unset.

use crate::crd::IsolationMode;

/// The executor image tag that matches this operator build.
pub fn default_executor_image() -> String {
    format!("ghcr.io/sandpool/executor:{}", env!("CARGO_PKG_VERSION"))
}

/// Defaults the operator applies to every pool (set by `run`/`render` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolDefaults {
    /// Image used when `spec.image` is unset.
    pub executor_image: String,
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
            isolation: IsolationMode::Namespaces,
            runtime_class_name: None,
            cluster_domain: "cluster.local".to_owned(),
        }
    }
}
