//! The Helm chart, the committed manifests and the CRD's validation against a real control
//! plane (`scripts/cluster.sh up`). Without a cluster these tests fail; see `e2e_cluster`.
//!
//! The tests that run an operator hold [`OPERATOR_TESTS`]: a cluster-wide operator would
//! otherwise also reconcile the namespaced test's pools and hide a missing permission there.

mod e2e_cluster;

use std::collections::BTreeSet;
use std::time::Duration;

use e2e_cluster::{Cluster, Operator, repo_root, wait_for};
use kube::api::{Patch, PatchParams, ValidationDirective};
use kube::{Api, ResourceExt};
use sandpool_operator::crd::SandboxPool;
use serde_json::{Value, json};
use tokio::sync::Mutex;

static OPERATOR_TESTS: Mutex<()> = Mutex::const_new(());
const TIMEOUT: Duration = Duration::from_secs(90);

fn chart() -> String {
    repo_root().join("charts/sandpool").display().to_string()
}

/// `kubectl get` of every listable namespaced kind in `namespace`, as `kind/name` lines,
/// minus what every namespace has (its default ServiceAccount and root CA ConfigMap) and
/// events.
fn everything_in(cluster: &Cluster, namespace: &str) -> BTreeSet<String> {
    let kinds = cluster.kubectl(&["api-resources", "--verbs=list", "--namespaced", "-o", "name"]);
    let kinds: Vec<&str> = kinds
        .lines()
        .filter(|k| !matches!(*k, "events" | "events.events.k8s.io"))
        .collect();
    let out = cluster.kubectl(&["get", &kinds.join(","), "-n", namespace, "-o", "name"]);
    out.lines()
        .filter(|l| !matches!(*l, "serviceaccount/default" | "configmap/kube-root-ca.crt"))
        .map(str::to_owned)
        .collect()
}

/// Cluster-scoped objects of a release (its ClusterRole and binding in cluster-wide mode,
/// the FlowSchema of its leader Lease).
fn cluster_objects_of(cluster: &Cluster, release: &str) -> BTreeSet<String> {
    let out = cluster.kubectl(&[
        "get",
        "clusterroles,clusterrolebindings,flowschemas",
        "-l",
        &format!("app.kubernetes.io/instance={release}"),
        "-o",
        "name",
    ]);
    out.lines().map(str::to_owned).collect()
}

async fn wait_pool_ready(cluster: &Cluster, namespace: &str, name: &str, replicas: i32, operator: &Operator) {
    let pools: Api<SandboxPool> = Api::namespaced(cluster.admin().await, namespace);
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let pool = pools.get(name).await.expect("pool reads");
        let status = pool.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready && status.ready_replicas == replicas && status.observed_generation == pool.metadata.generation {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pool {namespace}/{name} not Ready with {replicas} replicas: {:?}\noperator log:\n{}",
            pool.status,
            operator.log_text()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaced_install_upgrade_and_uninstall() {
    let Some(cluster) = e2e_cluster::cluster() else {
        return;
    };
    let _serial = OPERATOR_TESTS.lock().await;
    cluster.ensure_crd().await;
    // The chart's own pods (the operator) fit "restricted"; pools need "privileged" (a
    // namespace of their own in production; one here, to keep the test short).
    let ns = cluster
        .namespace(
            "e2e-chart",
            json!({"pod-security.kubernetes.io/enforce": "privileged",
                                        "pod-security.kubernetes.io/warn": "restricted"}),
        )
        .await;
    let before = everything_in(&cluster, &ns.name);
    let pools = json!([{"name": "python", "spec": {"replicas": 1, "languages": ["python"]}}]).to_string();
    cluster.helm(&[
        "install",
        "sp",
        &chart(),
        "-n",
        &ns.name,
        "--set-json",
        &format!("pools={pools}"),
        // Off by default in namespaced mode (no cluster-scoped permission needed); asked for.
        "--set",
        "leaderElection.flowSchema=true",
        "--wait",
        "--timeout=2m",
    ]);
    let installed = everything_in(&cluster, &ns.name);
    for object in [
        "serviceaccount/sp-operator",
        "role.rbac.authorization.k8s.io/sp-operator",
        "rolebinding.rbac.authorization.k8s.io/sp-operator",
        "role.rbac.authorization.k8s.io/sp-operator-leader-election",
        "deployment.apps/sp-operator",
        "sandboxpool.sandpool.dev/python",
    ] {
        assert!(installed.contains(object), "{object} not installed: {installed:?}");
    }
    // Namespaced mode makes no ClusterRole; only the FlowSchema of the operator's Lease when
    // asked for, which the API server accepts and finds its priority level for (not Dangling).
    let flow_schema = format!("{}-sp-operator-leader-election", ns.name);
    assert_eq!(
        cluster_objects_of(&cluster, "sp"),
        BTreeSet::from([format!("flowschema.flowcontrol.apiserver.k8s.io/{flow_schema}")])
    );
    let dangling = cluster.kubectl(&[
        "get",
        "flowschema",
        &flow_schema,
        "-o",
        "jsonpath={.spec.priorityLevelConfiguration.name} {.status.conditions[?(@.type==\"Dangling\")].status}",
    ]);
    assert_eq!(
        dangling, "leader-election False",
        "the FlowSchema's priority level exists"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("operator.kubeconfig");
    cluster.service_account_kubeconfig(&ns.name, "sp-operator", &kubeconfig);
    let operator = Operator::start(&kubeconfig, Some(&ns.name), &ns.name, "op", dir.path());
    wait_pool_ready(&cluster, &ns.name, "python", 1, &operator).await;
    // The operator (as the chart's ServiceAccount) took its Lease before it reconciled: the
    // API server classified those requests by the chart's FlowSchema, into leader-election.
    let lease_requests = dispatched_requests(&cluster, &flow_schema, "leader-election");
    assert!(
        lease_requests > 0.0,
        "no request dispatched by FlowSchema {flow_schema}; operator log:\n{}",
        operator.log_text()
    );

    // Upgrade with changed values: two operator replicas, a bigger pool with tenants (the
    // chart's `tenants:` beside `spec:`; the Role must let the operator write their ConfigMap).
    let pools = json!([{"name": "python",
        "tenants": [{"name": "rl", "tokenSecretRef": {"name": "rl-token", "key": "token"}, "weight": 3}],
        "spec": {"replicas": 2, "languages": ["python"]}}])
    .to_string();
    cluster.helm(&[
        "upgrade",
        "sp",
        &chart(),
        "-n",
        &ns.name,
        "--set",
        "replicaCount=2",
        "--set-json",
        &format!("pools={pools}"),
        "--wait",
        "--timeout=2m",
    ]);
    let deployment = cluster.kubectl(&[
        "get",
        "deployment/sp-operator",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.status.readyReplicas}",
    ]);
    assert_eq!(deployment, "2", "the chart's operator Deployment follows replicaCount");
    wait_pool_ready(&cluster, &ns.name, "python", 2, &operator).await;
    let tenants_file = cluster.kubectl(&[
        "get",
        "configmap/python-tenants",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.data.tenants\\.toml}",
    ]);
    assert!(
        tenants_file.contains("name = \"rl\"\ntoken_file = \"/sandpool-tenants/rl/token\"\nweight = 3\n"),
        "{tenants_file}"
    );
    drop(operator);

    // Uninstall removes the release's objects, the leader Lease included (the chart makes it:
    // on a real node Helm deletes the Role before the operator can release it); the garbage
    // collector removes the pool's children.
    cluster.helm(&["uninstall", "sp", "-n", &ns.name, "--wait", "--timeout=2m"]);
    let mut left = BTreeSet::new();
    wait_for(
        "helm uninstall and the garbage collector to remove everything",
        TIMEOUT,
        || {
            left = everything_in(&cluster, &ns.name);
            left.retain(|o| !before.contains(o));
            let done = left.is_empty();
            async move { done }
        },
    )
    .await;
    assert!(cluster_objects_of(&cluster, "sp").is_empty(), "FlowSchema removed");
}

/// The API server's count of requests it dispatched for `flow_schema` in `priority_level`
/// (`apiserver_flowcontrol_dispatched_requests_total`, from its own `/metrics`).
fn dispatched_requests(cluster: &Cluster, flow_schema: &str, priority_level: &str) -> f64 {
    let metrics = cluster.kubectl(&["get", "--raw", "/metrics"]);
    let schema = format!("flow_schema=\"{flow_schema}\"");
    let level = format!("priority_level=\"{priority_level}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_dispatched_requests_total{"))
        .filter(|l| l.contains(&schema) && l.contains(&level))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_wide_install_reconciles_pools_in_other_namespaces() {
    let Some(cluster) = e2e_cluster::cluster() else {
        return;
    };
    let _serial = OPERATOR_TESTS.lock().await;
    cluster.ensure_crd().await;
    let system = cluster
        .namespace(
            "e2e-cw-system",
            json!({"pod-security.kubernetes.io/enforce": "restricted"}),
        )
        .await;
    let evals = cluster
        .namespace(
            "e2e-cw-evals",
            json!({"pod-security.kubernetes.io/enforce": "privileged"}),
        )
        .await;
    let pools = json!([{"name": "python", "namespace": evals.name, "spec": {"replicas": 1}}]).to_string();
    cluster.helm(&[
        "install",
        "cw",
        &chart(),
        "-n",
        &system.name,
        "--set",
        "watch.clusterWide=true",
        "--set-json",
        &format!("pools={pools}"),
        "--wait",
        "--timeout=2m",
    ]);
    assert_eq!(
        cluster_objects_of(&cluster, "cw"),
        BTreeSet::from([
            // Pools, their status and Events everywhere; the children's kinds in the managed
            // namespaces (all of them here), bound separately so a namespace list can narrow it.
            "clusterrole.rbac.authorization.k8s.io/e2e-cw-system-cw-operator".to_owned(),
            "clusterrole.rbac.authorization.k8s.io/e2e-cw-system-cw-operator-manage".to_owned(),
            "clusterrolebinding.rbac.authorization.k8s.io/e2e-cw-system-cw-operator".to_owned(),
            "clusterrolebinding.rbac.authorization.k8s.io/e2e-cw-system-cw-operator-manage".to_owned(),
            "flowschema.flowcontrol.apiserver.k8s.io/e2e-cw-system-cw-operator-leader-election".to_owned(),
        ])
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("operator.kubeconfig");
    cluster.service_account_kubeconfig(&system.name, "cw-operator", &kubeconfig);
    let operator = Operator::start(&kubeconfig, None, &system.name, "op", dir.path());
    wait_pool_ready(&cluster, &evals.name, "python", 1, &operator).await;
    drop(operator);

    cluster.helm(&["uninstall", "cw", "-n", &system.name, "--wait", "--timeout=2m"]);
    assert!(
        cluster_objects_of(&cluster, "cw").is_empty(),
        "ClusterRole, binding and FlowSchema removed"
    );
    let pools: Api<SandboxPool> = Api::namespaced(cluster.admin().await, &evals.name);
    wait_for("the chart's pool and its children to go", TIMEOUT, || async {
        pools.get_opt("python").await.is_ok_and(|p| p.is_none())
    })
    .await;
}

/// The `SANDPOOL_*` settings the chart gave its operator Deployment (literal values only).
fn chart_operator_env(cluster: &Cluster, namespace: &str, deployment: &str) -> Vec<(String, String)> {
    let out = cluster.kubectl(&[
        "get",
        &format!("deployment/{deployment}"),
        "-n",
        namespace,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].env}",
    ]);
    let env: Vec<Value> = serde_json::from_str(&out).expect("env is JSON");
    env.iter()
        .filter_map(|e| Some((e["name"].as_str()?.to_owned(), e["value"].as_str()?.to_owned())))
        .filter(|(name, _)| name.starts_with("SANDPOOL_"))
        .collect()
}

/// `executor.isolation=restricted` makes restricted the operator's default, so a whole
/// install (operator and pools) runs in one namespace that enforces Pod Security
/// "restricted", and a pool that asks for namespaces mode there is refused by admission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_default_install_fits_restricted_pod_security() {
    let Some(cluster) = e2e_cluster::cluster() else {
        return;
    };
    let _serial = OPERATOR_TESTS.lock().await;
    cluster.ensure_crd().await;
    let ns = cluster
        .namespace(
            "e2e-chart-restricted",
            json!({"pod-security.kubernetes.io/enforce": "restricted"}),
        )
        .await;
    let pools = json!([
        {"name": "python", "spec": {"replicas": 1, "languages": ["python"], "auth": {"enabled": true}}},
        {"name": "privileged", "spec": {"replicas": 1, "isolation": {"mode": "namespaces"}}},
    ])
    .to_string();
    cluster.helm(&[
        "install",
        "rs",
        &chart(),
        "-n",
        &ns.name,
        "--set",
        "executor.isolation=restricted",
        "--set-json",
        &format!("pools={pools}"),
        "--wait",
        "--timeout=2m",
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("operator.kubeconfig");
    cluster.service_account_kubeconfig(&ns.name, "rs-operator", &kubeconfig);
    // The operator runs out of cluster, configured as the chart configured its Deployment.
    let operator = Operator::start_with_env(
        &kubeconfig,
        Some(&ns.name),
        &ns.name,
        "op",
        dir.path(),
        &chart_operator_env(&cluster, &ns.name, "rs-operator"),
    );
    wait_pool_ready(&cluster, &ns.name, "python", 1, &operator).await;
    let args = cluster.kubectl(&[
        "get",
        "deployment/python",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ]);
    assert!(args.contains("--isolation=restricted"), "{args}");
    let pools_api: Api<SandboxPool> = Api::namespaced(cluster.admin().await, &ns.name);
    wait_for("the namespaces-mode pool to report refused pods", TIMEOUT, || async {
        pools_api.get("privileged").await.is_ok_and(|p| {
            p.status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Degraded" && c.status == "True" && c.message.contains("violates PodSecurity"))
            })
        })
    })
    .await;
    drop(operator);
    cluster.helm(&["uninstall", "rs", "-n", &ns.name, "--wait", "--timeout=2m"]);
}

/// `kubectl apply` of every committed manifest: the CRD, the rendered install (its
/// documented command) and every example, with strict field validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_manifest_applies() {
    let Some(cluster) = e2e_cluster::cluster() else {
        return;
    };
    let root = repo_root();
    let path = |p: &str| root.join(p).display().to_string();
    cluster.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &path("manifests/crd.yaml"),
    ]);
    cluster.ensure_crd().await;
    let _system = cluster.namespace("sandpool-system", json!({})).await;
    cluster.kubectl(&["apply", "--server-side", "-f", &path("manifests/install.yaml")]);
    // The examples live in `evals`; the restricted pool admits scrapes from `monitoring`.
    let _evals = cluster
        .namespace("evals", json!({"pod-security.kubernetes.io/enforce": "privileged"}))
        .await;
    let mut examples: Vec<_> = std::fs::read_dir(root.join("manifests/examples"))
        .expect("examples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 4, "examples found: {examples:?}");
    for example in &examples {
        let file = example.display().to_string();
        cluster.kubectl(&["apply", "--validate=strict", "-f", &file]);
        cluster.kubectl(&["apply", "--server-side", "--validate=strict", "-f", &file]);
    }
    let names = cluster.kubectl(&["get", "sbp", "-n", "evals", "-o", "name"]);
    let names: BTreeSet<_> = names.lines().collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "sandboxpool.sandpool.dev/agents",
            "sandboxpool.sandpool.dev/cuda",
            "sandboxpool.sandpool.dev/python",
            "sandboxpool.sandpool.dev/restricted",
            "sandboxpool.sandpool.dev/shared"
        ])
    );
}

/// Invalid pools the API server itself refuses (OpenAPI schema and CEL rules in the CRD),
/// each with the message docs/operator.md documents. Dry runs: nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_rejects_invalid_pools_with_the_documented_messages() {
    let Some(cluster) = e2e_cluster::cluster() else {
        return;
    };
    cluster.ensure_crd().await;
    let ns = cluster.namespace("e2e-invalid", json!({})).await;
    let pools: Api<SandboxPool> = Api::namespaced(cluster.admin().await, &ns.name);
    let params = PatchParams {
        dry_run: true,
        field_manager: Some("sandpool-e2e".to_owned()),
        field_validation: Some(ValidationDirective::Strict),
        force: false,
    };
    let apply = |spec: Value| {
        let pools = pools.clone();
        let params = params.clone();
        async move {
            let pool = json!({"apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
                              "metadata": {"name": "invalid"}, "spec": spec});
            pools.patch("invalid", &params, &Patch::Apply(&pool)).await
        }
    };

    // Accepted: the rules compare by value, and equal limits are fine.
    let valid = json!({"replicas": 0, "limits": {"wallTime": "10s", "maxWallTime": "10000ms",
                        "memory": "1024Mi", "maxMemory": "1Gi", "processes": 8, "maxProcesses": 8},
                        "gpu": {"count": 1}});
    let accepted = apply(valid).await.expect("a valid pool is accepted");
    assert_eq!(accepted.name_any(), "invalid");

    // Each refusal names the field and says what is wrong (for CEL rules: the documented
    // message).
    let cases: &[(Value, &[&str])] = &[
        (
            json!({"replicas": -1}),
            &["spec.replicas", "should be greater than or equal to 0"],
        ),
        (
            json!({"concurrency": 0}),
            &["spec.concurrency", "should be greater than or equal to 1"],
        ),
        (json!({"image": ""}), &["spec.image", "should be at least 1 chars long"]),
        (
            json!({"languages": []}),
            &["spec.languages", "should have at least 1 items"],
        ),
        (json!({"languages": ["Python"]}), &["spec.languages[0]", "should match"]),
        (
            json!({"limits": {"wallTime": "ten seconds"}}),
            &["spec.limits.wallTime", "should match"],
        ),
        (
            json!({"limits": {"memory": "1GB"}}),
            &["spec.limits.memory", "should match"],
        ),
        (
            json!({"limits": {"wallTime": "20s", "maxWallTime": "10s"}}),
            &["spec.limits", "wallTime must not exceed maxWallTime"],
        ),
        (
            json!({"limits": {"cpuTime": "2m", "maxCpuTime": "1m"}}),
            &["spec.limits", "cpuTime must not exceed maxCpuTime"],
        ),
        (
            json!({"limits": {"memory": "2Gi", "maxMemory": "1536Mi"}}),
            &["spec.limits", "memory must not exceed maxMemory"],
        ),
        (
            json!({"limits": {"output": "2Mi", "maxOutput": "1Mi"}}),
            &["spec.limits", "output must not exceed maxOutput"],
        ),
        (
            json!({"limits": {"processes": 9, "maxProcesses": 8}}),
            &["spec.limits", "processes must not exceed maxProcesses"],
        ),
        (
            json!({"limits": {"processes": 0}}),
            &["spec.limits.processes", "should be greater than or equal to 1"],
        ),
        (
            json!({"gpu": {"count": 0}}),
            &["spec.gpu", "gpu.count must be at least 1"],
        ),
        (
            json!({"isolation": {"mode": "none"}}),
            &["spec.isolation.mode", "Unsupported value: \"none\""],
        ),
        (
            json!({"replica": 3}),
            &[".spec.replica", "field not declared in schema"],
        ),
    ];
    let mut wrong = Vec::new();
    for (spec, want) in cases {
        match apply(spec.clone()).await {
            Ok(_) => wrong.push(format!("{spec} was accepted")),
            Err(kube::Error::Api(status)) if want.iter().all(|w| status.message.contains(w)) => {}
            Err(error) => wrong.push(format!("{spec}: {error}\n    wanted: {want:?}")),
        }
    }
    assert!(wrong.is_empty(), "not rejected as documented:\n{}", wrong.join("\n"));
    assert!(
        pools.get_opt("invalid").await.expect("reads").is_none(),
        "dry runs store nothing"
    );
}

/// Metric names in `text`: every `sandpool_...` word (PromQL, series selectors, and the
/// annotations that name metrics).
fn sandpool_metric_names(text: &str) -> BTreeSet<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("sandpool_") {
        let preceded = rest[..at].chars().next_back().is_some_and(word);
        let end = rest[at..].find(|c: char| !word(c)).map_or(rest.len(), |e| at + e);
        if !preceded {
            names.insert(rest[at..end].to_owned());
        }
        rest = &rest[end..];
    }
    names
}

/// The series names a /metrics text exports: each `# TYPE` with the suffixes its type's
/// samples carry, and every sample's name.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#')
            && let Some(name) = line.split(['{', ' ']).next().filter(|n| !n.is_empty())
        {
            names.insert(name.to_owned());
        }
    }
    names
}

/// The chart's alert rules, their unit tests and its dashboard name only metrics that a real
/// executor, gateway and operator export (promtool checks the PromQL: check-manifests.sh),
/// and the operator reports each pool's readiness, which SandpoolPoolNotReady alerts on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitoring_names_only_metrics_the_components_export() {
    let Some(cluster) = e2e_cluster::cluster() else {
        return;
    };
    let _serial = OPERATOR_TESTS.lock().await;
    cluster.ensure_crd().await;
    let ns = cluster
        .namespace(
            "e2e-monitoring",
            json!({"pod-security.kubernetes.io/enforce": "privileged"}),
        )
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let operator = Operator::start(&cluster.kubeconfig, Some(&ns.name), &ns.name, "op", dir.path());
    let pools: Api<SandboxPool> = Api::namespaced(cluster.admin().await, &ns.name);
    let pool = json!({"apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
                      "metadata": {"name": "python"}, "spec": {"replicas": 1, "languages": ["python"]}});
    pools
        .patch("python", &PatchParams::apply("sandpool-e2e"), &Patch::Apply(&pool))
        .await
        .expect("pool applies");
    wait_pool_ready(&cluster, &ns.name, "python", 1, &operator).await;
    let ready = format!(
        "sandpool_operator_pool_ready{{namespace=\"{}\",pool=\"python\"}} 1",
        ns.name
    );
    let mut operator_text = String::new();
    wait_for("the operator to report the pool Ready", TIMEOUT, || {
        operator_text = operator.metrics().unwrap_or_default();
        let done = operator_text.contains(&ready);
        async move { done }
    })
    .await;

    // A real executor and gateway, and one real run through them: families whose labels
    // only a request names (language and verdict, protocol and status code, backend) get
    // their series; every other family is exported from the start with its known label
    // values (0 until something happens), so nothing here provokes refusals or errors.
    let executor = sandpool_tests::Executor::start(sandpool_tests::Options {
        slots: 1,
        languages: vec!["python"],
        http: true,
        ..Default::default()
    })
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let gateway_addr = listener.local_addr().expect("addr").to_string();
    let metrics_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let gateway_metrics = metrics_listener.local_addr().expect("addr").to_string();
    let backend = format!("e0={}", executor.http_addr.as_deref().expect("executor serves HTTP"));
    let args = <sandpool_gateway::Args as clap::Parser>::parse_from(["sandpool-gateway", "--backend", &backend]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let gateway = tokio::spawn(sandpool_gateway::run(args, listener, metrics_listener, async move {
        let _ = stopped.await;
    }));
    let run = json!({"code": "print(6 * 7)", "language": "python", "run_timeout": 20}).to_string();
    let (status, answer) =
        tokio::task::spawn_blocking(move || sandpool_tests::http(&gateway_addr, "POST", "/run_code", "", &run))
            .await
            .expect("run");
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("42"), "{answer}");
    let scrape = |addr: String| async move {
        let (status, text) =
            tokio::task::spawn_blocking(move || sandpool_tests::http(&addr, "GET", "/metrics", "", ""))
                .await
                .expect("scrape");
        assert_eq!(status, 200, "{text}");
        text
    };
    let executor_text = scrape(executor.metrics_addr.clone()).await;
    let gateway_text = scrape(gateway_metrics).await;
    let _ = stop.send(());
    let _ = gateway.await;

    // What the alerts divide and compare exists before anything went wrong: 0, not absent.
    for (text, series) in [
        (
            &executor_text,
            r#"sandpool_resource_exhausted_total{reason="sessions"} 0"#,
        ),
        (
            &executor_text,
            r#"sandpool_resource_exhausted_total{reason="inflight_bytes"} 0"#,
        ),
        (
            &executor_text,
            r#"sandpool_tenant_refused_total{tenant="anonymous",reason="queue_full"} 0"#,
        ),
        (
            &gateway_text,
            r#"sandpool_gateway_requests_total{kind="stateless",outcome="5xx"} 0"#,
        ),
        (
            &gateway_text,
            r#"sandpool_gateway_upstream_errors_total{reason="connect"} 0"#,
        ),
        (
            &operator_text,
            r#"sandpool_operator_reconcile_errors_total{error="api"} 0"#,
        ),
    ] {
        assert!(text.contains(series), "no {series} in:\n{text}");
    }

    let mut exported = BTreeSet::new();
    for (component, text) in [
        ("operator", &operator_text),
        ("executor", &executor_text),
        ("gateway", &gateway_text),
    ] {
        let names = exported_names(text);
        assert!(
            names.iter().any(|n| n.starts_with("sandpool_")),
            "the {component} exports no sandpool_ metric:\n{text}"
        );
        exported.extend(names);
    }
    for file in [
        "charts/sandpool/monitoring/alerts.yaml",
        "charts/sandpool/monitoring/dashboard.json",
        "tests/monitoring/alerts-test.yaml",
    ] {
        let text = std::fs::read_to_string(repo_root().join(file)).expect("monitoring file reads");
        let named = sandpool_metric_names(&text);
        assert!(named.len() >= 10, "{file} names only {named:?}");
        let unknown: Vec<_> = named.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} names metrics no component exports: {unknown:?}\nexported: {exported:?}"
        );
    }
    // The check bites: a misspelt name is not exported.
    assert!(!exported.contains("sandpool_busy_slot"));
}
