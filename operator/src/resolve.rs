//! Turns a `SandboxPool` into a fully defaulted, checked [`ResolvedPool`], or an
//! [`InvalidSpec`] naming the field the operator cannot honour.
//!
//! The CRD schema catches most mistakes at admission; this catches the rest (and everything,
//! for `render` and for API servers that skip CEL), so builders never see unchecked input.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Affinity, LocalObjectReference, ResourceRequirements, Toleration};
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::crd::{IsolationMode, RunLimits, SandboxPool, SandboxPoolSpec};
use crate::defaults::PoolDefaults;
use crate::labels;
use crate::units;

/// Default GPU extended resource.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Largest run time the pool allows when `limits.maxWallTime` is unset.
pub const DEFAULT_MAX_WALL_TIME_MS: u64 = 60_000;
/// The executor's own defaults and maximums (its flags' defaults), which apply when a spec
/// leaves a limit unset: a default above its maximum would be clamped by the executor.
pub mod executor_defaults {
    /// `--default-wall-time-ms`.
    pub const WALL_TIME_MS: u64 = 10_000;
    /// `--default-cpu-time-ms` and `--max-cpu-time-ms`.
    pub const CPU_TIME_MS: (u64, u64) = (10_000, 60_000);
    /// `--default-memory-bytes` and `--max-memory-bytes`.
    pub const MEMORY_BYTES: (u64, u64) = (512 << 20, 4096 << 20);
    /// `--default-output-bytes` and `--max-output-bytes`.
    pub const OUTPUT_BYTES: (u64, u64) = (8 << 20, 64 << 20);
    /// `--default-processes` and `--max-processes`.
    pub const PROCESSES: (u64, u64) = (256, 1024);
}
/// Memory request per run slot of a GPU pool that names none (GPU pools are never BestEffort).
pub const GPU_MEMORY_REQUEST_PER_SLOT_GI: u32 = 2;
/// Name of the token key in a pool's auth Secret.
pub const AUTH_TOKEN_KEY: &str = "token";
/// Extra time the executor's drain gets beyond the longest run (process teardown, reply).
pub const DRAIN_MARGIN_MS: u64 = 5_000;
/// The result cache's size when a pool enables it without `maxBytes` (the executor's default).
pub const DEFAULT_RESULT_CACHE_BYTES: u64 = 64 << 20;
/// Memory the executor keeps for itself inside the container: a run may use at most the
/// container's memory limit minus this (plus [`ZYGOTE_MEMORY_PER_SLOT`] per slot with warm
/// starts, see [`executor_headroom`]).
pub const EXECUTOR_MEMORY_HEADROOM: u64 = 256 << 20;
/// What one slot's Python zygotes keep resident in the executor's own memory: with the
/// shipped table about 19 MiB for the plain one and 34 MiB for the one with numpy, once a
/// program has named numpy (docs/warm-starts.md).
pub const ZYGOTE_MEMORY_PER_SLOT: u64 = 64 << 20;

/// The executor's own memory in a pool's container: the base headroom, plus a zygote per
/// slot where runs start warm (namespaces mode with warm starts on; restricted mode has none).
pub fn executor_headroom(slots: u32, warm_starts: bool) -> u64 {
    EXECUTOR_MEMORY_HEADROOM
        + if warm_starts {
            u64::from(slots) * ZYGOTE_MEMORY_PER_SLOT
        } else {
            0
        }
}
/// Extra grace beyond the drain timeout before the kubelet sends SIGKILL.
pub const TERMINATION_MARGIN_S: i64 = 10;

/// A spec the schema admitted but the operator cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSpec {
    /// Path of the offending field, e.g. `spec.limits.wallTime`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl InvalidSpec {
    fn new(field: impl Into<String>, message: impl ToString) -> Self {
        Self {
            field: field.into(),
            message: message.to_string(),
        }
    }
}

/// Per-run limits in the executor's units. `None` leaves the executor's own default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedLimits {
    /// `--default-wall-time-ms`.
    pub wall_time_ms: Option<u64>,
    /// `--max-wall-time-ms`; always set because it sizes the drain and termination grace.
    pub max_wall_time_ms: u64,
    /// `--default-cpu-time-ms`.
    pub cpu_time_ms: Option<u64>,
    /// `--max-cpu-time-ms`.
    pub max_cpu_time_ms: Option<u64>,
    /// `--default-memory-bytes`.
    pub memory_bytes: Option<u64>,
    /// `--max-memory-bytes`.
    pub max_memory_bytes: Option<u64>,
    /// `--default-output-bytes`.
    pub output_bytes: Option<u64>,
    /// `--max-output-bytes`.
    pub max_output_bytes: Option<u64>,
    /// `--default-processes`.
    pub processes: Option<u64>,
    /// `--max-processes`.
    pub max_processes: Option<u64>,
}

/// GPU settings with defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedGpu {
    /// GPUs per pod.
    pub count: i64,
    /// Extended resource name.
    pub resource_name: String,
    /// Tolerations for GPU nodes.
    pub tolerations: Vec<Toleration>,
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
    /// Container resources (with the GPU limit added for GPU pools).
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
    /// The result cache, when enabled.
    pub result_cache: Option<ResolvedResultCache>,
    /// False turns warm starts off (`--warm-starts=false`); true leaves the executor's default.
    pub warm_starts: bool,
}

/// The executor's result cache, when enabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedResultCache {
    /// `--result-cache-entries`.
    pub entries: u64,
    /// `--result-cache-bytes`.
    pub bytes: u64,
    /// `--result-cache-limit-verdicts`.
    pub limit_verdicts: bool,
}

/// Where a pool's bearer token lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAuth {
    /// Secret holding the token under [`AUTH_TOKEN_KEY`].
    pub secret_name: String,
    /// The operator creates the Secret if it does not exist (never overwriting it).
    pub create: bool,
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

/// The default client peer: pods labelled `role=sandbox-user` in the pool's namespace.
pub fn default_clients() -> Vec<NetworkPolicyPeer> {
    vec![NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("role".to_owned(), "sandbox-user".to_owned())])),
            ..Default::default()
        }),
        ..Default::default()
    }]
}

/// Checks and defaults a pool. `namespace` is used when the object carries none (rendering).
pub fn resolve(pool: &SandboxPool, defaults: &PoolDefaults, namespace: &str) -> Result<ResolvedPool, InvalidSpec> {
    let spec = &pool.spec;
    let name = pool.name_any();
    check_name(&name)?;
    let namespace = pool.namespace().unwrap_or_else(|| namespace.to_owned());

    if spec.replicas < 0 {
        return Err(InvalidSpec::new("spec.replicas", "must not be negative"));
    }
    let image = spec.image.clone().unwrap_or_else(|| defaults.executor_image.clone());
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        return Err(InvalidSpec::new("spec.image", "must be a non-empty image reference"));
    }

    let languages = match &spec.languages {
        None => None,
        Some(list) => Some(check_languages(list)?),
    };

    let container_memory = container_memory_limit(spec.resources.as_ref())?;

    let gpu = match &spec.gpu {
        None => None,
        Some(g) => {
            if g.count < 1 {
                return Err(InvalidSpec::new("spec.gpu.count", "must be at least 1"));
            }
            let resource_name = g
                .resource_name
                .clone()
                .unwrap_or_else(|| DEFAULT_GPU_RESOURCE.to_owned());
            if !resource_name.contains('/') || resource_name.chars().any(char::is_whitespace) {
                return Err(InvalidSpec::new(
                    "spec.gpu.resourceName",
                    "must be an extended resource name such as nvidia.com/gpu",
                ));
            }
            let tolerations = g.tolerations.clone().unwrap_or_else(|| {
                vec![Toleration {
                    key: Some(resource_name.clone()),
                    operator: Some("Exists".to_owned()),
                    effect: Some("NoSchedule".to_owned()),
                    ..Default::default()
                }]
            });
            Some(ResolvedGpu {
                count: g.count,
                resource_name,
                tolerations,
            })
        }
    };

    let mut resources = resolve_resources(spec.resources.clone(), gpu.as_ref())?;
    let slots = match spec.concurrency {
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| InvalidSpec::new("spec.concurrency", "must be at least 1"))?,
        None => slots_from_cpu(resources.as_ref())?,
    };
    if gpu.is_some() {
        default_gpu_requests(&mut resources, slots);
    }

    let isolation_spec = spec.isolation.clone().unwrap_or_default();
    let isolation = isolation_spec.mode.unwrap_or(defaults.isolation);
    if isolation == IsolationMode::Restricted {
        let from_default = isolation_spec.mode.is_none();
        check_restricted(spec, from_default)?;
    }
    let warm_starts = spec.warm_starts.unwrap_or(true);
    let headroom = executor_headroom(slots, warm_starts && isolation == IsolationMode::Namespaces);
    let limits = resolve_limits(
        spec.limits.as_ref().unwrap_or(&RunLimits::default()),
        container_memory,
        headroom,
    )?;
    let result_cache = resolve_result_cache(spec.result_cache.as_ref(), container_memory, headroom)?;
    let runtime_class_name = isolation_spec
        .runtime_class_name
        .or_else(|| defaults.runtime_class_name.clone());

    let access = spec.access.clone().unwrap_or_default();
    let allow_all = access.allow_all.unwrap_or(false);
    let clients = access.clients.unwrap_or_else(default_clients);
    check_peers("spec.access.clients", &clients, allow_all)?;
    let metrics_clients = access.metrics_clients.unwrap_or_default();
    check_peers("spec.access.metricsClients", &metrics_clients, allow_all)?;

    let mut node_selector = spec.node_selector.clone().unwrap_or_default();
    if let Some(gpu_selector) = spec.gpu.as_ref().and_then(|g| g.node_selector.as_ref()) {
        for (key, value) in gpu_selector {
            match node_selector.get(key) {
                Some(existing) if existing != value => {
                    return Err(InvalidSpec::new(
                        format!("spec.gpu.nodeSelector[{key:?}]"),
                        format!("conflicts with spec.nodeSelector ({existing:?} vs {value:?})"),
                    ));
                }
                _ => {
                    node_selector.insert(key.clone(), value.clone());
                }
            }
        }
    }

    let template = spec.pod_template.clone().unwrap_or_default();
    let pod_labels = template.labels.unwrap_or_default();
    if let Some(key) = pod_labels.keys().find(|k| labels::is_reserved(k)) {
        return Err(InvalidSpec::new(
            format!("spec.podTemplate.labels[{key:?}]"),
            "is set by the operator and may not be overridden",
        ));
    }

    let budget = spec.disruption_budget.clone().unwrap_or_default();
    let max_unavailable = if budget.enabled == Some(false) {
        None
    } else {
        let value = budget.max_unavailable.unwrap_or(IntOrString::Int(1));
        check_max_unavailable(&value)?;
        Some(value)
    };

    let auth = spec
        .auth
        .as_ref()
        .filter(|a| a.enabled == Some(true))
        .map(|a| match &a.secret_name {
            Some(secret_name) => ResolvedAuth {
                secret_name: secret_name.clone(),
                create: false,
            },
            None => ResolvedAuth {
                secret_name: format!("{name}-auth"),
                create: true,
            },
        });

    Ok(ResolvedPool {
        // Foreground deletion of the pool waits for its children.
        owner: pool
            .controller_owner_ref(&())
            .filter(|o| !o.uid.is_empty())
            .map(|o| OwnerReference {
                block_owner_deletion: Some(true),
                ..o
            }),
        name,
        namespace,
        replicas: spec.replicas,
        image,
        image_pull_secrets: spec.image_pull_secrets.clone().unwrap_or_default(),
        languages,
        slots,
        resources,
        limits,
        isolation,
        runtime_class_name,
        http: access.http.unwrap_or(false),
        clients,
        metrics_clients,
        gpu,
        node_selector,
        affinity: spec.affinity.clone(),
        tolerations: spec.tolerations.clone().unwrap_or_default(),
        pod_labels,
        pod_annotations: template.annotations.unwrap_or_default(),
        max_unavailable,
        auth,
        result_cache,
        warm_starts,
    })
}

/// The cache's settings; it lives in the executor's own memory, so a container memory
/// limit must hold it and the executor's headroom.
fn resolve_result_cache(
    spec: Option<&crate::crd::ResultCache>,
    container_memory: Option<u64>,
    headroom: u64,
) -> Result<Option<ResolvedResultCache>, InvalidSpec> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let entries = match spec.entries {
        None | Some(0) => return Ok(None),
        Some(n) => {
            u64::try_from(n).map_err(|_| InvalidSpec::new("spec.resultCache.entries", "must not be negative"))?
        }
    };
    let bytes = match &spec.max_bytes {
        Some(text) => units::bytes(text).map_err(|e| InvalidSpec::new("spec.resultCache.maxBytes", e))?,
        None => DEFAULT_RESULT_CACHE_BYTES,
    };
    if bytes == 0 {
        return Err(InvalidSpec::new(
            "spec.resultCache.maxBytes",
            "must be positive (set entries to 0 to turn the cache off)",
        ));
    }
    if let Some(container) = container_memory
        && bytes.saturating_add(headroom) >= container
    {
        return Err(InvalidSpec::new(
            "spec.resultCache.maxBytes",
            format!(
                "{} and the executor's own headroom of {} do not fit spec.resources.limits[\"memory\"] ({})",
                show_bytes(bytes),
                show_bytes(headroom),
                show_bytes(container)
            ),
        ));
    }
    Ok(Some(ResolvedResultCache {
        entries,
        bytes,
        limit_verdicts: spec.limit_verdicts.unwrap_or(false),
    }))
}

/// Child objects are named after the pool, and a Service name must be a DNS-1035 label.
fn check_name(name: &str) -> Result<(), InvalidSpec> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(InvalidSpec::new(
            "metadata.name",
            "must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter, at most 63 characters) because the pool's Service takes its name",
        ))
    }
}

/// Pod annotations that set a container's AppArmor or seccomp profile (the pre-field
/// spellings, which the kubelet and Pod Security admission still read for AppArmor).
pub const SECURITY_ANNOTATION_PREFIXES: [&str; 3] = [
    "container.apparmor.security.beta.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/pod",
];

/// What `restricted` mode cannot honour. Its pod must stay inside Pod Security "restricted"
/// and keep the confinement the executor adds, so nothing in the spec may loosen either.
/// The CRD offers no volumes, host options or identities, so these are the only ways in.
fn check_restricted(spec: &SandboxPoolSpec, from_default: bool) -> Result<(), InvalidSpec> {
    let mode = if from_default {
        "isolation mode restricted (the operator's --default-isolation)"
    } else {
        "isolation mode restricted"
    };
    if spec.gpu.is_some() {
        return Err(InvalidSpec::new(
            "spec.gpu",
            format!(
                "GPU pools need isolation mode namespaces: {mode} gives runs no GPU devices; set spec.isolation.mode: namespaces"
            ),
        ));
    }
    let annotations = spec.pod_template.as_ref().and_then(|t| t.annotations.as_ref());
    if let Some(key) = annotations
        .into_iter()
        .flat_map(BTreeMap::keys)
        .find(|k| SECURITY_ANNOTATION_PREFIXES.iter().any(|p| k.starts_with(p)))
    {
        return Err(InvalidSpec::new(
            format!("spec.podTemplate.annotations[{key:?}]"),
            format!(
                "sets a seccomp or AppArmor profile, which {mode} fixes (RuntimeDefault seccomp; Pod Security \"restricted\" refuses an unconfined one)"
            ),
        ));
    }
    Ok(())
}

fn check_languages(list: &[String]) -> Result<Vec<String>, InvalidSpec> {
    if list.is_empty() {
        return Err(InvalidSpec::new(
            "spec.languages",
            "must name at least one language (omit it to enable all)",
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, lang) in list.iter().enumerate() {
        let valid = lang.starts_with(|c: char| c.is_ascii_lowercase())
            && lang
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_+#.-".contains(c));
        if !valid {
            return Err(InvalidSpec::new(
                format!("spec.languages[{i}]"),
                format!("{lang:?} is not a language name"),
            ));
        }
        if !seen.insert(lang.as_str()) {
            return Err(InvalidSpec::new(
                format!("spec.languages[{i}]"),
                format!("{lang:?} is listed twice"),
            ));
        }
    }
    Ok(list.to_vec())
}

fn resolve_limits(
    spec: &RunLimits,
    container_memory: Option<u64>,
    headroom: u64,
) -> Result<ResolvedLimits, InvalidSpec> {
    let ms = |field: &str, value: &Option<String>| -> Result<Option<u64>, InvalidSpec> {
        value
            .as_deref()
            .map(|text| units::duration_ms(text).map_err(|e| InvalidSpec::new(field, e)))
            .transpose()
    };
    let bytes = |field: &str, value: &Option<String>| -> Result<Option<u64>, InvalidSpec> {
        value
            .as_deref()
            .map(|text| units::bytes(text).map_err(|e| InvalidSpec::new(field, e)))
            .transpose()
    };
    let count = |field: &str, value: Option<i32>| -> Result<Option<u64>, InvalidSpec> {
        value
            .map(|n| {
                u64::try_from(n)
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| InvalidSpec::new(field, "must be at least 1"))
            })
            .transpose()
    };
    let mut max_memory = bytes("spec.limits.maxMemory", &spec.max_memory)?;
    let mut max_memory_origin = "";
    if let Some(container) = container_memory {
        let room = container
            .checked_sub(headroom)
            .filter(|room| *room > 0)
            .ok_or_else(|| {
                InvalidSpec::new(
                    "spec.resources.limits[\"memory\"]",
                    format!("must exceed the executor's own headroom of {}", show_bytes(headroom)),
                )
            })?;
        match max_memory {
            Some(max) if max > room => {
                return Err(InvalidSpec::new(
                    "spec.limits.maxMemory",
                    format!(
                        "{} does not fit spec.resources.limits[\"memory\"] ({}) less the executor's own headroom of {}",
                        show_bytes(max),
                        show_bytes(container),
                        show_bytes(headroom)
                    ),
                ));
            }
            Some(_) => {}
            None if room < executor_defaults::MEMORY_BYTES.1 => {
                max_memory = Some(room);
                max_memory_origin = " (derived from spec.resources.limits[\"memory\"] less the executor's headroom)";
            }
            None => {}
        }
    }
    let mut limits = ResolvedLimits {
        wall_time_ms: ms("spec.limits.wallTime", &spec.wall_time)?,
        max_wall_time_ms: ms("spec.limits.maxWallTime", &spec.max_wall_time)?.unwrap_or(DEFAULT_MAX_WALL_TIME_MS),
        cpu_time_ms: ms("spec.limits.cpuTime", &spec.cpu_time)?,
        max_cpu_time_ms: ms("spec.limits.maxCpuTime", &spec.max_cpu_time)?,
        memory_bytes: bytes("spec.limits.memory", &spec.memory)?,
        max_memory_bytes: max_memory,
        output_bytes: bytes("spec.limits.output", &spec.output)?,
        max_output_bytes: bytes("spec.limits.maxOutput", &spec.max_output)?,
        processes: count("spec.limits.processes", spec.processes)?,
        max_processes: count("spec.limits.maxProcesses", spec.max_processes)?,
    };
    let show_ms: fn(u64) -> String = show_ms;
    let show_bytes: fn(u64) -> String = show_bytes;
    let show_count: fn(u64) -> String = |n| n.to_string();
    let executor_max = " (the executor's default maximum)";
    let wall_origin = if spec.max_wall_time.is_none() {
        " (the default maximum)"
    } else {
        ""
    };
    // (default field, its value, the executor's default, max field, max in force, where
    // the max came from, formatter)
    let pairs = [
        (
            "wallTime",
            &mut limits.wall_time_ms,
            executor_defaults::WALL_TIME_MS,
            "maxWallTime",
            limits.max_wall_time_ms,
            wall_origin,
            show_ms,
        ),
        (
            "cpuTime",
            &mut limits.cpu_time_ms,
            executor_defaults::CPU_TIME_MS.0,
            "maxCpuTime",
            limits.max_cpu_time_ms.unwrap_or(executor_defaults::CPU_TIME_MS.1),
            if limits.max_cpu_time_ms.is_none() {
                executor_max
            } else {
                ""
            },
            show_ms,
        ),
        (
            "memory",
            &mut limits.memory_bytes,
            executor_defaults::MEMORY_BYTES.0,
            "maxMemory",
            limits.max_memory_bytes.unwrap_or(executor_defaults::MEMORY_BYTES.1),
            if spec.max_memory.is_some() {
                ""
            } else if max_memory_origin.is_empty() {
                executor_max
            } else {
                max_memory_origin
            },
            show_bytes,
        ),
        (
            "output",
            &mut limits.output_bytes,
            executor_defaults::OUTPUT_BYTES.0,
            "maxOutput",
            limits.max_output_bytes.unwrap_or(executor_defaults::OUTPUT_BYTES.1),
            if limits.max_output_bytes.is_none() {
                executor_max
            } else {
                ""
            },
            show_bytes,
        ),
        (
            "processes",
            &mut limits.processes,
            executor_defaults::PROCESSES.0,
            "maxProcesses",
            limits.max_processes.unwrap_or(executor_defaults::PROCESSES.1),
            if limits.max_processes.is_none() {
                executor_max
            } else {
                ""
            },
            show_count,
        ),
    ];
    for (field, value, executor_default, max_field, max, origin, show) in pairs {
        match *value {
            Some(v) if v > max => {
                return Err(InvalidSpec::new(
                    format!("spec.limits.{field}"),
                    format!(
                        "{} exceeds spec.limits.{max_field} of {}{origin}; the executor would lower it silently",
                        show(v),
                        show(max)
                    ),
                ));
            }
            // The executor would lower its own default to the maximum; say so in its flags.
            None if executor_default > max => *value = Some(max),
            _ => {}
        }
    }
    Ok(limits)
}

fn show_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

fn show_bytes(bytes: u64) -> String {
    const GI: u64 = 1 << 30;
    const MI: u64 = 1 << 20;
    if bytes.is_multiple_of(GI) {
        format!("{}Gi", bytes / GI)
    } else if bytes.is_multiple_of(MI) {
        format!("{}Mi", bytes / MI)
    } else {
        bytes.to_string()
    }
}

/// The container's memory limit in bytes, if set.
fn container_memory_limit(resources: Option<&ResourceRequirements>) -> Result<Option<u64>, InvalidSpec> {
    let Some(limit) = resources.and_then(|r| r.limits.as_ref()).and_then(|l| l.get("memory")) else {
        return Ok(None);
    };
    let field = "spec.resources.limits[\"memory\"]";
    let bytes = units::quantity(&limit.0)
        .map(units::Milli::floor)
        .map_err(|e| InvalidSpec::new(field, e))?;
    Ok(Some(u64::try_from(bytes).unwrap_or(u64::MAX)))
}

/// Adds the GPU limit and checks that extended resources are requested exactly as limited
/// (the API server refuses anything else, and would do so only at apply time).
fn resolve_resources(
    resources: Option<ResourceRequirements>,
    gpu: Option<&ResolvedGpu>,
) -> Result<Option<ResourceRequirements>, InvalidSpec> {
    let mut resources = resources;
    for (section, map) in resources
        .iter()
        .flat_map(|r| [("requests", &r.requests), ("limits", &r.limits)])
    {
        for (key, value) in map.iter().flatten() {
            units::quantity(&value.0).map_err(|e| InvalidSpec::new(format!("spec.resources.{section}[{key:?}]"), e))?;
        }
    }
    if let Some(gpu) = gpu {
        let r = resources.get_or_insert_with(Default::default);
        let limits_map = r.limits.get_or_insert_with(Default::default);
        let wanted = Quantity(gpu.count.to_string());
        match limits_map.get(&gpu.resource_name) {
            Some(existing) if units::quantity(&existing.0) != units::quantity(&wanted.0) => {
                return Err(InvalidSpec::new(
                    format!("spec.resources.limits[{:?}]", gpu.resource_name),
                    format!("conflicts with spec.gpu.count ({})", gpu.count),
                ));
            }
            _ => {
                limits_map.insert(gpu.resource_name.clone(), wanted);
            }
        }
    }
    if let Some(r) = &resources {
        for (key, request) in r.requests.iter().flatten().filter(|(k, _)| is_extended(k)) {
            let limit = r.limits.as_ref().and_then(|l| l.get(key));
            if limit.map(|l| units::quantity(&l.0)) != Some(units::quantity(&request.0)) {
                return Err(InvalidSpec::new(
                    format!("spec.resources.requests[{key:?}]"),
                    format!(
                        "must equal spec.resources.limits[{key:?}] ({}): extended resources cannot be overcommitted",
                        limit.map_or("unset", |l| l.0.as_str())
                    ),
                ));
            }
        }
    }
    Ok(resources)
}

/// Extended resources (`vendor.example/thing`) and huge pages cannot be overcommitted.
fn is_extended(name: &str) -> bool {
    name.starts_with("hugepages-") || (name.contains('/') && !name.starts_with("kubernetes.io/"))
}

/// GPU pools that name no CPU or memory would be scheduled with none reserved next to an
/// expensive GPU: request a CPU per slot and some memory per slot.
fn default_gpu_requests(resources: &mut Option<ResourceRequirements>, slots: u32) {
    let r = resources.get_or_insert_with(Default::default);
    let has = |r: &ResourceRequirements, key: &str| {
        [&r.requests, &r.limits]
            .into_iter()
            .any(|m| m.as_ref().is_some_and(|m| m.contains_key(key)))
    };
    let cpu = (!has(r, "cpu")).then(|| Quantity(slots.to_string()));
    let memory = (!has(r, "memory")).then(|| {
        Quantity(format!(
            "{}Gi",
            u64::from(slots) * u64::from(GPU_MEMORY_REQUEST_PER_SLOT_GI)
        ))
    });
    let requests = r.requests.get_or_insert_with(Default::default);
    if let Some(cpu) = cpu {
        requests.insert("cpu".to_owned(), cpu);
    }
    if let Some(memory) = memory {
        requests.insert("memory".to_owned(), memory);
    }
}

/// Default slots: the CPU request (or limit, which Kubernetes copies into an unset request)
/// rounded down, at least 1.
fn slots_from_cpu(resources: Option<&ResourceRequirements>) -> Result<u32, InvalidSpec> {
    let from = |section: &str, map: Option<&BTreeMap<String, Quantity>>| {
        map.and_then(|m| m.get("cpu")).map(|q| {
            units::quantity(&q.0)
                .map(units::Milli::floor)
                .map_err(|e| InvalidSpec::new(format!("spec.resources.{section}[\"cpu\"]"), e))
        })
    };
    let cpus = from("requests", resources.and_then(|r| r.requests.as_ref()))
        .or_else(|| from("limits", resources.and_then(|r| r.limits.as_ref())))
        .transpose()?
        .unwrap_or(1);
    Ok(u32::try_from(cpus).unwrap_or(u32::MAX).max(1))
}

/// An empty peer is rejected by the API server, and one with an empty selector (or an
/// everything `ipBlock`) admits every pod in the namespace or cluster, which a pool must ask
/// for explicitly with `allowAll`.
fn check_peers(field: &str, peers: &[NetworkPolicyPeer], allow_all: bool) -> Result<(), InvalidSpec> {
    let empty = |s: &Option<LabelSelector>| {
        s.as_ref().is_some_and(|s| {
            s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
        })
    };
    for (i, peer) in peers.iter().enumerate() {
        if peer.pod_selector.is_none() && peer.namespace_selector.is_none() && peer.ip_block.is_none() {
            return Err(InvalidSpec::new(
                format!("{field}[{i}]"),
                "must set podSelector, namespaceSelector or ipBlock",
            ));
        }
        let everything = empty(&peer.pod_selector)
            || empty(&peer.namespace_selector)
            || peer
                .ip_block
                .as_ref()
                .is_some_and(|b| matches!(b.cidr.as_str(), "0.0.0.0/0" | "::/0"));
        if everything && !allow_all {
            return Err(InvalidSpec::new(
                format!("{field}[{i}]"),
                "admits every pod (an empty selector or an everything ipBlock); set spec.access.allowAll: true if that is meant",
            ));
        }
    }
    Ok(())
}

/// Why a zero budget is refused.
const ZERO_BUDGET: &str = "0 would block every node drain forever; disable the budget (enabled: false) instead";

fn check_max_unavailable(value: &IntOrString) -> Result<(), InvalidSpec> {
    let field = "spec.disruptionBudget.maxUnavailable";
    match value {
        IntOrString::Int(n) if *n > 0 => Ok(()),
        IntOrString::Int(0) => Err(InvalidSpec::new(field, ZERO_BUDGET)),
        IntOrString::Int(_) => Err(InvalidSpec::new(field, "must not be negative")),
        IntOrString::String(s) if s.strip_suffix('%').and_then(|n| n.parse::<u8>().ok()) == Some(0) => {
            Err(InvalidSpec::new(field, ZERO_BUDGET))
        }
        IntOrString::String(s) => {
            let ok = s
                .strip_suffix('%')
                .and_then(|n| n.parse::<u8>().ok())
                .is_some_and(|n| n <= 100);
            if ok {
                Ok(())
            } else {
                Err(InvalidSpec::new(
                    field,
                    format!("{s:?} is neither a count nor a percentage like 25%"),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests;
