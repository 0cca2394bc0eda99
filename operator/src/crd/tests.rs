use kube::core::cel::validate_cel;
use serde_json::json;

use super::*;

fn pool(spec: serde_json::Value) -> SandboxPool {
    serde_json::from_value(json!({
        "apiVersion": "sandpool.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "python", "namespace": "evals"},
        "spec": spec,
    }))
    .expect("test pool deserializes")
}

#[test]
fn committed_crds_match_the_rust_types() {
    let generated = crd_yaml().expect("CRD serializes");
    for copy in [
        "manifests/crd.yaml",
        "charts/sandpool/crds/sandboxpools.sandpool.dev.yaml",
    ] {
        let path = format!("{}/../{copy}", env!("CARGO_MANIFEST_DIR"));
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{copy} is out of date; regenerate it with `scripts/check-manifests.sh --update` \
             (or `cargo run -p sandpool-operator -- crd > {copy}`)"
        );
    }
}

#[test]
fn crd_names_and_subresources() {
    let crd = serde_json::to_value(SandboxPool::crd()).expect("CRD serializes");
    assert_eq!(crd["metadata"]["name"], "sandboxpools.sandpool.dev");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(crd["spec"]["names"]["shortNames"], json!(["sbp"]));
    assert_eq!(crd["spec"]["names"]["categories"], json!(["sandpool"]));
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], "v1alpha1");
    assert_eq!(version["subresources"]["status"], json!({}));
    assert_eq!(
        version["subresources"]["scale"],
        json!({
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        })
    );
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .expect("printer columns")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Replicas",
            "Pods-Ready",
            "Ready",
            "Reason",
            "Languages",
            "GPU",
            "Sessions",
            "Age"
        ]
    );
    let ready = &version["additionalPrinterColumns"][2];
    assert_eq!(ready["jsonPath"], r#".status.conditions[?(@.type=="Ready")].status"#);
}

#[test]
fn the_issue_example_passes_cel() {
    let example = pool(json!({
        "replicas": 3,
        "languages": ["python", "cpp"],
        "concurrency": 2,
        "limits": {"wallTime": "10s", "maxWallTime": "60s", "memory": "512Mi",
                   "maxMemory": "2Gi", "output": "8Mi", "processes": 256},
        "isolation": {"mode": "namespaces", "runtimeClassName": "gvisor"},
        "gpu": {"count": 1, "resourceName": "nvidia.com/gpu"},
    }));
    assert!(validate_cel(&example).is_ok(), "{:?}", validate_cel(&example));
}

#[test]
fn cel_rejects_wall_time_above_its_maximum() {
    let bad = pool(json!({"limits": {"wallTime": "2m", "maxWallTime": "90s"}}));
    let err = format!("{:?}", validate_cel(&bad).expect_err("CEL must reject"));
    assert!(err.contains("wallTime must not exceed maxWallTime"), "{err}");
    let ok = pool(json!({"limits": {"wallTime": "1m30s", "maxWallTime": "90s"}}));
    assert!(validate_cel(&ok).is_ok());
}

#[test]
fn cel_compares_quantities_by_value_not_text() {
    let bad = pool(json!({"limits": {"memory": "3Gi", "maxMemory": "2048Mi"}}));
    let err = format!("{:?}", validate_cel(&bad).expect_err("CEL must reject"));
    assert!(err.contains("memory must not exceed maxMemory"), "{err}");
    let ok = pool(json!({"limits": {"memory": "512Mi", "maxMemory": "2Gi"}}));
    assert!(validate_cel(&ok).is_ok());
}

#[test]
fn cel_rejects_zero_gpus_and_excess_processes() {
    let gpu = pool(json!({"gpu": {"count": 0}}));
    let err = format!("{:?}", validate_cel(&gpu).expect_err("CEL must reject"));
    assert!(err.contains("gpu.count must be at least 1"), "{err}");
    let procs = pool(json!({"limits": {"processes": 300, "maxProcesses": 256}}));
    let err = format!("{:?}", validate_cel(&procs).expect_err("CEL must reject"));
    assert!(err.contains("processes must not exceed maxProcesses"), "{err}");
}

#[test]
fn unset_spec_fields_stay_unset_on_the_wire() {
    let minimal = pool(json!({}));
    assert_eq!(minimal.spec.replicas, 1);
    let wire = serde_json::to_value(&minimal.spec).expect("spec serializes");
    assert_eq!(wire, json!({"replicas": 1}));
}

#[test]
fn cel_rejects_a_pool_name_too_long_for_its_service() {
    let mut long = pool(json!({}));
    long.metadata.name = Some("p".repeat(64));
    let err = format!("{:?}", validate_cel(&long).expect_err("CEL must reject"));
    assert!(err.contains("at most 63 characters"), "{err}");
    long.metadata.name = Some("p".repeat(63));
    assert!(validate_cel(&long).is_ok(), "{:?}", validate_cel(&long));
}

#[test]
fn sessions_schema_bounds_the_cap_and_requires_it() {
    let crd = serde_json::to_value(SandboxPool::crd()).expect("CRD serializes");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    let sessions = &schema["spec"]["properties"]["sessions"];
    assert_eq!(sessions["type"], "object");
    assert_eq!(sessions["required"], json!(["maxPerPod"]));
    let max = &sessions["properties"]["maxPerPod"];
    assert_eq!((&max["minimum"], &max["maximum"]), (&json!(0.0), &json!(4096.0)));
    for quantity in ["idleMemory", "memory"] {
        let field = &sessions["properties"][quantity];
        assert_eq!(field["pattern"], QUANTITY_PATTERN, "{quantity}");
        assert_eq!(field["maxLength"], 32, "{quantity}");
    }
    let status = &schema["status"]["properties"]["sessions"]["properties"];
    for field in [
        "maxPerPod",
        "capacity",
        "memoryPerPod",
        "open",
        "openPerPodMax",
        "reportingPods",
    ] {
        assert!(status.get(field).is_some(), "status.sessions.{field} missing");
    }
}

#[test]
fn cel_bounds_idle_memory_and_a_budget_without_sessions() {
    for ok in [
        json!({"maxPerPod": 64}),
        json!({"maxPerPod": 500, "idleMemory": "32Mi"}),
        json!({"maxPerPod": 1, "idleMemory": "4Mi", "memory": "1Gi"}),
        json!({"maxPerPod": 1, "idleMemory": "4096Mi"}),
        json!({"maxPerPod": 0}),
    ] {
        let p = pool(json!({"sessions": ok}));
        assert!(validate_cel(&p).is_ok(), "{ok}: {:?}", validate_cel(&p));
    }
    for bad in ["3Mi", "4097Mi", "5Gi"] {
        let p = pool(json!({"sessions": {"maxPerPod": 4, "idleMemory": bad}}));
        let err = format!("{:?}", validate_cel(&p).expect_err("CEL must reject"));
        assert!(
            err.contains("sessions.idleMemory must be between 4Mi and 4Gi"),
            "{bad}: {err}"
        );
    }
    let p = pool(json!({"sessions": {"maxPerPod": 0, "memory": "1Gi"}}));
    let err = format!("{:?}", validate_cel(&p).expect_err("CEL must reject"));
    assert!(
        err.contains("sessions.memory must be left out when maxPerPod is 0"),
        "{err}"
    );
}

#[test]
fn cel_refuses_sessions_in_a_restricted_pool() {
    let p = pool(json!({"isolation": {"mode": "restricted"}, "sessions": {"maxPerPod": 4}}));
    let err = format!("{:?}", validate_cel(&p).expect_err("CEL must reject"));
    assert!(
        err.contains("isolation mode restricted serves no sessions (its runs share one uid"),
        "{err}"
    );
    for ok in [
        json!({"isolation": {"mode": "restricted"}, "sessions": {"maxPerPod": 0}}),
        json!({"isolation": {"mode": "restricted"}}),
        json!({"isolation": {"mode": "namespaces"}, "sessions": {"maxPerPod": 4}}),
        json!({"isolation": {"runtimeClassName": "gvisor"}, "sessions": {"maxPerPod": 4}}),
        json!({"sessions": {"maxPerPod": 4}}),
    ] {
        let p = pool(json!(ok));
        assert!(validate_cel(&p).is_ok(), "{ok}: {:?}", validate_cel(&p));
    }
    // The API server reports it at the field, as forbidden.
    let crd = serde_json::to_value(SandboxPool::crd()).expect("CRD serializes");
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let rule = spec["x-kubernetes-validations"]
        .as_array()
        .and_then(|rules| {
            rules
                .iter()
                .find(|r| r["rule"].as_str().is_some_and(|r| r.contains("restricted")))
        })
        .expect("the rule is in the CRD");
    assert_eq!(rule["fieldPath"], ".sessions");
    assert_eq!(rule["reason"], "FieldValueForbidden");
}

#[test]
fn cel_refuses_an_s3_store_without_a_key_and_two_stores() {
    let s3 = json!({"bucket": "b", "credentialsSecret": "creds"});
    let key = json!({"name": "k", "key": "key"});
    let p = pool(json!({"sessions": {"maxPerPod": 4, "store": {"s3": s3}}}));
    let err = format!("{:?}", validate_cel(&p).expect_err("CEL must reject"));
    assert!(err.contains("encryptionKeySecret is required with s3"), "{err}");
    let p = pool(
        json!({"sessions": {"maxPerPod": 4, "store": {"s3": s3, "pvc": {"claimName": "c"}, "encryptionKeySecret": key}}}),
    );
    let err = format!("{:?}", validate_cel(&p).expect_err("CEL must reject"));
    assert!(err.contains("set pvc or s3, not both"), "{err}");
    for ok in [
        json!({"s3": s3, "encryptionKeySecret": key}),
        json!({"pvc": {"claimName": "c"}}),
        json!({"pvc": {"claimName": "c"}, "encryptionKeySecret": key}),
        json!({"ttl": "24h"}),
    ] {
        let p = pool(json!({"sessions": {"maxPerPod": 4, "store": ok}}));
        assert!(validate_cel(&p).is_ok(), "{ok}: {:?}", validate_cel(&p));
    }
}
