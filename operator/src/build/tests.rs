use serde_json::{Value, json};

use super::*;

mod gateway;
mod pod_security;
mod session_store;
mod sessions;
mod tenants;
use crate::defaults::PoolDefaults;
use crate::resolve::resolve;
use crate::test_pool::pool;

fn resolved(spec: Value) -> ResolvedPool {
    resolve(&pool(spec), &PoolDefaults::default(), "default").expect("test pool is valid")
}

fn to_json<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).expect("object serializes")
}

fn meta() -> Value {
    json!({
        "name": "python",
        "namespace": "evals",
        "labels": {
            "app.kubernetes.io/component": "executor",
            "app.kubernetes.io/instance": "python",
            "app.kubernetes.io/managed-by": "sandpool-operator",
            "app.kubernetes.io/name": "sandpool-executor",
            "app.kubernetes.io/part-of": "sandpool",
            "sandpool.dev/pool": "python",
        },
        "ownerReferences": [{
            "apiVersion": "sandpool.dev/v1alpha1",
            "kind": "SandboxPool",
            "name": "python",
            "uid": "u-1",
            "controller": true,
            "blockOwnerDeletion": true,
        }],
    })
}

fn selector() -> Value {
    json!({
        "app.kubernetes.io/instance": "python",
        "app.kubernetes.io/name": "sandpool-executor",
        "sandpool.dev/pool": "python",
    })
}

fn gateway_selector() -> Value {
    json!({
        "app.kubernetes.io/instance": "python",
        "app.kubernetes.io/name": "sandpool-gateway",
        "sandpool.dev/gateway": "python",
    })
}

/// The example from the issue, minus GPU (covered separately).
fn example() -> Value {
    json!({
        "replicas": 3,
        "image": "example.org/sandpool/executor:0.1.0",
        "languages": ["python", "cpp"],
        "concurrency": 2,
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
        "limits": {"wallTime": "10s", "maxWallTime": "60s", "memory": "512Mi", "maxMemory": "2Gi",
                   "output": "8Mi", "processes": 256},
        "isolation": {"mode": "namespaces", "runtimeClassName": "gvisor"},
        "access": {"clients": [{"podSelector": {"matchLabels": {"role": "sandbox-user"}}}], "http": true},
    })
}

#[test]
fn service_account_has_no_token() {
    assert_eq!(
        to_json(&service_account(&resolved(json!({})))),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(), "automountServiceAccountToken": false})
    );
}

#[test]
fn service_is_headless_with_grpc_and_optional_http() {
    let grpc = json!({"name": "grpc", "port": 50051, "targetPort": "grpc", "protocol": "TCP"});
    let http = json!({"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"});
    let metrics = json!({"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"});
    let expected = |ports: Value| {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(),
            "spec": {"clusterIP": "None", "selector": selector(), "ports": ports,
                     "publishNotReadyAddresses": false},
        })
    };
    assert_eq!(
        to_json(&service(&resolved(json!({})))),
        expected(json!([grpc.clone(), metrics.clone()]))
    );
    assert_eq!(
        to_json(&service(&resolved(json!({"access": {"http": true}})))),
        expected(json!([grpc, http, metrics]))
    );
}

#[test]
fn network_policy_default_denies_all_egress_and_admits_sandbox_users() {
    assert_eq!(
        to_json(&network_policy(&resolved(json!({})))),
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta(),
            "spec": {
                "podSelector": {"matchLabels": selector()},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{
                    "from": [{"podSelector": {"matchLabels": {"role": "sandbox-user"}}}],
                    "ports": [{"protocol": "TCP", "port": 50051}],
                }],
                "egress": [],
            },
        })
    );
}

#[test]
fn network_policy_keeps_namespace_and_pod_selectors_anded() {
    // One entry with both selectors: pods labelled eval-runner in namespaces labelled
    // team=ml. Splitting it would admit every pod in team=ml namespaces.
    let anded = json!({
        "namespaceSelector": {"matchLabels": {"team": "ml"}},
        "podSelector": {"matchLabels": {"app": "eval-runner"}},
    });
    let ored = json!({"namespaceSelector": {"matchLabels": {"team": "infra"}}});
    let np = to_json(&network_policy(&resolved(json!({
        "access": {"clients": [anded.clone(), ored.clone()], "http": true}
    }))));
    assert_eq!(
        np["spec"]["ingress"],
        json!([{
            "from": [anded, ored],
            "ports": [{"protocol": "TCP", "port": 50051}, {"protocol": "TCP", "port": 8080}],
        }, {
            // The pool's own gateway (see tests/gateway.rs).
            "from": [{"podSelector": {"matchLabels": gateway_selector()}}],
            "ports": [{"protocol": "TCP", "port": 8080}],
        }])
    );
    assert_eq!(np["spec"]["ingress"][0]["from"].as_array().map(Vec::len), Some(2));
    assert_eq!(np["spec"]["egress"], json!([]));
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
}

#[test]
fn network_policy_with_no_clients_has_no_ingress_rule_at_all() {
    // A rule without `from` would admit everyone; an empty client list must admit no one.
    let np = to_json(&network_policy(&resolved(json!({"access": {"clients": []}}))));
    assert_eq!(np["spec"]["ingress"], json!([]));
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
}

#[test]
fn network_policy_metrics_clients_get_only_the_metrics_port() {
    let prom = json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                      "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}});
    let np = to_json(&network_policy(&resolved(
        json!({"access": {"metricsClients": [prom.clone()]}}),
    )));
    assert_eq!(
        np["spec"]["ingress"][1],
        json!({"from": [prom], "ports": [{"protocol": "TCP", "port": 9090}]})
    );
}

#[test]
fn disruption_budget_defaults_to_one_and_can_be_disabled() {
    assert_eq!(
        to_json(&disruption_budget(&resolved(json!({})))),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(), "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector()}, "unhealthyPodEvictionPolicy": "AlwaysAllow"}})
    );
    let pdb = to_json(&disruption_budget(&resolved(
        json!({"disruptionBudget": {"maxUnavailable": "50%"}}),
    )));
    assert_eq!(pdb["spec"]["maxUnavailable"], "50%");
    assert!(disruption_budget(&resolved(json!({"disruptionBudget": {"enabled": false}}))).is_none());
}

#[test]
fn executor_args_follow_the_spec() {
    assert_eq!(
        executor_args(&resolved(example())),
        [
            "--listen=0.0.0.0:50051",
            "--metrics-listen=0.0.0.0:9090",
            "--http-listen=0.0.0.0:8080",
            "--slots=2",
            "--isolation=namespaces",
            "--enable-languages=python,cpp",
            "--default-wall-time-ms=10000",
            "--max-wall-time-ms=60000",
            "--default-memory-bytes=536870912",
            "--max-memory-bytes=2147483648",
            "--default-output-bytes=8388608",
            "--default-processes=256",
            // No spec.sessions: half the slots.
            "--max-sessions=1",
            "--drain-timeout-ms=125000",
            "--work-root=/var/lib/sandpool",
        ]
    );
    assert_eq!(
        executor_args(&resolved(json!({"isolation": {"mode": "restricted"},
            "limits": {"cpuTime": "5s", "maxCpuTime": "30s", "maxOutput": "1Mi", "maxProcesses": 32}}))),
        [
            "--listen=0.0.0.0:50051",
            "--metrics-listen=0.0.0.0:9090",
            "--slots=1",
            "--isolation=restricted",
            "--max-wall-time-ms=60000",
            "--default-cpu-time-ms=5000",
            "--max-cpu-time-ms=30000",
            // The executor's defaults (8Mi, 256) are above these maximums: said openly.
            "--default-output-bytes=1048576",
            "--max-output-bytes=1048576",
            "--default-processes=32",
            "--max-processes=32",
            "--drain-timeout-ms=125000",
            "--work-root=/var/lib/sandpool",
        ]
    );
}

#[test]
fn deployment_for_the_issue_example_is_exact() {
    let mut pod_labels = meta()["labels"].clone();
    pod_labels["team"] = json!("ml");
    let mut spec = example();
    spec["podTemplate"] = json!({"labels": {"team": "ml"}, "annotations": {"cost-center": "42"}});
    spec["nodeSelector"] = json!({"pool": "sandbox"});
    spec["tolerations"] = json!([{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}]);
    spec["affinity"] = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"sandpool.dev/pool": "python"}}}}]}});
    spec["imagePullSecrets"] = json!([{"name": "regcred"}]);
    let pool = resolved(spec.clone());
    let container = json!({
                "name": "executor",
                "image": "example.org/sandpool/executor:0.1.0",
                "imagePullPolicy": "IfNotPresent",
                "args": executor_args(&pool),
                "env": [
                    {"name": "SANDPOOL_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
                "ports": [
                    {"name": "grpc", "containerPort": 50051, "protocol": "TCP"},
                    {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                    {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
                ],
                "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
                "readinessProbe": {"grpc": {"port": 50051}, "periodSeconds": 5, "failureThreshold": 2},
                "livenessProbe": {"grpc": {"port": 50051, "service": "liveness"}, "periodSeconds": 10, "failureThreshold": 3},
                "startupProbe": {"grpc": {"port": 50051, "service": "liveness"}, "periodSeconds": 2, "failureThreshold": 40},
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "securityContext": {
                    "runAsUser": 0,
                    "runAsNonRoot": false,
                    "privileged": false,
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN", "SYS_CHROOT", "NET_ADMIN", "SETUID", "SETGID", "KILL", "CHOWN", "DAC_OVERRIDE", "FOWNER"]},
                    "seccompProfile": {"type": "Unconfined"},
                    "appArmorProfile": {"type": "Unconfined"},
                },
                "volumeMounts": [
                    {"name": "work", "mountPath": "/var/lib/sandpool"},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
    });
    assert_eq!(
        to_json(&deployment(&pool)),
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(),
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": selector()},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {
                    "metadata": {
                        "labels": pod_labels,
                        "annotations": {"cost-center": "42", "kubectl.kubernetes.io/default-container": "executor"},
                    },
                    "spec": {
                        "serviceAccountName": "python",
                        "automountServiceAccountToken": false,
                        "enableServiceLinks": false,
                        "hostNetwork": false,
                        "hostPID": false,
                        "hostIPC": false,
                        "terminationGracePeriodSeconds": 135,
                        "runtimeClassName": "gvisor",
                        "nodeSelector": {"pool": "sandbox"},
                        "affinity": spec["affinity"],
                        "tolerations": spec["tolerations"],
                        "topologySpreadConstraints": [spread()],
                        "imagePullSecrets": [{"name": "regcred"}],
                        "containers": [container],
                        "volumes": [{"name": "work", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
                    },
                },
            },
        })
    );
}

/// The topology spread every executor pod gets.
fn spread() -> Value {
    json!({
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": selector()},
        "matchLabelKeys": ["pod-template-hash"],
    })
}

#[test]
fn executor_pods_spread_over_nodes_by_default_but_never_wait_for_one() {
    // A pool that says nothing of scheduling, and one pinned to labelled nodes: both spread
    // over hostnames, and a single node (ScheduleAnyway) still takes every pod.
    for spec in [example(), {
        let mut s = example();
        s["nodeSelector"] = json!({"pool": "sandbox"});
        s
    }] {
        let d = to_json(&deployment(&resolved(spec)));
        assert_eq!(
            d["spec"]["template"]["spec"]["topologySpreadConstraints"],
            json!([spread()])
        );
        // The spread selects exactly the Deployment's own pods.
        assert_eq!(
            d["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"],
            d["spec"]["selector"]
        );
    }
}

#[test]
fn restricted_mode_fits_the_restricted_pod_security_standard() {
    let d = to_json(&deployment(&resolved(json!({"isolation": {"mode": "restricted"}}))));
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(
        pod["securityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let c = &pod["containers"][0];
    assert_eq!(
        c["securityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "privileged": false,
               "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
               "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    // A read-only root leaves the executor two writable places: its work root and /tmp.
    assert_eq!(
        pod["volumes"],
        json!([{"name": "work", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}])
    );
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "work", "mountPath": "/var/lib/sandpool"}, {"name": "tmp", "mountPath": "/tmp"}])
    );
    assert!(c["args"].as_array().is_some_and(
        |a| a.contains(&json!("--isolation=restricted")) && a.contains(&json!("--work-root=/var/lib/sandpool"))
    ));
    assert!(pod.get("runtimeClassName").is_none());
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        assert_eq!(pod[host], false, "{host}");
    }
}

/// Every option a restricted pool may set still yields a pod that Pod Security "restricted"
/// admits, field by field as admission checks it; namespaces mode yields one it refuses.
#[test]
fn every_restricted_pool_passes_each_restricted_pod_security_check() {
    let specs = [
        json!({"isolation": {"mode": "restricted"}}),
        json!({"isolation": {"mode": "restricted", "runtimeClassName": "kata"},
               "auth": {"enabled": true}, "access": {"http": true, "metricsClients": [
                   {"namespaceSelector": {"matchLabels": {"team": "obs"}}}]},
               "languages": ["python"], "concurrency": 4, "replicas": 3,
               "resources": {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
               "limits": {"wallTime": "5s", "maxWallTime": "20s", "memory": "1Gi", "processes": 64},
               "nodeSelector": {"pool": "sandbox"},
               "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "evals", "effect": "NoSchedule"}],
               "imagePullSecrets": [{"name": "regcred"}],
               "podTemplate": {"labels": {"team": "ml"}, "annotations": {"cost-center": "42"}},
               "disruptionBudget": {"maxUnavailable": "50%"}, "warmStarts": false}),
    ];
    for spec in specs {
        let template = to_json(&deployment(&resolved(spec.clone())))["spec"]["template"].clone();
        assert_eq!(
            pod_security::restricted_violations(&template),
            Vec::<String>::new(),
            "{spec}"
        );
    }
    let namespaces = to_json(&deployment(&resolved(example())))["spec"]["template"].clone();
    let violations = pod_security::restricted_violations(&namespaces);
    for expected in [
        "container executor: runAsUser 0",
        "container executor: runAsNonRoot false",
        "container executor: seccompProfile Unconfined",
        "container executor: appArmorProfile Unconfined",
        "container executor: capabilities.add \"SYS_ADMIN\"",
    ] {
        assert!(
            violations.iter().any(|v| v == expected),
            "{expected} not in {violations:?}"
        );
    }
}

/// The checker itself must bite on each rule a builder could break.
#[test]
fn the_pod_security_checker_catches_each_loosening() {
    let good =
        to_json(&deployment(&resolved(json!({"isolation": {"mode": "restricted"}}))))["spec"]["template"].clone();
    type Loosen = fn(&mut Value);
    let loosen: [(&str, Loosen); 12] = [
        ("hostNetwork", |t| t["spec"]["hostNetwork"] = json!(true)),
        ("hostPath", |t| {
            t["spec"]["volumes"][0] = json!({"name": "work", "hostPath": {"path": "/"}})
        }),
        ("privileged", |t| {
            t["spec"]["containers"][0]["securityContext"]["privileged"] = json!(true)
        }),
        ("escalation", |t| {
            t["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true)
        }),
        ("escalation unset", |t| {
            t["spec"]["containers"][0]["securityContext"]
                .as_object_mut()
                .map(|o| o.remove("allowPrivilegeEscalation"));
        }),
        ("root", |t| t["spec"]["securityContext"]["runAsUser"] = json!(0)),
        ("non-root unset", |t| {
            t["spec"]["securityContext"]
                .as_object_mut()
                .map(|o| o.remove("runAsNonRoot"));
            t["spec"]["containers"][0]["securityContext"]
                .as_object_mut()
                .map(|o| o.remove("runAsNonRoot"));
        }),
        ("seccomp", |t| {
            t["spec"]["containers"][0]["securityContext"]["seccompProfile"]["type"] = json!("Unconfined")
        }),
        ("capability", |t| {
            t["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["SYS_PTRACE"])
        }),
        ("no drop", |t| {
            t["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"] = json!([])
        }),
        ("hostPort", |t| {
            t["spec"]["containers"][0]["ports"][0]["hostPort"] = json!(50051)
        }),
        ("apparmor annotation", |t| {
            t["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/executor"] =
                json!("unconfined")
        }),
    ];
    for (what, change) in loosen {
        let mut t = good.clone();
        change(&mut t);
        assert!(!pod_security::restricted_violations(&t).is_empty(), "{what} not caught");
    }
}

#[test]
fn restricted_mode_mounts_the_token_where_runs_cannot_read_it() {
    let pool = resolved(json!({"isolation": {"mode": "restricted"}, "auth": {"enabled": true}}));
    assert!(
        executor_args(&pool).contains(&"--auth-token-file=/sandpool-auth/token".to_owned()),
        "{:?}",
        executor_args(&pool)
    );
    let d = to_json(&deployment(&pool));
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][2],
        json!({"name": "auth", "mountPath": "/sandpool-auth", "readOnly": true})
    );
}

#[test]
fn gpu_pool_gets_limit_selector_tolerations_flag_and_in_place_rollouts() {
    let pool = resolved(json!({
        "resources": {"limits": {"memory": "16Gi"}},
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "evals", "effect": "NoSchedule"}],
        "gpu": {"count": 2, "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
    }));
    let d = to_json(&deployment(&pool));
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(
        c["resources"]["limits"],
        json!({"memory": "16Gi", "nvidia.com/gpu": "2"})
    );
    assert!(c["args"].as_array().is_some_and(|a| a.contains(&json!("--gpu"))));
    assert_eq!(
        pod["nodeSelector"],
        json!({"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    );
    assert_eq!(
        pod["tolerations"],
        json!([
            {"key": "dedicated", "operator": "Equal", "value": "evals", "effect": "NoSchedule"},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ])
    );
    assert_eq!(
        d["spec"]["strategy"]["rollingUpdate"],
        json!({"maxSurge": 0, "maxUnavailable": 1})
    );

    let custom = to_json(&deployment(&resolved(
        json!({"gpu": {"count": 1, "resourceName": "amd.com/gpu",
        "tolerations": [{"key": "amd", "operator": "Exists"}]}}),
    )));
    let pod = &custom["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["resources"],
        json!({"limits": {"amd.com/gpu": "1"}, "requests": {"cpu": "1", "memory": "2Gi"}})
    );
    assert_eq!(pod["tolerations"], json!([{"key": "amd", "operator": "Exists"}]));
}

#[test]
fn termination_grace_covers_the_longest_run() {
    let grace = |spec| {
        to_json(&deployment(&resolved(spec)))["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].clone()
    };
    // Compile and run, each up to maxWallTime, the drain margin (5s) and the kill margin (10s).
    assert_eq!(grace(json!({})), json!(135));
    assert_eq!(grace(json!({"limits": {"maxWallTime": "10m"}})), json!(1215));
    assert_eq!(grace(json!({"limits": {"maxWallTime": "1500ms"}})), json!(18));
}

#[test]
fn children_skip_the_budget_when_disabled() {
    let all = children(&resolved(json!({})));
    assert!(all.disruption_budget.is_some());
    let none = children(&resolved(json!({"disruptionBudget": {"enabled": false}})));
    assert!(none.disruption_budget.is_none());
    assert_eq!(
        none.deployment,
        deployment(&resolved(json!({"disruptionBudget": {"enabled": false}})))
    );
}

#[test]
fn unhealthy_pods_never_block_a_node_drain() {
    let pdb = to_json(&disruption_budget(&resolved(json!({}))));
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
}

#[test]
fn owner_references_block_owner_deletion() {
    for object in [
        to_json(&service_account(&resolved(json!({})))),
        to_json(&deployment(&resolved(json!({})))),
        to_json(&network_policy(&resolved(json!({})))),
    ] {
        assert_eq!(object["metadata"]["ownerReferences"][0]["blockOwnerDeletion"], true);
    }
}

#[test]
fn startup_probe_scales_with_the_languages_probed() {
    let budget = |spec| {
        let d = to_json(&deployment(&resolved(spec)));
        let probe = &d["spec"]["template"]["spec"]["containers"][0]["startupProbe"];
        probe["periodSeconds"].as_i64().expect("period") * probe["failureThreshold"].as_i64().expect("threshold")
    };
    let one = budget(json!({"languages": ["python"]}));
    let five = budget(json!({"languages": ["python", "cpp", "java", "go", "rust"]}));
    let all = budget(json!({}));
    assert!(one >= 60, "{one}");
    assert!(five > one, "{five} vs {one}");
    assert!(all > five, "{all} vs {five}");
}

#[test]
fn drain_and_grace_cover_compile_and_run() {
    let d = to_json(&deployment(&resolved(json!({"limits": {"maxWallTime": "60s"}}))));
    let grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .expect("grace");
    let args = d["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    let drain_ms: i64 = args
        .as_array()
        .expect("args")
        .iter()
        .find_map(|a| a.as_str()?.strip_prefix("--drain-timeout-ms=")?.parse().ok())
        .expect("drain flag");
    assert!(drain_ms >= 120_000, "{drain_ms}");
    assert!(grace * 1000 > drain_ms, "{grace}s vs {drain_ms}ms");
}

#[test]
fn builtin_language_count_matches_the_executors_table() {
    let table = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../executor/languages.toml"))
        .expect("executor/languages.toml is readable");
    let count = table
        .lines()
        .filter(|l| l.starts_with('[') && l.ends_with(']') && !l.contains('.'))
        .count();
    assert_eq!(count, deployment::BUILTIN_LANGUAGES as usize);
}

#[test]
fn auth_mounts_the_token_read_only_and_passes_the_file() {
    let pool = resolved(json!({"auth": {"enabled": true}}));
    let d = to_json(&deployment(&pool));
    let pod = &d["spec"]["template"]["spec"];
    assert!(
        executor_args(&pool).contains(&"--auth-token-file=/etc/sandpool/auth/token".to_owned()),
        "{:?}",
        executor_args(&pool)
    );
    assert_eq!(
        pod["volumes"][2],
        json!({"name": "auth", "secret": {"secretName": "python-auth", "defaultMode": 0o400,
               "items": [{"key": "token", "path": "token"}]}})
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"][2],
        json!({"name": "auth", "mountPath": "/etc/sandpool/auth", "readOnly": true})
    );
    let secret = auth_secret(&pool, "t0k3n").expect("the operator creates the Secret");
    let secret = to_json(&secret);
    assert_eq!(secret["metadata"]["name"], "python-auth");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], "u-1");
    assert_eq!(secret["stringData"]["token"], "t0k3n");
    assert_eq!(secret["type"], "Opaque");
    // A named Secret is the user's: mounted, never created.
    let pool = resolved(json!({"auth": {"enabled": true, "secretName": "mine"}}));
    assert!(auth_secret(&pool, "x").is_none());
    assert_eq!(
        to_json(&deployment(&pool))["spec"]["template"]["spec"]["volumes"][2]["secret"]["secretName"],
        "mine"
    );
    // Off by default.
    assert!(!executor_args(&resolved(json!({}))).iter().any(|a| a.contains("auth")));
}

#[test]
fn a_result_cache_sets_the_executor_flags() {
    let cache_args = |spec: Value| -> Vec<String> {
        executor_args(&resolved(spec))
            .into_iter()
            .filter(|a| a.starts_with("--result-cache"))
            .collect()
    };
    assert_eq!(
        cache_args(json!({"resultCache": {"entries": 10000, "maxBytes": "128Mi", "limitVerdicts": true}})),
        [
            "--result-cache-entries=10000",
            "--result-cache-bytes=134217728",
            "--result-cache-limit-verdicts",
        ]
    );
    // The operator's default size, not the executor's.
    assert_eq!(
        cache_args(json!({"resultCache": {"entries": 5}})),
        ["--result-cache-entries=5", "--result-cache-bytes=67108864"]
    );
    // Off by default, and with zero entries.
    assert!(cache_args(json!({})).is_empty());
    assert!(cache_args(json!({"resultCache": {"entries": 0, "maxBytes": "1Gi"}})).is_empty());
}

#[test]
fn turning_warm_starts_off_sets_the_executor_flag() {
    let warm_args = |spec: Value| -> Vec<String> {
        executor_args(&resolved(spec))
            .into_iter()
            .filter(|a| a.starts_with("--warm-starts"))
            .collect()
    };
    assert_eq!(warm_args(json!({"warmStarts": false})), ["--warm-starts=false"]);
    // Absent or true leaves the executor's default (on) alone.
    assert!(warm_args(json!({})).is_empty());
    assert!(warm_args(json!({"warmStarts": true})).is_empty());
    // Restricted pools accept the field; the executor starts their runs cold either way.
    assert_eq!(
        warm_args(json!({"isolation": {"mode": "restricted"}, "warmStarts": false})),
        ["--warm-starts=false"]
    );
    // The flag comes before the fixed tail, where the issue example's exact lists expect it.
    let args = executor_args(&resolved(json!({"warmStarts": false})));
    assert_eq!(
        args[args.len() - 4..],
        [
            "--warm-starts=false",
            "--max-sessions=1",
            "--drain-timeout-ms=125000",
            "--work-root=/var/lib/sandpool"
        ]
    );
}
