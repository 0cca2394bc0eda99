//! [`ResolvedPool`]: everything the builders need, checked and defaulted, and the timings
//! derived from it (drain, termination grace) that several builders and the status share.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, LocalObjectReference, ResourceRequirements, Toleration};
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::auth::ResolvedAuth;
use super::gateway::ResolvedGateway;
use super::gpu::ResolvedGpu;
use super::limits::ResolvedLimits;
use super::result_cache::ResolvedResultCache;
use super::sessions::ResolvedSessions;
use super::tenants::ResolvedTenant;
use crate::crd::IsolationMode;
use crate::labels;

/// Extra time the executor's drain gets beyond the longest run (process teardown, reply).
pub const DRAIN_MARGIN_MS: u64 = 5_000;
/// Extra grace beyond the drain timeout before the kubelet sends SIGKILL.
pub const TERMINATION_MARGIN_S: i64 = 10;

/// Everything the builders need, checked and defaulted.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedPool {
    /// Pool name; also the name of every child object.
    pub name: String,
    /// Pool namespace.
    pub namespace: String,
    /// Owner reference to the pool (absent when rendering a pool that was never stored).
    pub owner: Option<OwnerReference>,
    /// Desired pod count.
    pub replicas: i32,
    /// Executor image.
    pub image: String,
    /// Image pull secrets.
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Languages to enable; `None` enables all the image offers.
    pub languages: Option<Vec<String>>,
    /// Run slots per pod.
    pub slots: u32,
    /// Container resources (with the GPU limit added for GPU pools, and the sessions' memory
    /// added to the memory request and limit).
    pub resources: Option<ResourceRequirements>,
    /// Per-run limits.
    pub limits: ResolvedLimits,
    /// Isolation mode.
    pub isolation: IsolationMode,
    /// RuntimeClass, if any.
    pub runtime_class_name: Option<String>,
    /// Serve the HTTP port too.
    pub http: bool,
    /// Peers allowed on the executor ports.
    pub clients: Vec<NetworkPolicyPeer>,
    /// Peers allowed on the metrics port.
    pub metrics_clients: Vec<NetworkPolicyPeer>,
    /// GPU settings for GPU pools.
    pub gpu: Option<ResolvedGpu>,
    /// Merged node selector.
    pub node_selector: BTreeMap<String, String>,
    /// Pod affinity.
    pub affinity: Option<Affinity>,
    /// Pool tolerations (GPU tolerations come from [`ResolvedGpu`]).
    pub tolerations: Vec<Toleration>,
    /// Extra pod labels.
    pub pod_labels: BTreeMap<String, String>,
    /// Extra pod annotations.
    pub pod_annotations: BTreeMap<String, String>,
    /// PDB `maxUnavailable`, or `None` when the budget is disabled.
    pub max_unavailable: Option<IntOrString>,
    /// Caller authentication, when enabled.
    pub auth: Option<ResolvedAuth>,
    /// The pool's tenants (never together with `auth`).
    pub tenants: Option<Vec<ResolvedTenant>>,
    /// The result cache, when enabled.
    pub result_cache: Option<ResolvedResultCache>,
    /// False turns warm starts off (`--warm-starts=false`); true leaves the executor's default.
    pub warm_starts: bool,
    /// Sessions per pod and their memory, when the spec sizes them.
    pub sessions: Option<ResolvedSessions>,
    /// The gateway in front of the executors' HTTP port, when the pool has one.
    pub gateway: Option<ResolvedGateway>,
}

impl ResolvedPool {
    /// How long the executor waits for in-flight runs after SIGTERM: a request admitted just
    /// before may compile (up to `maxWallTime`, the compile phase's ceiling) and then run
    /// (up to `maxWallTime`).
    pub fn drain_timeout_ms(&self) -> u64 {
        self.limits
            .max_wall_time_ms
            .saturating_mul(2)
            .saturating_add(DRAIN_MARGIN_MS)
    }

    /// Pod termination grace: the drain plus a margin, so the kubelet never kills a run that
    /// was still within its allowed time.
    pub fn termination_grace_seconds(&self) -> i64 {
        let drain_s = self.drain_timeout_ms().div_ceil(1000);
        i64::try_from(drain_s)
            .unwrap_or(i64::MAX / 2)
            .saturating_add(TERMINATION_MARGIN_S)
    }

    /// Name of the gateway's Deployment, Service, NetworkPolicy, ServiceAccount, Role and
    /// RoleBinding (at most 63 characters: resolve refuses longer pool names with a gateway).
    pub fn gateway_name(&self) -> String {
        gateway_name(&self.name)
    }

    /// The gRPC target clients dial.
    pub fn endpoint(&self, cluster_domain: &str) -> String {
        format!(
            "dns:///{}.{}.svc.{}:{}",
            self.name,
            self.namespace,
            cluster_domain,
            labels::GRPC_PORT
        )
    }
}

/// Name of a pool's gateway objects.
pub fn gateway_name(pool: &str) -> String {
    format!("{pool}-gateway")
}
