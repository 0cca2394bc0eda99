use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::*;
use crate::crd::SandboxPool;
use crate::test_pool::pool;

mod session_store;
mod sessions;
mod tenants;

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
        gateway_image: "registry.local/operator:9".to_owned(),
        api_server_ports: vec![6443],
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
    assert_eq!(p.drain_timeout_ms(), 185_000);
    assert_eq!(p.termination_grace_seconds(), 195);
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
    assert!(resolve_spec(spec("512Mi")).is_ok());
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
        invalid_field(json!({"access": {"metricsClients": [{"podSelector": {"matchLabels": {"a": "b"}}}, {}]}})),
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

#[test]
fn a_default_above_the_executors_default_maximum_is_refused_naming_both() {
    // maxCpuTime unset: the executor's own maximum (60s) applies, and it would clamp silently.
    let err = resolve_spec(json!({"limits": {"cpuTime": "2m"}})).expect_err("above the default max");
    assert_eq!(err.field, "spec.limits.cpuTime");
    assert!(err.message.contains("spec.limits.maxCpuTime"), "{}", err.message);
    assert!(err.message.contains("60s"), "{}", err.message);
    let err = resolve_spec(json!({"limits": {"output": "100Mi"}})).expect_err("above the default max");
    assert_eq!(err.field, "spec.limits.output");
    assert!(err.message.contains("spec.limits.maxOutput"), "{}", err.message);
    let err = resolve_spec(json!({"limits": {"processes": 2000}})).expect_err("above the default max");
    assert_eq!(err.field, "spec.limits.processes");
    // An explicit maximum named too.
    let err = resolve_spec(json!({"limits": {"memory": "3Gi", "maxMemory": "2Gi"}})).expect_err("above");
    assert!(err.message.contains("spec.limits.maxMemory"), "{}", err.message);
}

#[test]
fn an_unset_default_above_an_explicit_maximum_is_lowered_openly() {
    // The executor's default wall time (10s) is above maxWallTime: the operator passes the
    // maximum as the default, so the executor's flags say what runs get.
    let p = resolve_spec(json!({"limits": {"maxWallTime": "5s", "maxMemory": "256Mi"}})).expect("valid");
    assert_eq!(p.limits.wall_time_ms, Some(5_000));
    assert_eq!(p.limits.memory_bytes, Some(256 << 20));
}

#[test]
fn run_memory_must_leave_the_executor_its_headroom() {
    let spec = |max: &str| json!({"resources": {"limits": {"memory": "1Gi"}}, "limits": {"maxMemory": max}});
    // A run as large as the container leaves nothing for the executor itself.
    let err = resolve_spec(spec("1Gi")).expect_err("no headroom");
    assert_eq!(err.field, "spec.limits.maxMemory");
    assert!(
        err.message.contains("spec.resources.limits[\"memory\"]"),
        "{}",
        err.message
    );
    assert!(resolve_spec(spec("512Mi")).is_ok());
    // Unset maxMemory: the executor's 4Gi default does not fit either; the operator derives it.
    let p = resolve_spec(json!({"resources": {"limits": {"memory": "1Gi"}}})).expect("valid");
    assert_eq!(
        p.limits.max_memory_bytes,
        Some((1 << 30) - executor_headroom(p.slots, true))
    );
    // ... and a default memory above the derived maximum is refused, naming both.
    let err = resolve_spec(json!({"resources": {"limits": {"memory": "512Mi"}}, "limits": {"memory": "400Mi"}}))
        .expect_err("default above the derived maximum");
    assert_eq!(err.field, "spec.limits.memory");
    assert!(err.message.contains("spec.limits.maxMemory"), "{}", err.message);
}

#[test]
fn extended_resource_requests_must_equal_limits() {
    let err = resolve_spec(json!({"resources": {
        "requests": {"example.com/fpga": "1"}, "limits": {"example.com/fpga": "2"}}}))
    .expect_err("requests differ from limits");
    assert_eq!(err.field, "spec.resources.requests[\"example.com/fpga\"]");
    let err = resolve_spec(json!({"gpu": {"count": 1}, "resources": {"requests": {"nvidia.com/gpu": "2"}}}))
        .expect_err("request differs from the GPU limit");
    assert_eq!(err.field, "spec.resources.requests[\"nvidia.com/gpu\"]");
    assert!(
        resolve_spec(json!({"resources": {
        "requests": {"example.com/fpga": "1"}, "limits": {"example.com/fpga": "1"}}}))
        .is_ok()
    );
}

#[test]
fn peers_that_admit_everyone_need_allow_all() {
    for peer in [
        json!({"podSelector": {}}),
        json!({"namespaceSelector": {}}),
        json!({"namespaceSelector": {}, "podSelector": {"matchLabels": {"a": "b"}}}),
        json!({"ipBlock": {"cidr": "0.0.0.0/0"}}),
    ] {
        let err = resolve_spec(json!({"access": {"clients": [peer.clone()]}})).expect_err("too broad");
        assert_eq!(err.field, "spec.access.clients[0]", "{peer}");
        assert!(err.message.contains("allowAll"), "{}", err.message);
        let p = resolve_spec(json!({"access": {"clients": [peer.clone()], "allowAll": true}}));
        assert!(p.is_ok(), "{peer} with allowAll");
    }
    assert_eq!(
        invalid_field(json!({"access": {"metricsClients": [{"podSelector": {}}]}})),
        "spec.access.metricsClients[0]"
    );
}

#[test]
fn a_budget_that_blocks_every_eviction_is_refused() {
    for zero in [json!(0), json!("0%")] {
        assert_eq!(
            invalid_field(json!({"disruptionBudget": {"maxUnavailable": zero}})),
            "spec.disruptionBudget.maxUnavailable"
        );
    }
}

#[test]
fn drain_covers_the_compile_phase_and_the_run() {
    let p = resolve_spec(json!({"limits": {"maxWallTime": "60s"}})).expect("valid");
    // Compile (up to maxWallTime) then run (up to maxWallTime), plus the margin.
    assert!(p.drain_timeout_ms() >= 2 * 60_000, "{}", p.drain_timeout_ms());
    assert!(p.termination_grace_seconds() * 1000 > i64::try_from(p.drain_timeout_ms()).expect("fits"));
}

#[test]
fn gpu_pools_are_not_best_effort() {
    let p = resolve_spec(json!({"gpu": {"count": 1}})).expect("valid");
    let requests = p.resources.and_then(|r| r.requests).expect("requests set");
    assert!(
        requests.contains_key("cpu") && requests.contains_key("memory"),
        "{requests:?}"
    );
    // Explicit requests win.
    let p = resolve_spec(json!({"gpu": {"count": 1}, "resources": {"requests": {"cpu": "4"}}})).expect("valid");
    let requests = p.resources.and_then(|r| r.requests).expect("requests set");
    assert_eq!(requests["cpu"].0, "4");
    assert!(requests.contains_key("memory"));
}

#[test]
fn restricted_mode_refuses_what_would_loosen_its_pod() {
    let refused = |spec| resolve_spec(spec).expect_err("must be refused");
    let gpu = refused(json!({"isolation": {"mode": "restricted"}, "gpu": {"count": 1}}));
    assert_eq!(gpu.field, "spec.gpu");
    assert!(gpu.message.contains("namespaces"), "{gpu}");
    for key in [
        "container.apparmor.security.beta.kubernetes.io/executor",
        "container.seccomp.security.alpha.kubernetes.io/executor",
        "seccomp.security.alpha.kubernetes.io/pod",
    ] {
        let e = refused(json!({"isolation": {"mode": "restricted"},
                               "podTemplate": {"annotations": {"team": "ml", key: "unconfined"}}}));
        assert_eq!(e.field, format!("spec.podTemplate.annotations[{key:?}]"));
    }
    // Other annotations, and every option the CRD offers besides these, are fine.
    resolve_spec(json!({"isolation": {"mode": "restricted", "runtimeClassName": "kata"},
                        "podTemplate": {"annotations": {"team": "ml"}}, "auth": {"enabled": true}}))
    .expect("valid");
    // namespaces mode keeps what it always accepted.
    resolve_spec(json!({"gpu": {"count": 1},
                        "podTemplate": {"annotations": {"container.apparmor.security.beta.kubernetes.io/executor": "unconfined"}}}))
    .expect("valid");
}

#[test]
fn a_restricted_default_names_itself_when_it_refuses() {
    let defaults = PoolDefaults {
        isolation: IsolationMode::Restricted,
        ..PoolDefaults::default()
    };
    let e = resolve(&pool(json!({"gpu": {"count": 1}})), &defaults, "default").expect_err("refused");
    assert_eq!(e.field, "spec.gpu");
    assert!(e.message.contains("--default-isolation"), "{e}");
    resolve(
        &pool(json!({"gpu": {"count": 1}, "isolation": {"mode": "namespaces"}})),
        &defaults,
        "default",
    )
    .expect("a pool may choose namespaces mode over the default");
}

#[test]
fn restricted_pools_serve_no_sessions() {
    let e = resolve_spec(json!({"isolation": {"mode": "restricted"}, "sessions": {"maxPerPod": 8}}))
        .expect_err("restricted executors refuse every session");
    assert_eq!(e.field, "spec.sessions");
    for words in ["share one uid", "maxPerPod: 0", "namespaces"] {
        assert!(e.message.contains(words), "{words:?} not in {e}");
    }
    // From the operator's default mode, which the CRD's rule cannot see: named as such.
    let defaults = PoolDefaults {
        isolation: IsolationMode::Restricted,
        ..PoolDefaults::default()
    };
    let e = resolve(&pool(json!({"sessions": {"maxPerPod": 8}})), &defaults, "default").expect_err("refused");
    assert_eq!(e.field, "spec.sessions");
    assert!(e.message.contains("--default-isolation"), "{e}");
    // No sessions asked for: fine, and no session capacity is rendered.
    for spec in [
        json!({"isolation": {"mode": "restricted"}, "sessions": {"maxPerPod": 0}}),
        json!({"isolation": {"mode": "restricted"}}),
    ] {
        let p = resolve_spec(spec.clone()).expect("valid");
        assert!(p.sessions.is_none_or(|s| s.max_per_pod == 0), "{spec}");
    }
    resolve_spec(json!({"sessions": {"maxPerPod": 8}})).expect("namespaces pools serve sessions");
}

#[test]
fn the_result_cache_must_fit_beside_the_executors_headroom() {
    let spec = |bytes: &str| json!({"resources": {"limits": {"memory": "1Gi"}}, "resultCache": {"entries": 10, "maxBytes": bytes}});
    let err = resolve_spec(spec("800Mi")).expect_err("cache and headroom exceed the container");
    assert_eq!(err.field, "spec.resultCache.maxBytes");
    assert!(err.message.contains("headroom"), "{}", err.message);
    let p = resolve_spec(spec("64Mi")).expect("fits");
    assert_eq!(p.result_cache.map(|c| c.bytes), Some(64 << 20));
    assert_eq!(
        invalid_field(json!({"resultCache": {"entries": 1, "maxBytes": "0"}})),
        "spec.resultCache.maxBytes"
    );
    assert_eq!(
        invalid_field(json!({"resultCache": {"entries": -1}})),
        "spec.resultCache.entries"
    );
}

#[test]
fn warm_starts_default_to_the_executors_and_may_be_turned_off() {
    assert!(resolve_spec(json!({})).expect("valid").warm_starts);
    assert!(resolve_spec(json!({"warmStarts": true})).expect("valid").warm_starts);
    assert!(!resolve_spec(json!({"warmStarts": false})).expect("valid").warm_starts);
    // Restricted pools start Python warm too (where the node's Landlock scopes signals).
    let p = resolve_spec(json!({"isolation": {"mode": "restricted"}, "warmStarts": false}))
        .expect("restricted pools accept warmStarts");
    assert!(!p.warm_starts);
    // A wrong type is refused when the object is read, naming the field.
    let err = serde_json::from_value::<SandboxPool>(json!({
        "apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
        "metadata": {"name": "python"}, "spec": {"warmStarts": "no"},
    }))
    .expect_err("a string is not a bool");
    assert!(err.to_string().contains("boolean"), "{err}");
}

#[test]
fn warm_starts_reserve_a_zygote_per_slot_in_the_executors_headroom() {
    let spec = |extra: serde_json::Value| {
        let mut v = json!({"concurrency": 8, "resources": {"limits": {"memory": "4Gi"}}});
        v.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        v
    };
    // Eight slots' zygotes (the default: warm starts on) live in the executor's own memory:
    // what they share once, and each slot's own.
    let p = resolve_spec(spec(json!({}))).expect("valid");
    let warm = EXECUTOR_MEMORY_HEADROOM + ZYGOTE_MEMORY_SHARED + 8 * ZYGOTE_MEMORY_PER_SLOT;
    assert_eq!(warm, 544 << 20);
    assert_eq!(p.limits.max_memory_bytes, Some((4 << 30) - warm));
    // Without warm starts, only the base headroom.
    let p = resolve_spec(spec(json!({"warmStarts": false}))).expect("valid");
    assert_eq!(p.limits.max_memory_bytes, Some((4 << 30) - EXECUTOR_MEMORY_HEADROOM));
    // A maximum that fits the base headroom but not the zygotes is refused, saying how much is kept.
    let err = resolve_spec(spec(json!({"limits": {"maxMemory": "3700Mi"}}))).expect_err("no room for zygotes");
    assert_eq!(err.field, "spec.limits.maxMemory");
    assert!(err.message.contains("544Mi"), "{}", err.message);
    assert!(resolve_spec(spec(json!({"warmStarts": false, "limits": {"maxMemory": "3700Mi"}}))).is_ok());
    // Restricted pools keep the same room: their executors fork Python runs from zygotes too.
    let p = resolve_spec(spec(json!({"isolation": {"mode": "restricted"}}))).expect("valid");
    assert_eq!(p.limits.max_memory_bytes, Some((4 << 30) - warm));
}

#[test]
fn the_gateway_runs_only_for_http_pools_that_keep_it_on() {
    assert_eq!(resolve_spec(json!({})).expect("valid").gateway, None);
    assert_eq!(
        resolve_spec(json!({"gateway": {"replicas": 3}}))
            .expect("valid")
            .gateway,
        None
    );
    let off = json!({"access": {"http": true}, "gateway": {"enabled": false}});
    assert_eq!(resolve_spec(off).expect("valid").gateway, None);
    let g = resolve_spec(json!({"access": {"http": true}}))
        .expect("valid")
        .gateway
        .expect("on by default for HTTP pools");
    assert_eq!(g.replicas, 1);
    assert_eq!(g.image, crate::defaults::default_operator_image());
    assert_eq!(g.resources, default_gateway_resources());
    assert_eq!(g.api_server_ports, vec![443, 6443]);
}

#[test]
fn gateway_fields_the_operator_cannot_honour_are_named() {
    let http = |gateway: serde_json::Value| json!({"access": {"http": true}, "gateway": gateway});
    assert_eq!(invalid_field(http(json!({"replicas": 0}))), "spec.gateway.replicas");
    assert_eq!(invalid_field(http(json!({"replicas": 21}))), "spec.gateway.replicas");
    assert_eq!(invalid_field(http(json!({"image": "a b"}))), "spec.gateway.image");
    assert_eq!(
        invalid_field(http(json!({"resources": {"limits": {"memory": "lots"}}}))),
        "spec.gateway.resources.limits[\"memory\"]"
    );
    // `<pool>-gateway` must fit a Service name.
    let long = "p".repeat(MAX_POOL_NAME_WITH_GATEWAY + 1);
    let mut p = pool(json!({"access": {"http": true}}));
    p.metadata.name = Some(long.clone());
    let e = resolve(&p, &PoolDefaults::default(), "default").expect_err("too long for the gateway");
    assert_eq!(e.field, "metadata.name");
    let mut p = pool(json!({"access": {"http": true}, "gateway": {"enabled": false}}));
    p.metadata.name = Some(long);
    assert!(
        resolve(&p, &PoolDefaults::default(), "default").is_ok(),
        "no gateway, no limit"
    );
}
