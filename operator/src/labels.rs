//! Labels and names shared by every object the operator creates for a pool.

use std::collections::BTreeMap;

/// Label naming the pool a pod or object belongs to.
pub const POOL_LABEL: &str = "sandpool.dev/pool";
/// Field manager for every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "sandpool-operator";
/// Annotation holding a hash of what the operator last applied (see [`crate::apply`]).
pub const APPLIED_HASH_ANNOTATION: &str = "sandpool.dev/applied-hash";
/// `app.kubernetes.io/name` of executor pods.
pub const EXECUTOR_APP_NAME: &str = "sandpool-executor";

/// `app.kubernetes.io/name` of gateway pods.
pub const GATEWAY_APP_NAME: &str = "sandpool-gateway";
/// Label naming the pool a gateway pod fronts. Gateway pods do not carry [`POOL_LABEL`], so
/// nothing that looks for a pool's executors by that label finds a gateway.
pub const GATEWAY_LABEL: &str = "sandpool.dev/gateway";

/// The gRPC port (executor API, health, reflection).
pub const GRPC_PORT: i32 = 50051;
/// The SandboxFusion-compatible HTTP port.
pub const HTTP_PORT: i32 = 8080;
/// The Prometheus metrics port.
pub const METRICS_PORT: i32 = 9090;

/// Labels that select a pool's pods. They never change for an existing pool because
/// Deployment selectors are immutable.
pub fn selector_labels(pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), EXECUTOR_APP_NAME.to_owned()),
        ("app.kubernetes.io/instance".to_owned(), pool.to_owned()),
        (POOL_LABEL.to_owned(), pool.to_owned()),
    ])
}

/// The selector labels as a label-selector string (for `status.selector`).
pub fn selector_string(pool: &str) -> String {
    selector_labels(pool)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Labels on every object the operator creates for a pool.
pub fn common_labels(pool: &str) -> BTreeMap<String, String> {
    let mut labels = selector_labels(pool);
    labels.extend([
        ("app.kubernetes.io/component".to_owned(), "executor".to_owned()),
        ("app.kubernetes.io/part-of".to_owned(), "sandpool".to_owned()),
        ("app.kubernetes.io/managed-by".to_owned(), FIELD_MANAGER.to_owned()),
    ]);
    labels
}

/// Labels that select a pool's gateway pods: disjoint from [`selector_labels`] (the
/// `app.kubernetes.io/name` differs, and users may not set it), so the pool's Service,
/// PodDisruptionBudget and NetworkPolicy never select a gateway pod, and the gateway's
/// never an executor.
pub fn gateway_selector_labels(pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), GATEWAY_APP_NAME.to_owned()),
        ("app.kubernetes.io/instance".to_owned(), pool.to_owned()),
        (GATEWAY_LABEL.to_owned(), pool.to_owned()),
    ])
}

/// Labels on every gateway object.
pub fn gateway_labels(pool: &str) -> BTreeMap<String, String> {
    let mut labels = gateway_selector_labels(pool);
    labels.extend([
        ("app.kubernetes.io/component".to_owned(), "gateway".to_owned()),
        ("app.kubernetes.io/part-of".to_owned(), "sandpool".to_owned()),
        ("app.kubernetes.io/managed-by".to_owned(), FIELD_MANAGER.to_owned()),
    ]);
    labels
}

/// Whether a user-supplied pod label would clash with one the operator sets.
pub fn is_reserved(key: &str) -> bool {
    key.starts_with("app.kubernetes.io/") || key == POOL_LABEL || key == GATEWAY_LABEL
}
