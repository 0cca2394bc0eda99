//! The `SandboxPool` custom resource (`sandpool.dev/v1alpha1`).
//!
//! Field names are the user-facing contract. Values the schema can check are checked here
//! (patterns, minimums, CEL rules); everything else is checked by [`crate::resolve`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, LocalObjectReference, ResourceRequirements, Toleration};
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};

/// Go-style duration as Kubernetes writes it (`500ms`, `10s`, `1m30s`).
const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";
/// Kubernetes resource quantity (`512Mi`, `2Gi`, `1000000`).
const QUANTITY_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$";

/// A pool of identical Sandpool executors that only the pool's clients can reach.
// The printer columns repeat `type_ = "integer"`, which this lint mistakes for a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "sandpool.dev",
    version = "v1alpha1",
    kind = "SandboxPool",
    namespaced,
    shortname = "sbp",
    category = "sandpool",
    status = "SandboxPoolStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A pool of Sandpool executors that run untrusted code for the pool's clients.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    // Child objects take the pool's name, and a Service name is at most 63 characters.
    validation = Rule::new("size(self.metadata.name) <= 63").message("metadata.name must be at most 63 characters (the pool's Service takes its name)"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Pods-Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(name = "Reason", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].reason"#),
    printcolumn(name = "Languages", type_ = "string", json_path = ".spec.languages"),
    printcolumn(name = "GPU", type_ = "integer", json_path = ".spec.gpu.count"),
    printcolumn(name = "Sessions", type_ = "integer", json_path = ".status.sessions.open"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
// Restricted runs share one uid, so a session's files and processes could not be kept from
// the pool's other runs: the executor refuses every session there (docs/sessions.md). The
// operator refuses the same when the mode comes from its `--default-isolation`, which this
// rule cannot see (`resolve::restricted`).
#[x_kube(
    validation = Rule::new("!has(self.isolation) || !has(self.isolation.mode) || self.isolation.mode != 'restricted' || !has(self.sessions) || self.sessions.maxPerPod == 0")
        .message("spec.sessions: isolation mode restricted serves no sessions (its runs share one uid, so a session's files and processes could not be kept from other runs); leave spec.sessions out, set maxPerPod: 0, or use isolation mode namespaces")
        .field_path(".sessions")
        .reason(Reason::FieldValueForbidden)
)]
pub struct SandboxPoolSpec {
    /// Number of executor pods.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// Executor image; defaults to the operator's `--executor-image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// Secrets for pulling the executor image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// Languages the pool offers; defaults to every language the image offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), inner(regex(pattern = r"^[a-z][a-z0-9_+#.-]*$")))]
    pub languages: Option<Vec<String>>,
    /// Run slots per pod; defaults to the CPU request rounded down (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub concurrency: Option<i32>,
    /// Compute resources of each executor container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Per-run limits: defaults applied when a request names none, and ceilings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RunLimits>,
    /// How each run is isolated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// Who may reach the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
    /// Makes this a GPU pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuSpec>,
    /// Node selector for the executor pods (merged with `gpu.nodeSelector`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Affinity of the executor pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Tolerations of the executor pods (added to the GPU tolerations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Extra labels and annotations for the executor pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateMeta>,
    /// The pool's PodDisruptionBudget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_budget: Option<DisruptionBudget>,
    /// Caller authentication with a shared bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,
    /// Each executor's result cache: identical requests answered without running (off unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_cache: Option<ResultCache>,
    /// Warm starts: runs of languages that have them (Python) fork from a per-slot
    /// pre-initialised interpreter (docs/warm-starts.md).
    /// Unset or true: the executor's default (on); false: every run starts cold. Restricted
    /// pools start every run cold either way (warm starts need CAP_SYS_ADMIN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_starts: Option<bool>,
    /// Stateful sessions (docs/sessions.md): how many each executor pod holds open and the
    /// memory they are counted at. The executor container's memory request (and limit, when
    /// set) grows by the sessions' memory. Unset: the executor's own defaults, with no memory
    /// set aside for sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Sessions>,
    /// Callers of the pool, each with its own bearer token, share and caps
    /// (docs/tenants.md). Unset: no tenants (see `auth`); cannot be set with `auth.enabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub tenants: Option<Vec<Tenant>>,
    /// The pool's gateway: one HTTP address that spreads SandboxFusion/Piston requests over
    /// the executors and sends E2B session calls to the pod holding the session
    /// (docs/operator.md, "Gateway"). Rendered only when `access.http` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<Gateway>,
}

fn default_replicas() -> i32 {
    1
}

/// Per-run limits. Durations are Go-style (`10s`), sizes are quantities (`512Mi`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.wallTime) || !has(self.maxWallTime) || duration(self.wallTime) <= duration(self.maxWallTime)").message("wallTime must not exceed maxWallTime"),
    validation = Rule::new("!has(self.cpuTime) || !has(self.maxCpuTime) || duration(self.cpuTime) <= duration(self.maxCpuTime)").message("cpuTime must not exceed maxCpuTime"),
    validation = Rule::new("!has(self.memory) || !has(self.maxMemory) || quantity(self.memory).compareTo(quantity(self.maxMemory)) <= 0").message("memory must not exceed maxMemory"),
    validation = Rule::new("!has(self.output) || !has(self.maxOutput) || quantity(self.output).compareTo(quantity(self.maxOutput)) <= 0").message("output must not exceed maxOutput"),
    validation = Rule::new("!has(self.processes) || !has(self.maxProcesses) || self.processes <= self.maxProcesses").message("processes must not exceed maxProcesses")
)]
pub struct RunLimits {
    /// Default wall-clock limit of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = DURATION_PATTERN))]
    pub wall_time: Option<String>,
    /// Largest wall-clock limit a run may ask for; also sizes the pods' termination grace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = DURATION_PATTERN))]
    pub max_wall_time: Option<String>,
    /// Default CPU-time limit of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = DURATION_PATTERN))]
    pub cpu_time: Option<String>,
    /// Largest CPU-time limit a run may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = DURATION_PATTERN))]
    pub max_cpu_time: Option<String>,
    /// Default memory limit of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = QUANTITY_PATTERN))]
    pub memory: Option<String>,
    /// Largest memory limit a run may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = QUANTITY_PATTERN))]
    pub max_memory: Option<String>,
    /// Default cap on a run's captured output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = QUANTITY_PATTERN))]
    pub output: Option<String>,
    /// Largest output cap a run may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = QUANTITY_PATTERN))]
    pub max_output: Option<String>,
    /// Default process limit of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub processes: Option<i32>,
    /// Largest process limit a run may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_processes: Option<i32>,
}

/// How runs are isolated from each other and from the pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Isolation {
    /// Isolation mode; defaults to the operator's `--default-isolation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<IsolationMode>,
    /// RuntimeClass for the pods (e.g. `gvisor`, `kata`); defaults to the operator's
    /// `--default-runtime-class`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub runtime_class_name: Option<String>,
}

/// Executor isolation mode (the executor's `--isolation`).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum IsolationMode {
    /// Per-run Linux namespaces, cgroups and an unprivileged uid; needs a few capabilities.
    #[default]
    Namespaces,
    /// Fits the Pod Security Standard "restricted": no capabilities, non-root; runs are
    /// confined by Landlock, seccomp and rlimits and share one uid; no GPU.
    Restricted,
}

impl IsolationMode {
    /// The executor's spelling of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationMode::Namespaces => "namespaces",
            IsolationMode::Restricted => "restricted",
        }
    }
}

/// Who may connect to the pool.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Access {
    /// NetworkPolicy peers allowed to reach the executor ports. Unset: pods labelled
    /// `role=sandbox-user` in the pool's namespace. An empty list admits nobody.
    /// A `podSelector` and `namespaceSelector` in the same entry must both match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<Vec<NetworkPolicyPeer>>,
    /// Also serve the SandboxFusion-compatible HTTP API on port 8080.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<bool>,
    /// NetworkPolicy peers allowed to scrape `/metrics` on port 9090. Unset: nobody.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_clients: Option<Vec<NetworkPolicyPeer>>,
    /// Allow peers that admit every pod (an empty `podSelector` or `namespaceSelector`, or
    /// an `ipBlock` of 0.0.0.0/0 or ::/0); refused unless this is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_all: Option<bool>,
}

/// Caller authentication: the executors require `authorization: Bearer <token>` on gRPC
/// and HTTP (health and metrics stay open on their own ports).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Auth {
    /// Require the token (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Secret in the pool's namespace holding the token under the key `token`. Unset: the
    /// operator creates `<pool>-auth` with a random token if it does not exist, and never
    /// overwrites it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
}

/// One caller identity of the pool: its token (from a Secret the pool author creates), its
/// share of the run slots and its caps, each per executor pod (docs/tenants.md).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    /// Tenant name: the `tenant` label of metrics and the name in capture records; not
    /// `anonymous`, the executor's name for callers without auth.
    #[schemars(length(min = 1, max = 63), regex(pattern = TENANT_NAME_PATTERN))]
    pub name: String,
    /// Secret key holding the tenant's bearer token. The operator never reads it: it is
    /// mounted into the executor pods, which re-read it when it is rotated.
    pub token_secret_ref: SecretKeyRef,
    /// Share of slots among tenants at the same priority (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub weight: Option<i32>,
    /// Runs at once on each executor pod, at least 1 (unset: every slot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_concurrency: Option<i32>,
    /// Requests waiting for a slot on each executor pod (default: the executor's queue size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_queue: Option<i32>,
    /// Sessions open on each executor pod (default: the executor's session cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_sessions: Option<i32>,
    /// Highest priority the tenant may ask for (default interactive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<Priority>,
}

/// A tenant name (as the executor's tenants file requires).
pub const TENANT_NAME_PATTERN: &str = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$";
/// A Secret data key (Kubernetes: `[-._a-zA-Z0-9]+`).
pub const SECRET_KEY_PATTERN: &str = r"^[-._a-zA-Z0-9]+$";

/// One key of a Secret in the pool's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key within the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY_PATTERN))]
    pub key: String,
}

/// How urgent a request is; tenants are capped at one (docs/tenants.md).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Served first (weight 16).
    #[default]
    Interactive,
    /// The default (weight 4).
    Normal,
    /// Bulk work (weight 1).
    Batch,
}

impl Priority {
    /// The executor's spelling of the priority.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Normal => "normal",
            Priority::Batch => "batch",
        }
    }
}

/// Sessions per executor pod (`--max-sessions`, `--session-idle-bytes`,
/// `--session-memory-bytes`). An idle session holds no run slot, only memory, so a pod's
/// sessions are sized by memory: each counts at least `idleMemory`, all together at most
/// `memory`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.idleMemory) || (quantity(self.idleMemory).compareTo(quantity('4Mi')) >= 0 && quantity(self.idleMemory).compareTo(quantity('4Gi')) <= 0)").message("sessions.idleMemory must be between 4Mi and 4Gi"),
    validation = Rule::new("!has(self.memory) || self.maxPerPod > 0").message("sessions.memory must be left out when maxPerPod is 0 (the pool serves no sessions)"),
    validation = Rule::new("!has(self.spares) || self.spares == 0 || self.maxPerPod > 0").message("sessions.spares must be 0 when maxPerPod is 0 (the pool serves no sessions)")
)]
pub struct Sessions {
    /// Sessions open at once on each executor pod; 0: the pool serves no sessions.
    #[schemars(range(min = 0, max = 4096))]
    pub max_per_pod: i32,
    /// Memory each open session is counted at, at least (4Mi..4Gi, default 32Mi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = QUANTITY_PATTERN))]
    pub idle_memory: Option<String>,
    /// Memory all sessions of a pod may hold together, measured from their cgroups; a session
    /// create past it is refused (RESOURCE_EXHAUSTED). At least `maxPerPod` × `idleMemory`
    /// (the default), at most 16Ti.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = QUANTITY_PATTERN))]
    pub memory: Option<String>,
    /// Python interpreters each pod keeps started ahead of demand (`--session-spares`), so a
    /// new session's first call finds one ready (0..64, default 0). The container's memory
    /// grows by `spares` × `idleMemory` beside the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 64))]
    pub spares: Option<i32>,
    /// Pause a session (filesystem mode) once it has had no call for this long
    /// (`--session-pause-after-idle-ms`, a Go duration such as `2m`); unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = DURATION_PATTERN))]
    pub pause_after_idle: Option<String>,
    /// Where paused sessions are kept (docs/sessions.md, "The session store"). Unset: a
    /// directory in the pod's own work root, which is lost with the pod (sessions paused
    /// there cannot be resumed by another pod, nor survive this one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<SessionStore>,
    /// The executor pods' `terminationGracePeriodSeconds`, instead of the one the operator
    /// works out from the sessions' number and size (docs/operator.md, "Grace period"); the
    /// executor's drain timeout is this less 10 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 15, max = 86400))]
    pub drain_grace_period_seconds: Option<i64>,
}

/// The session store of a pool: a PVC every executor pod mounts, or S3-compatible object
/// storage. Its bounds and TTL apply to either.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!(has(self.pvc) && has(self.s3))").message("sessions.store: set pvc or s3, not both").reason(Reason::FieldValueForbidden),
    validation = Rule::new("!has(self.s3) || has(self.encryptionKeySecret)").message("sessions.store.encryptionKeySecret is required with s3: the bucket is shared, so the executor seals every blob (XChaCha20-Poly1305) and refuses to start without a key").reason(Reason::FieldValueRequired)
)]
pub struct SessionStore {
    /// A PersistentVolumeClaim in the pool's namespace mounted into every executor pod;
    /// executors resume each other's sessions only if it is shared (ReadWriteMany).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcStore>,
    /// S3-compatible object storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Store>,
    /// The 32-byte key blobs are sealed with (raw, or 64 hex digits), from a Secret in the
    /// pool's namespace (`--session-store-key-file`). Required with `s3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key_secret: Option<SecretKeyRef>,
    /// Largest paused session or snapshot (`--session-store-blob-bytes`; executor default 1Gi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = QUANTITY_PATTERN))]
    pub max_blob_size: Option<String>,
    /// What one tenant's paused sessions and snapshots may hold in the store in all
    /// (`--session-store-tenant-bytes`; executor default 10Gi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = QUANTITY_PATTERN))]
    pub tenant_quota: Option<String>,
    /// How long a paused session or snapshot is kept unless its caller says otherwise
    /// (`--session-store-ttl-secs`, a Go duration; executor default 168h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = DURATION_PATTERN))]
    pub ttl: Option<String>,
}

/// A PVC session store.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PvcStore {
    /// The claim's name, in the pool's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: String,
}

/// An S3-compatible session store.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct S3Store {
    /// The bucket (it must exist).
    #[schemars(length(min = 3, max = 63))]
    pub bucket: String,
    /// `http(s)://host:port` of the service; unset: AWS's for the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://[^\s/]+(/.*)?$"))]
    pub endpoint: Option<String>,
    /// The region (default `us-east-1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub region: Option<String>,
    /// Keys below this prefix in the bucket (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub prefix: Option<String>,
    /// A Secret in the pool's namespace with keys `access_key_id` and `secret_access_key`,
    /// mounted as files for the executor (`--session-store-s3-credentials-dir`).
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret: String,
}

/// The executor's result cache (`--result-cache-*`). Per pod: pods do not share it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResultCache {
    /// Responses each pod keeps; unset or 0 turns the cache off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub entries: Option<i64>,
    /// Memory the cache may hold per pod (default 64Mi); it lives in the executor's own
    /// memory, beside the runs', so a memory limit must leave room for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = QUANTITY_PATTERN))]
    pub max_bytes: Option<String>,
    /// Also cache TIME_LIMIT_EXCEEDED, WALL_TIME_LIMIT_EXCEEDED and MEMORY_LIMIT_EXCEEDED for
    /// every request, not only for requests that ask (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_verdicts: Option<bool>,
}

/// GPU settings of a GPU pool.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.count >= 1").message("gpu.count must be at least 1"))]
pub struct GpuSpec {
    /// GPUs per pod.
    #[serde(default = "default_gpu_count")]
    pub count: i64,
    /// Extended resource that counts the GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub resource_name: Option<String>,
    /// Extra node selector for GPU nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Tolerations for GPU nodes. Unset: tolerate the `<resourceName>` NoSchedule taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
}

fn default_gpu_count() -> i64 {
    1
}

/// Extra metadata for the executor pods.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateMeta {
    /// Extra pod labels; may not override the labels the operator selects on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Extra pod annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// The pool's PodDisruptionBudget.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionBudget {
    /// Create the budget (default true); false removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Pods that may be down at once during voluntary disruptions (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}

/// The pool's gateway (`sandpool-gateway`, shipped in the operator's image).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Gateway {
    /// Run the gateway when the pool serves HTTP (default true); false removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Gateway pods (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 20))]
    pub replicas: Option<i32>,
    /// Compute resources of each gateway container. Unset: requests cpu 100m and memory
    /// 64Mi, limit memory 256Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Gateway image; defaults to the operator's `--gateway-image` (the operator's own image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
}

/// Observed state of the pool's gateway.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    /// Gateway pods that exist.
    #[serde(default)]
    pub replicas: i32,
    /// Gateway pods that pass readiness (they know at least one executor).
    #[serde(default)]
    pub ready_replicas: i32,
    /// HTTP address of the gateway, e.g. `http://python-gateway.evals.svc.cluster.local:8080`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// Session capacity of the pool as configured, and the sessions open on its pods when the
/// custom metrics API serves them. The operator does not reach the executor pods: each pod
/// exports `sandpool_sessions` on its metrics port for Prometheus to scrape, and the live
/// fields are what prometheus-adapter serves of it (the rule in
/// `manifests/examples/hpa-sessions.yaml`); without it they are absent (docs/operator.md,
/// "Status").
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SessionsStatus {
    /// Sessions each executor pod may hold open (`spec.sessions.maxPerPod`).
    #[serde(default)]
    pub max_per_pod: i32,
    /// Sessions the ready pods may hold open together: `maxPerPod` × `readyReplicas`.
    #[serde(default)]
    pub capacity: i64,
    /// Memory each pod's sessions may hold together (`spec.sessions.memory` or its
    /// default), as a quantity; the pod's memory request includes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_per_pod: Option<String>,
    /// Sessions open on the pool's pods together, as of the last reconcile, from the custom
    /// metrics API (`sandpool_sessions`); absent when that API does not serve it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<i64>,
    /// The most sessions open on one pod (against `maxPerPod`), with `open`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_per_pod_max: Option<i64>,
    /// Pods the custom metrics API reported sessions for, with `open`: fewer than
    /// `replicas` means `open` leaves some pods out (not yet scraped, or gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reporting_pods: Option<i32>,
}

/// Observed state of a pool.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxPoolStatus {
    /// Executor pods that exist.
    #[serde(default)]
    pub replicas: i32,
    /// Executor pods that pass readiness.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Label selector of the pool's pods (for the scale subresource and HPA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// gRPC target clients dial, e.g. `dns:///python.evals.svc.cluster.local:50051`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The gateway, when the pool has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayStatus>,
    /// Session capacity as configured, when the spec sizes sessions (`spec.sessions`), and
    /// the sessions open when the custom metrics API serves `sandpool_sessions` (the
    /// operator does not connect to executor pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionsStatus>,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Progressing and Degraded (KEP-1623).
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The CustomResourceDefinition as YAML, exactly as committed at `manifests/crd.yaml`.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::from("# Generated by `sandpool-operator crd` from operator/src/crd.rs; do not edit.\n");
    out.push_str(&serde_yaml::to_string(&SandboxPool::crd())?);
    Ok(out)
}

#[cfg(test)]
mod tests;
