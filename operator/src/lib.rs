//! Sandpool's Kubernetes operator: `SandboxPool` objects in, locked-down executor fleets out.
//!
//! - [`crd`]: the `SandboxPool` resource and its generated CRD.
//! - [`plan`]: one pool and the operator's config in, the children to apply (or a refusal
//!   with its reason) out; pure, and the one path both [`reconcile`] and [`render`] take.
//! - [`resolve`]: checks a spec and fills in defaults, or names the field it cannot honour.
//! - [`build`]: pure builders from a resolved pool to Deployment, Service, NetworkPolicy,
//!   ServiceAccount, PodDisruptionBudget and the tenants ConfigMap, and for HTTP pools the
//!   gateway's (`sandpool-gateway`) Deployment, Service, NetworkPolicy, ServiceAccount,
//!   Role and RoleBinding.
//! - [`apply`]: server-side apply of one child, skipped when nothing would change.
//! - [`status`]: the pool's status and its Ready/Progressing/Degraded conditions.
//! - [`diagnose`]: why executors are not running (crash loop, OOM, image, scheduling,
//!   probes, refused pods, deadline), from the Deployment and its pods, for the conditions.
//! - [`reconcile`]: the reconcile loop and its error policy.
//! - [`live_sessions`]: sessions open on a pool's pods, from the custom metrics API.
//! - [`metrics`]: Prometheus metrics of the loop.
//! - [`controller`]: the `run` subcommand: watches, leader election, shutdown.
//! - [`leader`]: Lease-based leader election.
//! - [`rbac`]: every API call the operator makes, as the RBAC rules the chart must grant.
//! - [`http`]: `/metrics`, `/healthz` and `/readyz`.
//! - [`units`]: durations and quantities in the executor's units.
//! - [`labels`]: names, labels and ports shared by every object.
//! - [`config`]: what the operator's flags decide for every pool: [`defaults`] and [`policy`].
//! - [`defaults`]: operator-wide defaults (executor and gateway images, isolation, runtime
//!   class, the API server ports gateways may reach).
//! - [`policy`]: operator-wide policy pool authors cannot override (images, runtime classes,
//!   tolerations, node selectors, namespaces).
//! - [`render`]: the `render` subcommand, objects for pools in a file.

pub mod apply;
pub mod build;
pub mod config;
pub mod controller;
pub mod crd;
pub mod defaults;
pub mod diagnose;
pub mod http;
pub mod labels;
pub mod leader;
pub mod live_sessions;
pub mod metrics;
pub mod plan;
pub mod policy;
pub mod rbac;
pub mod reconcile;
pub mod render;
pub mod resolve;
pub mod status;
pub mod units;

#[cfg(test)]
mod test_pool;

/// An error and its causes on one line, each said once (many errors already quote their
/// source), for logs a person reads: `reconcile failed: Deployment python: ApiError: ...`.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !out.contains(&said) {
            out.push_str(": ");
            out.push_str(&said);
        }
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod error_chain_tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Middle);
    #[derive(Debug, thiserror::Error)]
    #[error("middle: {0}")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn each_cause_is_said_once_on_one_line() {
        let e = Outer(Middle(std::io::Error::other("disk on fire")));
        assert_eq!(super::error_chain(&e), "outer: middle: disk on fire");
    }
}
