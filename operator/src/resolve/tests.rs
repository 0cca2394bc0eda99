use serde_json::json;

use super::*;
use crate::crd::SandboxPool;

fn pool(spec: serde_json::Value) -> SandboxPool {
    serde_json::from_value(json!({
        "apiVersion": "sandpool.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "python", "namespace": "evals", "uid": "u-1"},
        "spec": spec,
    }))
    .expect("test pool deserializes")
}

fn resolve_spec(spec: serde_json::Value) -> Result<ResolvedPool, InvalidSpec> {
    resolve(&pool(spec), &PoolDefaults::default(), "default")
}

fn invalid_field(spec: serde_json::Value) -> String {
    resolve_spec(spec).expect_err("spec must be refused").field
}

#[test]
fn defaults_fill_an_empty_spec() {
    let p = resolve_spec(json!({})).expect("empty spec is valid");
    assert_eq!(p.replicas, 1);
    assert_eq!(
        p.image,
        format!("ghcr.io/sandpool/executor:{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(p.slots, 1);
    assert_eq!(p.isolation, IsolationMode::Namespaces);
    assert_eq!(p.limits.max_wall_time_ms, 60_000);
    assert_eq!(p.clients, default_clients());
    assert!(p.metrics_clients.is_empty());
    assert_eq!(p.max_unavailable, Some(IntOrString::Int(1)));
    assert!(p.gpu.is_none() && !p.http && p.languages.is_none());
    let owner = p.owner.expect("stored pool gets an owner reference");
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("SandboxPool", "python", "u-1")
    );
    assert_eq!(owner.controller, Some(true));
}

#[test]
fn operator_defaults_apply_when_the_spec_is_silent() {
    let defaults = PoolDefaults {
        executor_image: "registry.local/exec:9".to_owned(),
        isolation: IsolationMode::Restricted,
        runtime_class_name: Some("gvisor".to_owned()),
        cluster_domain: "corp.local".to_owned(),
    };
    let p = resolve(&pool(json!({})), &defaults, "default").expect("valid");
    assert_eq!(p.image, "registry.local/exec:9");
    assert_eq!(p.isolation, IsolationMode::Restricted);
    assert_eq!(p.runtime_class_name.as_deref(), Some("gvisor"));
    assert_eq!(
        p.endpoint(&defaults.cluster_domain),
        "dns:///python.evals.svc.corp.local:50051"
    );
    let p = resolve(
        &pool(json!({"image": "x/y:1", "isolation": {"mode": "namespaces", "runtimeClassName": "kata"}})),
        &defaults,
        "default",
    )
    .expect("valid");
    assert_eq!((p.image.as_str(), p.isolation), ("x/y:1", IsolationMode::Namespaces));
    assert_eq!(p.runtime_class_name.as_deref(), Some("kata"));
}

#[test]
fn rendering_a_pool_without_uid_or_namespace() {
    let p: SandboxPool = serde_json::from_value(json!({
        "apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
        "metadata": {"name": "cpu"}, "spec": {}
    }))
    .expect("deserializes");
    let r = resolve(&p, &PoolDefaults::default(), "team-a").expect("valid");
    assert_eq!(r.namespace, "team-a");
    assert!(r.owner.is_none());
}

#[test]
fn limits_convert_to_executor_units() {
    let p = resolve_spec(json!({"limits": {
        "wallTime": "10s", "maxWallTime": "1m30s", "cpuTime": "500ms", "maxCpuTime": "20s",
        "memory": "512Mi", "maxMemory": "2Gi", "output": "8Mi", "maxOutput": "64Mi",
        "processes": 64, "maxProcesses": 256
    }}))
    .expect("valid");
    assert_eq!(
        p.limits,
        ResolvedLimits {
            wall_time_ms: Some(10_000),
            max_wall_time_ms: 90_000,
            cpu_time_ms: Some(500),
            max_cpu_time_ms: Some(20_000),
            memory_bytes: Some(512 << 20),
            max_memory_bytes: Some(2 << 30),
            output_bytes: Some(8 << 20),
            max_output_bytes: Some(64 << 20),
            processes: Some(64),
            max_processes: Some(256),
        }
    );
    assert_eq!(p.drain_timeout_ms(), 95_000);
    assert_eq!(p.termination_grace_seconds(), 105);
}

#[test]
fn bad_limits_name_their_field() {
    assert_eq!(
        invalid_field(json!({"limits": {"wallTime": "ten"}})),
        "spec.limits.wallTime"
    );
    assert_eq!(
        invalid_field(json!({"limits": {"maxWallTime": "0s"}})),
        "spec.limits.maxWallTime"
    );
    assert_eq!(
        invalid_field(json!({"limits": {"memory": "512MB"}})),
        "spec.limits.memory"
    );
    assert_eq!(
        invalid_field(json!({"limits": {"maxOutput": "1.5"}})),
        "spec.limits.maxOutput"
    );
    assert_eq!(
        invalid_field(json!({"limits": {"processes": 0}})),
        "spec.limits.processes"
    );
    // The schema's CEL rules catch these too; the operator must not rely on them.
    assert_eq!(
        invalid_field(json!({"limits": {"wallTime": "2m", "maxWallTime": "1m"}})),
        "spec.limits.wallTime"
    );
    assert_eq!(
        invalid_field(json!({"limits": {"wallTime": "2m"}})),
        "spec.limits.wallTime"
    );
    assert_eq!(
        invalid_field(json!({"limits": {"memory": "3Gi", "maxMemory": "2Gi"}})),
        "spec.limits.memory"
    );
}

#[test]
fn run_memory_must_fit_in_the_container() {
    let spec = |max: &str| {
        json!({
            "resources": {"limits": {"memory": "1Gi"}},
            "limits": {"maxMemory": max}
        })
    };
    assert!(resolve_spec(spec("1Gi")).is_ok());
    let err = resolve_spec(spec("2Gi")).expect_err("too big");
    assert_eq!(err.field, "spec.limits.maxMemory");
    assert!(err.message.contains("1Gi"), "{}", err.message);
}

#[test]
fn slots_default_from_the_cpu_request() {
    let slots = |spec| resolve_spec(spec).expect("valid").slots;
    assert_eq!(slots(json!({"resources": {"requests": {"cpu": "2"}}})), 2);
    assert_eq!(slots(json!({"resources": {"requests": {"cpu": "3500m"}}})), 3);
    assert_eq!(slots(json!({"resources": {"requests": {"cpu": "500m"}}})), 1);
    assert_eq!(slots(json!({"resources": {"limits": {"cpu": "4"}}})), 4);
    assert_eq!(
        slots(json!({"concurrency": 7, "resources": {"requests": {"cpu": "2"}}})),
        7
    );
    assert_eq!(
        invalid_field(json!({"resources": {"requests": {"cpu": "two"}}})),
        "spec.resources.requests[\"cpu\"]"
    );
    assert_eq!(invalid_field(json!({"concurrency": 0})), "spec.concurrency");
}

#[test]
fn languages_are_checked() {
    let p = resolve_spec(json!({"languages": ["python", "cpp"]})).expect("valid");
    assert_eq!(p.languages, Some(vec!["python".to_owned(), "cpp".to_owned()]));
    assert_eq!(invalid_field(json!({"languages": []})), "spec.languages");
    assert_eq!(
        invalid_field(json!({"languages": ["python", "c,pp"]})),
        "spec.languages[1]"
    );
    assert_eq!(invalid_field(json!({"languages": ["go", "go"]})), "spec.languages[1]");
}

#[test]
fn gpu_defaults_and_conflicts() {
    let p = resolve_spec(json!({"gpu": {"count": 2}})).expect("valid");
    let gpu = p.gpu.expect("GPU pool");
    assert_eq!(gpu.resource_name, "nvidia.com/gpu");
    assert_eq!(
        gpu.tolerations,
        vec![Toleration {
            key: Some("nvidia.com/gpu".to_owned()),
            operator: Some("Exists".to_owned()),
            effect: Some("NoSchedule".to_owned()),
            ..Default::default()
        }]
    );
    let limit = p
        .resources
        .and_then(|r| r.limits)
        .and_then(|l| l.get("nvidia.com/gpu").cloned());
    assert_eq!(limit, Some(Quantity("2".to_owned())));
    let p = resolve_spec(json!({"gpu": {"count": 1, "tolerations": []}})).expect("valid");
    assert!(
        p.gpu.expect("GPU").tolerations.is_empty(),
        "explicit empty list is honoured"
    );

    assert_eq!(invalid_field(json!({"gpu": {"count": 0}})), "spec.gpu.count");
    assert_eq!(
        invalid_field(json!({"gpu": {"count": 1, "resourceName": "gpu"}})),
        "spec.gpu.resourceName"
    );
    assert_eq!(
        invalid_field(json!({"gpu": {"count": 2}, "resources": {"limits": {"nvidia.com/gpu": "1"}}})),
        "spec.resources.limits[\"nvidia.com/gpu\"]"
    );
    assert_eq!(
        invalid_field(json!({"nodeSelector": {"zone": "a"}, "gpu": {"count": 1, "nodeSelector": {"zone": "b"}}})),
        "spec.gpu.nodeSelector[\"zone\"]"
    );
}

#[test]
fn reserved_pod_labels_and_bad_names_are_refused() {
    assert_eq!(
        invalid_field(json!({"podTemplate": {"labels": {"sandpool.dev/pool": "other"}}})),
        "spec.podTemplate.labels[\"sandpool.dev/pool\"]"
    );
    assert_eq!(
        invalid_field(json!({"podTemplate": {"labels": {"app.kubernetes.io/name": "x"}}})),
        "spec.podTemplate.labels[\"app.kubernetes.io/name\"]"
    );
    let mut p = pool(json!({}));
    p.metadata.name = Some("3d.pool".to_owned());
    let err = resolve(&p, &PoolDefaults::default(), "x").expect_err("not a DNS-1035 label");
    assert_eq!(err.field, "metadata.name");
}

#[test]
fn access_peers_are_checked() {
    assert_eq!(
        invalid_field(json!({"access": {"clients": [{}]}})),
        "spec.access.clients[0]"
    );
    assert_eq!(
        invalid_field(json!({"access": {"metricsClients": [{"podSelector": {}}, {}]}})),
        "spec.access.metricsClients[1]"
    );
    let p = resolve_spec(json!({"access": {"clients": []}})).expect("empty list is valid");
    assert!(p.clients.is_empty());
}

#[test]
fn disruption_budget_settings() {
    let mu = |spec| resolve_spec(spec).expect("valid").max_unavailable;
    assert_eq!(
        mu(json!({"disruptionBudget": {"maxUnavailable": "25%"}})),
        Some(IntOrString::String("25%".to_owned()))
    );
    assert_eq!(
        mu(json!({"disruptionBudget": {"maxUnavailable": 2}})),
        Some(IntOrString::Int(2))
    );
    assert_eq!(mu(json!({"disruptionBudget": {"enabled": false}})), None);
    assert_eq!(
        invalid_field(json!({"disruptionBudget": {"maxUnavailable": "lots"}})),
        "spec.disruptionBudget.maxUnavailable"
    );
}
