//! Every Kubernetes API call the operator makes, as RBAC rules: the one list the chart's
//! Role/ClusterRole must match (`scripts/check-manifests.sh` renders the chart and compares
//! it with `sandpool-operator rbac`), and that the mocked-API tests check each request
//! against, so a new call without its verb fails a test.

use serde::Serialize;

/// Where a rule is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Scope {
    /// Reading and reporting: in every watched namespace (cluster-wide in cluster-wide mode,
    /// so pools outside the managed namespaces can still be told why they are refused).
    Watch,
    /// Writing children, and reading the pods their Deployments make: only in managed
    /// namespaces.
    Manage,
    /// Cluster-scoped reads, only for the managed-namespace selector.
    NamespaceSelector,
    /// Leader election, in the operator's own namespace.
    Lease,
}

/// One RBAC rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// API group (`""` for core).
    pub api_group: &'static str,
    /// Resource (plural, with `/subresource`).
    pub resource: &'static str,
    /// Verbs, each used by a code path named in the comment beside it.
    pub verbs: &'static [&'static str],
    /// Where it is granted.
    pub scope: Scope,
}

const fn rule(api_group: &'static str, resource: &'static str, verbs: &'static [&'static str], scope: Scope) -> Rule {
    Rule {
        api_group,
        resource,
        verbs,
        scope,
    }
}

/// Every call the operator makes.
pub const RULES: &[Rule] = &[
    // controller: watch pools; startup: list one to check the CRD.
    rule("sandpool.dev", "sandboxpools", &["list", "watch"], Scope::Watch),
    // reconcile::write_status: server-side apply of the status subresource.
    rule("sandpool.dev", "sandboxpools/status", &["patch"], Scope::Watch),
    // reconcile::publish (kube's Recorder): create, then patch a repeated Event's series.
    rule("events.k8s.io", "events", &["create", "patch"], Scope::Watch),
    // controller: watch children by owner; apply::ensure: get the live child.
    rule("apps", "deployments", &["get", "list", "watch"], Scope::Watch),
    rule("", "services", &["get", "list", "watch"], Scope::Watch),
    rule("", "serviceaccounts", &["get", "list", "watch"], Scope::Watch),
    rule(
        "networking.k8s.io",
        "networkpolicies",
        &["get", "list", "watch"],
        Scope::Watch,
    ),
    rule(
        "policy",
        "poddisruptionbudgets",
        &["get", "list", "watch"],
        Scope::Watch,
    ),
    // apply::ensure: server-side apply, which needs `create` when the child is new;
    // apply::ensure_absent: a pool whose gateway is turned off loses its objects.
    rule("apps", "deployments", &["create", "patch", "delete"], Scope::Manage),
    rule("", "services", &["create", "patch", "delete"], Scope::Manage),
    rule("", "serviceaccounts", &["create", "patch", "delete"], Scope::Manage),
    rule(
        "networking.k8s.io",
        "networkpolicies",
        &["create", "patch", "delete"],
        Scope::Manage,
    ),
    // The gateway's Role and RoleBinding, only where pools are managed: apply::ensure gets
    // and applies them, apply::ensure_absent deletes them. Not watched (no list/watch): a
    // changed one is put back at the next resync. No `escalate` or `bind`.
    rule(
        "rbac.authorization.k8s.io",
        "roles",
        &["get", "create", "patch", "delete"],
        Scope::Manage,
    ),
    rule(
        "rbac.authorization.k8s.io",
        "rolebindings",
        &["get", "create", "patch", "delete"],
        Scope::Manage,
    ),
    // Never called by the operator: the gateway's Role grants these, and the API server lets
    // a Role be written only by someone who holds what it grants (escalation prevention).
    rule("discovery.k8s.io", "endpointslices", &["list", "watch"], Scope::Manage),
    // ... and apply::ensure_absent: a disabled budget is deleted.
    rule(
        "policy",
        "poddisruptionbudgets",
        &["create", "patch", "delete"],
        Scope::Manage,
    ),
    // Tenants ConfigMaps, only where pools are managed (no reading other ConfigMaps):
    // controller: watch them (label selector); apply::ensure: get, then server-side apply;
    // apply::ensure_absent: a pool whose tenants are gone loses theirs.
    rule(
        "",
        "configmaps",
        &["get", "list", "watch", "create", "patch", "delete"],
        Scope::Manage,
    ),
    // reconcile::ensure_auth_secret: create only; Secrets are never read or overwritten.
    rule("", "secrets", &["create"], Scope::Manage),
    // controller: watch executor pods (label selector) so their failures reach the pool;
    // reconcile::executor_pods: list a pool's pods to say why they are not ready. No `get`.
    rule("", "pods", &["list", "watch"], Scope::Manage),
    // reconcile::observe_pods: the kubelet's probe failures (reason=Unhealthy), read only
    // when a pod's container runs unready or was stopped cleanly. core/v1, not events.k8s.io.
    rule("", "events", &["list"], Scope::Manage),
    // live_sessions::fetch: the sessions open on a pool's pods, from the custom metrics API
    // (prometheus-adapter), for status.sessions.open. Only this one metric, only `get`, only
    // where pools are managed: the API server answers, so the pods' NetworkPolicy need not
    // admit the operator. Without it the status leaves the live counts out.
    rule(
        "custom.metrics.k8s.io",
        "pods/sandpool_sessions",
        &["get"],
        Scope::Manage,
    ),
    // reconcile_pool: the namespace's labels, for --managed-namespace-selector.
    rule("", "namespaces", &["get"], Scope::NamespaceSelector),
    // leader::Leadership (kube-lease-manager): read, create and renew the Lease.
    rule(
        "coordination.k8s.io",
        "leases",
        &["get", "create", "patch"],
        Scope::Lease,
    ),
];

/// Whether `verb` on `resource` in `api_group` is granted in any scope.
pub fn granted(api_group: &str, resource: &str, verb: &str) -> bool {
    RULES
        .iter()
        .any(|r| r.api_group == api_group && r.resource == resource && r.verbs.contains(&verb))
}

/// [`RULES`] as JSON, for `sandpool-operator rbac`.
pub fn rules_json() -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(RULES)
}
