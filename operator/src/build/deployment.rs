//! The executor Deployment: arguments, probes, security context and scheduling.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{
    AppArmorProfile, Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, GRPCAction,
    KeyToPath, ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile,
    SecretVolumeSource, SecurityContext, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{child_meta, session_store, tenants};
use crate::crd::IsolationMode;
use crate::labels::{self, GRPC_PORT, HTTP_PORT, METRICS_PORT};
use crate::resolve::{AUTH_TOKEN_KEY, ResolvedPool};

/// Where the executor keeps per-run work directories (an emptyDir, so `/` can be read-only).
pub const WORK_ROOT: &str = "/var/lib/sandpool";
/// Name of the executor container.
pub const CONTAINER: &str = "executor";
/// The unprivileged uid/gid of `restricted` mode (the image's non-root user).
pub const RESTRICTED_UID: i64 = 65532;
/// Health service that stays SERVING while the process lives.
const LIVENESS_SERVICE: &str = "liveness";
/// Languages in the executor's built-in table (`executor/languages.toml`), probed at start
/// when a pool enables all of them; a test keeps this in step with the table.
pub const BUILTIN_LANGUAGES: u32 = 30;
/// Startup allowance before any language is probed, seconds.
const STARTUP_BASE_S: u32 = 60;
/// Startup allowance per language probed (its toolchain's version check), seconds.
const STARTUP_PER_LANGUAGE_S: u32 = 10;
/// Startup probe period, seconds.
const STARTUP_PERIOD_S: i32 = 2;
/// Where a pool's auth Secret is mounted in `namespaces` mode, whose runs see a root
/// filesystem of their own without it.
pub const AUTH_DIR: &str = "/etc/sandpool/auth";
/// Where it is mounted in `restricted` mode, whose runs see the pod's own filesystem
/// through Landlock rules that admit system directories such as `/etc`: a top-level
/// directory that no such rule names, because runs share the executor's uid and gid.
pub const RESTRICTED_AUTH_DIR: &str = "/sandpool-auth";

/// Where the auth Secret is mounted for `mode`.
pub fn auth_dir(mode: IsolationMode) -> &'static str {
    match mode {
        IsolationMode::Namespaces => AUTH_DIR,
        IsolationMode::Restricted => RESTRICTED_AUTH_DIR,
    }
}

/// Capabilities `namespaces` mode needs, each for one documented reason (docs/operator.md).
pub const NAMESPACES_CAPABILITIES: [&str; 9] = [
    "SYS_ADMIN",    // unshare pid/net/mount/ipc/uts namespaces, mount tmpfs work dirs
    "SYS_CHROOT",   // setns(2) into a slot's mount namespace requires it besides SYS_ADMIN
    "NET_ADMIN",    // bring loopback up in each run's network namespace
    "SETUID",       // drop each run to an unprivileged uid
    "SETGID",       // ... and gid
    "KILL",         // kill a run's processes after they changed uid
    "CHOWN",        // hand a run's work dir to the run's uid
    "DAC_OVERRIDE", // clean up work dirs and write cgroup files owned by others
    "FOWNER",       // set modes on files the run's uid owns
];

/// The executor's command-line arguments for a pool (every flag the spec decides).
pub fn executor_args(pool: &ResolvedPool) -> Vec<String> {
    let mut args = vec![
        format!("--listen=0.0.0.0:{GRPC_PORT}"),
        format!("--metrics-listen=0.0.0.0:{METRICS_PORT}"),
    ];
    if pool.http {
        args.push(format!("--http-listen=0.0.0.0:{HTTP_PORT}"));
    }
    args.push(format!("--slots={}", pool.slots));
    args.push(format!("--isolation={}", pool.isolation.as_str()));
    if let Some(languages) = &pool.languages {
        args.push(format!("--enable-languages={}", languages.join(",")));
    }
    let l = &pool.limits;
    let optional = [
        ("--default-wall-time-ms", l.wall_time_ms),
        ("--max-wall-time-ms", Some(l.max_wall_time_ms)),
        ("--default-cpu-time-ms", l.cpu_time_ms),
        ("--max-cpu-time-ms", l.max_cpu_time_ms),
        ("--default-memory-bytes", l.memory_bytes),
        ("--max-memory-bytes", l.max_memory_bytes),
        ("--default-output-bytes", l.output_bytes),
        ("--max-output-bytes", l.max_output_bytes),
        ("--default-processes", l.processes),
        ("--max-processes", l.max_processes),
    ];
    for (flag, value) in optional {
        if let Some(value) = value {
            args.push(format!("{flag}={value}"));
        }
    }
    if pool.gpu.is_some() {
        args.push("--gpu".to_owned());
    }
    if pool.auth.is_some() {
        args.push(format!(
            "--auth-token-file={}/{AUTH_TOKEN_KEY}",
            auth_dir(pool.isolation)
        ));
    }
    if let Some(cache) = &pool.result_cache {
        args.push(format!("--result-cache-entries={}", cache.entries));
        args.push(format!("--result-cache-bytes={}", cache.bytes));
        if cache.limit_verdicts {
            args.push("--result-cache-limit-verdicts".to_owned());
        }
    }
    // Only an opt-out is written: an absent flag keeps the executor's own default.
    if !pool.warm_starts {
        args.push("--warm-starts=false".to_owned());
    }
    // All three, defaults included: the operator's numbers size the pod's memory, so the
    // executor must count by the same ones whatever its own defaults are.
    match &pool.sessions {
        Some(sessions) => {
            args.push(format!("--max-sessions={}", sessions.max_per_pod));
            if sessions.max_per_pod > 0 {
                args.push(format!("--session-idle-bytes={}", sessions.idle_bytes));
                args.push(format!("--session-memory-bytes={}", sessions.memory_bytes));
                // Only when asked for: the executor's own default is none.
                if sessions.spares > 0 {
                    args.push(format!("--session-spares={}", sessions.spares));
                }
                args.extend(session_store::args(pool));
            }
        }
        // A pool that does not size its sessions keeps the capacity pools had before sessions
        // stopped holding slots (half the slots), within the memory it already asks for:
        // the executor's own default (64) would fit no pod's memory it did not plan for.
        // (Restricted executors serve no sessions at all.)
        None if pool.isolation == IsolationMode::Namespaces => {
            args.push(format!("--max-sessions={}", unsized_sessions(pool.slots)))
        }
        None => {}
    }
    args.push(format!("--drain-timeout-ms={}", pool.drain_timeout_ms()));
    args.push(format!("--work-root={WORK_ROOT}"));
    args
}

/// Sessions per pod of a pool without `spec.sessions`: half its slots, at least one.
pub fn unsized_sessions(slots: u32) -> u32 {
    (slots / 2).max(1)
}

/// The executor Deployment for a pool.
pub fn deployment(pool: &ResolvedPool) -> Deployment {
    let mut pod_labels = pool.pod_labels.clone();
    pod_labels.extend(labels::common_labels(&pool.name));
    let mut annotations = pool.pod_annotations.clone();
    annotations.insert(
        "kubectl.kubernetes.io/default-container".to_owned(),
        CONTAINER.to_owned(),
    );

    let mut tolerations = pool.tolerations.clone();
    if let Some(gpu) = &pool.gpu {
        tolerations.extend(gpu.tolerations.iter().cloned());
    }

    let pod = PodSpec {
        service_account_name: Some(pool.name.clone()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        host_network: Some(false),
        host_pid: Some(false),
        host_ipc: Some(false),
        termination_grace_period_seconds: Some(pool.termination_grace_seconds()),
        runtime_class_name: pool.runtime_class_name.clone(),
        node_selector: (!pool.node_selector.is_empty()).then(|| pool.node_selector.clone()),
        affinity: pool.affinity.clone(),
        tolerations: (!tolerations.is_empty()).then_some(tolerations),
        topology_spread_constraints: Some(vec![spread_over_nodes(pool)]),
        image_pull_secrets: (!pool.image_pull_secrets.is_empty()).then(|| pool.image_pull_secrets.clone()),
        security_context: pod_security_context(pool.isolation),
        containers: vec![container(pool)],
        volumes: Some(volumes(pool)),
        ..Default::default()
    };

    Deployment {
        metadata: child_meta(pool),
        spec: Some(DeploymentSpec {
            replicas: Some(pool.replicas),
            selector: LabelSelector {
                match_labels: Some(labels::selector_labels(&pool.name)),
                ..Default::default()
            },
            strategy: Some(strategy(pool)),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(annotations),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Spreads a pool's pods over nodes, so that one node going (a drain, a crash) takes only its
/// share of the pool. A preference, not a rule: a one-node cluster (or a pool with more pods
/// than nodes) still schedules every pod. `pod-template-hash` counts each ReplicaSet on its
/// own, so a rollout's new pods spread too instead of landing beside the old ones.
fn spread_over_nodes(pool: &ResolvedPool) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: "kubernetes.io/hostname".to_owned(),
        when_unsatisfiable: "ScheduleAnyway".to_owned(),
        label_selector: Some(LabelSelector {
            match_labels: Some(labels::selector_labels(&pool.name)),
            ..Default::default()
        }),
        match_label_keys: Some(vec!["pod-template-hash".to_owned()]),
        ..Default::default()
    }
}

/// CPU pools surge a new pod before an old one drains, so capacity never dips; GPU pools
/// replace in place because a spare GPU for the surge pod usually does not exist.
fn strategy(pool: &ResolvedPool) -> DeploymentStrategy {
    let (max_surge, max_unavailable) = if pool.gpu.is_some() { (0, 1) } else { (1, 0) };
    DeploymentStrategy {
        type_: Some("RollingUpdate".to_owned()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(max_surge)),
            max_unavailable: Some(IntOrString::Int(max_unavailable)),
        }),
    }
}

fn container(pool: &ResolvedPool) -> Container {
    let mut ports = vec![container_port("grpc", GRPC_PORT)];
    if pool.http {
        ports.push(container_port("http", HTTP_PORT));
    }
    ports.push(container_port("metrics", METRICS_PORT));
    Container {
        name: CONTAINER.to_owned(),
        image: Some(pool.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        args: Some(executor_args(pool)),
        // SANDPOOL_NAME names the pod in responses; POD_IP is the address a session's create
        // response advertises, so clients send the session's later calls to this pod.
        env: Some(
            [("SANDPOOL_NAME", "metadata.name"), ("POD_IP", "status.podIP")]
                .into_iter()
                .map(|(name, field)| EnvVar {
                    name: name.to_owned(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: field.to_owned(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .chain(tenants::env(pool))
                .collect(),
        ),
        ports: Some(ports),
        // The sessions' memory is already added (resolve's `add_session_memory`).
        resources: pool.resources.clone(),
        // Readiness uses the overall health service (""), which goes NOT_SERVING while
        // draining or when no language works, so such pods leave the Service's DNS.
        readiness_probe: Some(grpc_probe(None, 5, 2)),
        // Liveness only asks whether the process is alive: a draining pod must not be
        // restarted in the middle of its last runs.
        liveness_probe: Some(grpc_probe(Some(LIVENESS_SERVICE), 10, 3)),
        // Toolchain self-checks at startup take a while per language probed.
        startup_probe: Some(grpc_probe(
            Some(LIVENESS_SERVICE),
            STARTUP_PERIOD_S,
            startup_failure_threshold(pool),
        )),
        // An executor that refuses to start (a mode it cannot provide, a missing
        // capability) writes why to /dev/termination-log; the log tail otherwise.
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        security_context: Some(container_security_context(pool.isolation)),
        volume_mounts: Some(volume_mounts(pool)),
        ..Default::default()
    }
}

fn volumes(pool: &ResolvedPool) -> Vec<Volume> {
    let mut volumes = vec![empty_dir("work"), empty_dir("tmp")];
    if let Some(auth) = &pool.auth {
        volumes.push(Volume {
            name: "auth".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(auth.secret_name.clone()),
                // Owner-only: the runs' uids must not read the token. In `restricted` mode
                // the kubelet adds group read for fsGroup, the executor's own gid, which the
                // runs share: there the mount path keeps it from them (RESTRICTED_AUTH_DIR).
                default_mode: Some(0o400),
                items: Some(vec![KeyToPath {
                    key: AUTH_TOKEN_KEY.to_owned(),
                    path: AUTH_TOKEN_KEY.to_owned(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    volumes.extend(tenants::volumes(pool));
    volumes.extend(session_store::volumes(pool));
    volumes
}

fn volume_mounts(pool: &ResolvedPool) -> Vec<VolumeMount> {
    let mut mounts = vec![
        VolumeMount {
            name: "work".to_owned(),
            mount_path: WORK_ROOT.to_owned(),
            ..Default::default()
        },
        VolumeMount {
            name: "tmp".to_owned(),
            mount_path: "/tmp".to_owned(),
            ..Default::default()
        },
    ];
    if pool.auth.is_some() {
        mounts.push(VolumeMount {
            name: "auth".to_owned(),
            mount_path: auth_dir(pool.isolation).to_owned(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    mounts.extend(tenants::volume_mounts(pool));
    mounts.extend(session_store::volume_mounts(pool));
    mounts
}

/// Failures the startup probe tolerates: a base allowance plus one per language probed.
fn startup_failure_threshold(pool: &ResolvedPool) -> i32 {
    let languages = pool
        .languages
        .as_ref()
        .map_or(BUILTIN_LANGUAGES, |l| u32::try_from(l.len()).unwrap_or(u32::MAX));
    let seconds = STARTUP_BASE_S.saturating_add(languages.saturating_mul(STARTUP_PER_LANGUAGE_S));
    i32::try_from(seconds.div_ceil(STARTUP_PERIOD_S.unsigned_abs())).unwrap_or(i32::MAX)
}

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..Default::default()
    }
}

fn grpc_probe(service: Option<&str>, period: i32, failures: i32) -> Probe {
    Probe {
        grpc: Some(GRPCAction {
            port: GRPC_PORT,
            service: service.map(str::to_owned),
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        ..Default::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

/// Pod-level settings: `restricted` pins the non-root identity for every container and volume.
fn pod_security_context(mode: IsolationMode) -> Option<PodSecurityContext> {
    match mode {
        IsolationMode::Namespaces => None,
        IsolationMode::Restricted => Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RESTRICTED_UID),
            run_as_group: Some(RESTRICTED_UID),
            fs_group: Some(RESTRICTED_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

/// Container-level settings per isolation mode; docs/operator.md explains each item.
fn container_security_context(mode: IsolationMode) -> SecurityContext {
    match mode {
        IsolationMode::Namespaces => SecurityContext {
            // uid 0 inside the container, but with only the capabilities listed below.
            run_as_user: Some(0),
            run_as_non_root: Some(false),
            privileged: Some(false),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: Some(NAMESPACES_CAPABILITIES.map(str::to_owned).to_vec()),
            }),
            // The runtime's default seccomp and AppArmor profiles block mount(2) and
            // unshare(2), which every run needs; the executor confines each run itself.
            seccomp_profile: Some(SeccompProfile {
                type_: "Unconfined".to_owned(),
                ..Default::default()
            }),
            app_armor_profile: Some(AppArmorProfile {
                type_: "Unconfined".to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        },
        IsolationMode::Restricted => SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RESTRICTED_UID),
            run_as_group: Some(RESTRICTED_UID),
            privileged: Some(false),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}
