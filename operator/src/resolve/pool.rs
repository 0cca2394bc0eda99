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

/// Store throughput the operator assumes for one pod pausing its sessions on SIGTERM, bytes
/// per second (a local disk or a PVC does better, S3 across a network may do worse).
pub const ASSUMED_STORE_BYTES_PER_SEC: u64 = 100 << 20;
/// The estimated grace period of a pool that sizes its sessions is at most this, seconds
/// (unless the runs' own drain is longer, or `drainGracePeriodSeconds` says otherwise).
pub const MAX_SESSION_GRACE_S: u64 = 15 * 60;

/// Time to pause `sessions` sessions whose `/work` is full (`--work-dir-bytes`, the
/// executor's default) into the store at [`ASSUMED_STORE_BYTES_PER_SEC`], ms.
pub fn session_pause_ms(sessions: u32) -> u64 {
    let bytes = u64::from(sessions).saturating_mul(super::executor_defaults::WORK_DIR_BYTES);
    bytes.saturating_mul(1000).div_ceil(ASSUMED_STORE_BYTES_PER_SEC)
}

fn grace_for(drain_ms: u64) -> i64 {
    i64::try_from(drain_ms.div_ceil(1000))
        .unwrap_or(i64::MAX / 2)
        .saturating_add(TERMINATION_MARGIN_S)
}

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
    /// How long in-flight runs may take after SIGTERM: a request admitted just before may
    /// compile (up to `maxWallTime`, the compile phase's ceiling) and then run (up to
    /// `maxWallTime`).
    pub fn runs_drain_ms(&self) -> u64 {
        self.limits
            .max_wall_time_ms
            .saturating_mul(2)
            .saturating_add(DRAIN_MARGIN_MS)
    }

    /// How long the executor drains after SIGTERM (`--drain-timeout-ms`): the runs' drain,
    /// and for a pool that sizes its sessions the time to pause every one of them into the
    /// store ([`session_pause_ms`]), the two together at most [`MAX_SESSION_GRACE_S`] less
    /// the margin (never below the runs' drain); or `drainGracePeriodSeconds` less the margin.
    pub fn drain_timeout_ms(&self) -> u64 {
        let runs = self.runs_drain_ms();
        let Some(sessions) = self.sessions.as_ref().filter(|s| s.max_per_pod > 0) else {
            return runs;
        };
        let margin_ms = TERMINATION_MARGIN_S.unsigned_abs() * 1000;
        if let Some(grace) = sessions.grace_override_s {
            return grace.unsigned_abs().saturating_mul(1000).saturating_sub(margin_ms);
        }
        let cap = MAX_SESSION_GRACE_S * 1000 - margin_ms;
        runs.saturating_add(session_pause_ms(sessions.max_per_pod))
            .min(cap)
            .max(runs)
    }

    /// Pod termination grace: the drain plus a margin, so the kubelet never kills a run (or a
    /// pause) that was still within its allowed time.
    pub fn termination_grace_seconds(&self) -> i64 {
        grace_for(self.drain_timeout_ms())
    }

    /// The gateway's termination grace: the runs' drain only (sessions are paused by the
    /// executors, not through the gateway).
    pub fn runs_termination_grace_seconds(&self) -> i64 {
        grace_for(self.runs_drain_ms())
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
