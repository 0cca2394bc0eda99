//! The operator against a real control plane (`scripts/cluster.sh up`: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok nodes whose pods turn Ready).
//!
//! Each test installs the chart (namespaced mode) into a fresh namespace and runs the
//! `sandpool-operator` binary out of cluster with a TokenRequest token of the chart's
//! ServiceAccount, so every call the operator makes is authorized by the chart's Role, not by
//! an admin. Without a cluster these tests fail; see `e2e_cluster` for how to start one.

mod e2e_cluster;

use std::time::{Duration, Instant};

use e2e_cluster::{Cluster, Operator, TestNamespace, repo_root, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use sandpool_operator::crd::SandboxPool;
use serde_json::{Value, json};

const RELEASE: &str = "sandpool";
/// The chart's ServiceAccount for release [`RELEASE`].
const OPERATOR_SA: &str = "sandpool-operator";
const TIMEOUT: Duration = Duration::from_secs(90);

/// A namespace with the chart installed and a kubeconfig holding its ServiceAccount's token.
struct Setup {
    cluster: Cluster,
    admin: Client,
    ns: TestNamespace,
    dir: tempfile::TempDir,
    operator_kubeconfig: std::path::PathBuf,
}

impl Setup {
    /// `None` when the e2e tests are skipped on purpose.
    async fn new(namespace: &str, labels: Value) -> Option<Self> {
        let cluster = e2e_cluster::cluster()?;
        cluster.ensure_crd().await;
        let ns = cluster.namespace(namespace, labels).await;
        let chart = repo_root().join("charts/sandpool");
        cluster.helm(&[
            "install",
            RELEASE,
            chart.to_str().expect("utf-8 path"),
            "--namespace",
            &ns.name,
            "--wait",
            "--timeout=2m",
        ]);
        let dir = tempfile::tempdir().expect("tempdir");
        let operator_kubeconfig = dir.path().join("operator.kubeconfig");
        cluster.service_account_kubeconfig(&ns.name, OPERATOR_SA, &operator_kubeconfig);
        Some(Self {
            admin: cluster.admin().await,
            cluster,
            ns,
            dir,
            operator_kubeconfig,
        })
    }

    fn operator(&self, identity: &str) -> Operator {
        Operator::start(
            &self.operator_kubeconfig,
            Some(&self.ns.name),
            &self.ns.name,
            identity,
            self.dir.path(),
        )
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.admin.clone(), &self.ns.name)
    }

    async fn create_pool(&self, name: &str, spec: Value) {
        let pool: SandboxPool = serde_json::from_value(json!({
            "apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
            "metadata": {"name": name, "namespace": self.ns.name},
            "spec": spec,
        }))
        .expect("pool");
        self.api::<SandboxPool>()
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool creates");
    }

    /// Waits until the pool is Ready with `replicas` ready pods and its status describes
    /// its current generation.
    async fn wait_ready(&self, name: &str, replicas: i32, operator: &Operator) {
        let pools = self.api::<SandboxPool>();
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let pool = pools.get(name).await.expect("pool reads");
            let status = pool.status.clone().unwrap_or_default();
            if condition(&pool, "Ready").is_some_and(|c| c.status == "True")
                && status.ready_replicas == replicas
                && status.observed_generation == pool.metadata.generation
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pool {name} not Ready with {replicas} replicas after {TIMEOUT:?}: status {:?}\noperator log:\n{}",
                pool.status,
                operator.log_text()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn condition<'a>(
    pool: &'a SandboxPool,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    pool.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

fn pool_spec(replicas: i32) -> Value {
    json!({
        "replicas": replicas,
        "languages": ["python"],
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "limits": {"wallTime": "5s", "maxWallTime": "10s", "memory": "256Mi", "maxMemory": "512Mi"},
        "access": {"http": true},
    })
}

fn privileged() -> Value {
    json!({"pod-security.kubernetes.io/enforce": "privileged"})
}

/// The one controller owner reference every child must carry.
fn assert_owned(kind: &str, refs: &[OwnerReference], pool: &SandboxPool) {
    let uid = pool.uid().expect("pool uid");
    let owners: Vec<_> = refs.iter().filter(|r| r.controller == Some(true)).collect();
    assert_eq!(owners.len(), 1, "{kind}: one controller owner, got {refs:?}");
    let owner = owners[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str()
        ),
        (
            "sandpool.dev/v1alpha1",
            "SandboxPool",
            pool.name_any().as_str(),
            uid.as_str()
        ),
        "{kind}: owner reference"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_gets_its_children_scales_and_is_garbage_collected() {
    let Some(setup) = Setup::new("e2e-pool", privileged()).await else {
        return;
    };
    let ns = setup.ns.name.clone();
    let operator = setup.operator("op-a");
    setup.create_pool("e2e", pool_spec(1)).await;
    setup.wait_ready("e2e", 1, &operator).await;

    let pools = setup.api::<SandboxPool>();
    let pool = pools.get("e2e").await.expect("pool reads");
    let status = pool.status.clone().expect("status");
    assert_eq!((status.replicas, status.ready_replicas), (1, 1));
    assert_eq!(
        status.endpoint.as_deref(),
        Some(format!("dns:///e2e.{ns}.svc.cluster.local:50051").as_str())
    );
    assert_eq!(
        status.selector.as_deref(),
        Some("app.kubernetes.io/instance=e2e,app.kubernetes.io/name=sandpool-executor,sandpool.dev/pool=e2e")
    );
    let reasons: Vec<_> = status
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("Ready", "True", "AllReplicasReady"),
            ("Progressing", "False", "RolloutComplete"),
            ("Degraded", "False", "AsExpected")
        ]
    );

    // Children, each owned by the pool, with the fields the design promises.
    let sa = setup.api::<ServiceAccount>().get("e2e").await.expect("ServiceAccount");
    assert_owned("ServiceAccount", sa.owner_references(), &pool);
    assert_eq!(sa.automount_service_account_token, Some(false));

    let svc = setup.api::<Service>().get("e2e").await.expect("Service");
    assert_owned("Service", svc.owner_references(), &pool);
    let svc_spec = svc.spec.expect("Service spec");
    assert_eq!(svc_spec.cluster_ip.as_deref(), Some("None"), "headless");
    let ports: Vec<i32> = svc_spec.ports.unwrap_or_default().iter().map(|p| p.port).collect();
    assert_eq!(ports, [50051, 8080, 9090]);

    let np = setup.api::<NetworkPolicy>().get("e2e").await.expect("NetworkPolicy");
    assert_owned("NetworkPolicy", np.owner_references(), &pool);
    let np_spec = serde_json::to_value(np.spec.expect("NetworkPolicy spec")).expect("json");
    assert_eq!(
        np_spec,
        json!({
            "podSelector": {"matchLabels": {
                "app.kubernetes.io/instance": "e2e",
                "app.kubernetes.io/name": "sandpool-executor",
                "sandpool.dev/pool": "e2e"}},
            "policyTypes": ["Ingress", "Egress"],
            // The default client peer on gRPC and HTTP, and the pool's own gateway on HTTP
            // only; no egress rule at all.
            "ingress": [{
                "from": [{"podSelector": {"matchLabels": {"role": "sandbox-user"}}}],
                "ports": [{"protocol": "TCP", "port": 50051}, {"protocol": "TCP", "port": 8080}],
            }, {
                "from": [{"podSelector": {"matchLabels": {
                    "app.kubernetes.io/instance": "e2e",
                    "app.kubernetes.io/name": "sandpool-gateway",
                    "sandpool.dev/gateway": "e2e"}}}],
                "ports": [{"protocol": "TCP", "port": 8080}],
            }],
        }),
        "NetworkPolicy as stored by the API server"
    );

    let pdb = setup.api::<PodDisruptionBudget>().get("e2e").await.expect("PDB");
    assert_owned("PodDisruptionBudget", pdb.owner_references(), &pool);
    let pdb_spec = pdb.spec.expect("PDB spec");
    assert_eq!(serde_json::to_value(pdb_spec.max_unavailable).expect("json"), json!(1));

    let deployments = setup.api::<Deployment>();
    let deploy = deployments.get("e2e").await.expect("Deployment");
    assert_owned("Deployment", deploy.owner_references(), &pool);
    let template = deploy.spec.clone().expect("spec").template;
    let pod_spec = template.spec.expect("pod spec");
    assert_eq!(pod_spec.automount_service_account_token, Some(false));
    assert_eq!(pod_spec.enable_service_links, Some(false));
    assert_eq!(pod_spec.service_account_name.as_deref(), Some("e2e"));

    // The executor pod was admitted in a namespace that enforces "privileged", scheduled
    // onto a kwok node, and is Ready.
    let pods: Api<Pod> = setup.api();
    let selector = ListParams::default().labels("sandpool.dev/pool=e2e");
    let listed = pods.list(&selector).await.expect("pods list");
    assert_eq!(listed.items.len(), 1, "one executor pod");
    assert!(
        listed.items[0]
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| n.starts_with("kwok-node-")),
        "scheduled onto a kwok node"
    );

    // `kubectl get sbp`: the printer columns, through the short name.
    let table = setup.cluster.kubectl(&["get", "sbp", "-n", &ns]);
    let mut lines = table.lines();
    let header: Vec<_> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "REPLICAS",
            "PODS-READY",
            "READY",
            "REASON",
            "LANGUAGES",
            "GPU",
            "SESSIONS",
            "AGE"
        ],
        "{table}"
    );
    let row: Vec<_> = lines.next().expect("row").split_whitespace().collect();
    // GPU is blank for a CPU pool and SESSIONS for one without live session counts, so the
    // row has two fields fewer.
    assert_eq!(
        row[..6],
        ["e2e", "1", "1", "True", "AllReplicasReady", "[\"python\"]"],
        "{table}"
    );
    assert_eq!(row.len(), 7, "{table}");
    // And the `sandpool` category.
    assert!(
        setup
            .cluster
            .kubectl(&["get", "sandpool", "-n", &ns, "-o", "name"])
            .contains("sandboxpool.sandpool.dev/e2e")
    );

    // A deleted NetworkPolicy is restored at once (the operator watches its children), so
    // the pods are never left open for long.
    let nps: Api<NetworkPolicy> = setup.api();
    let old_uid = np.metadata.uid.clone();
    nps.delete("e2e", &DeleteParams::default())
        .await
        .expect("NetworkPolicy deletes");
    wait_for("the operator to restore the NetworkPolicy", TIMEOUT, || async {
        nps.get_opt("e2e")
            .await
            .ok()
            .flatten()
            .is_some_and(|n| n.metadata.uid != old_uid)
    })
    .await;

    no_op_reconcile_writes_nothing(&setup, &operator).await;

    // `kubectl scale` goes through the scale subresource; the operator follows.
    setup.cluster.kubectl(&["scale", "sbp/e2e", "--replicas=2", "-n", &ns]);
    setup.wait_ready("e2e", 2, &operator).await;
    assert_eq!(
        deployments
            .get("e2e")
            .await
            .expect("Deployment")
            .spec
            .and_then(|s| s.replicas),
        Some(2)
    );
    let scale = pools.get_scale("e2e").await.expect("scale reads");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    let scale_status = scale.status.expect("scale status");
    assert_eq!(scale_status.replicas, 2);
    assert_eq!(scale_status.selector, status.selector);

    // An autoscaling/v2 HPA accepts the pool as its target, and the controller-manager's
    // HPA controller scales it through /scale: below minReplicas it scales up without
    // needing metrics.
    let hpas: Api<HorizontalPodAutoscaler> = setup.api();
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "e2e"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool", "name": "e2e"},
            "minReplicas": 3,
            "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}],
        }
    }))
    .expect("hpa");
    hpas.create(&PostParams::default(), &hpa).await.expect("HPA accepted");
    setup.wait_ready("e2e", 3, &operator).await;
    let hpa = hpas.get("e2e").await.expect("HPA reads");
    let able = hpa
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "AbleToScale");
    assert_eq!(
        able.map(|c| c.status),
        Some("True".to_owned()),
        "the HPA controller reads the pool's scale"
    );
    hpas.delete("e2e", &DeleteParams::default()).await.expect("HPA deletes");

    // Deleting the pool leaves its children to the garbage collector.
    pools
        .delete("e2e", &DeleteParams::background())
        .await
        .expect("pool deletes");
    let sas: Api<ServiceAccount> = setup.api();
    let svcs: Api<Service> = setup.api();
    let pdbs: Api<PodDisruptionBudget> = setup.api();
    wait_for("the garbage collector to delete every child", TIMEOUT, || async {
        pools.get_opt("e2e").await.is_ok_and(|p| p.is_none())
            && deployments.get_opt("e2e").await.is_ok_and(|o| o.is_none())
            && sas.get_opt("e2e").await.is_ok_and(|o| o.is_none())
            && svcs.get_opt("e2e").await.is_ok_and(|o| o.is_none())
            && nps.get_opt("e2e").await.is_ok_and(|o| o.is_none())
            && pdbs.get_opt("e2e").await.is_ok_and(|o| o.is_none())
            && pods.list(&selector).await.is_ok_and(|l| l.items.is_empty())
    })
    .await;
}

/// A reconcile that finds nothing to change writes nothing: neither the operator's own
/// metrics nor the API server's audit log show a write.
async fn no_op_reconcile_writes_nothing(setup: &Setup, operator: &Operator) {
    let user = format!("system:serviceaccount:{}:{OPERATOR_SA}", setup.ns.name);
    let done = "sandpool_operator_reconcile_duration_seconds_count";
    // Let reconciles triggered by the pods turning Ready finish first.
    let mut last = operator.metric(done);
    let mut stable_since = Instant::now();
    let deadline = Instant::now() + TIMEOUT;
    while stable_since.elapsed() < Duration::from_secs(3) {
        assert!(Instant::now() < deadline, "reconciles never settled");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = operator.metric(done);
        if now != last {
            last = now;
            stable_since = Instant::now();
        }
    }
    let child_writes = operator.metric_sum("sandpool_operator_child_writes_total");
    let status_writes = operator.metric("sandpool_operator_status_writes_total");
    let events = setup.cluster.audit_events();
    let audit_mark = events.len();
    // The filter below must match the operator's requests: its first apply of the
    // Deployment (server-side apply is a PATCH) is in the log.
    assert!(
        events.iter().any(|e| e["user"]["username"] == user.as_str()
            && e["verb"] == "patch"
            && e["objectRef"]["resource"] == "deployments"),
        "the audit log has none of {user}'s writes"
    );

    // Touching the pool's metadata triggers a reconcile without changing anything it reads.
    setup
        .cluster
        .kubectl(&["annotate", "sbp/e2e", "-n", &setup.ns.name, "e2e.sandpool.dev/touch=1"]);
    wait_for("the operator to reconcile the touched pool", TIMEOUT, || async {
        operator.metric(done) > last
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    assert_eq!(
        operator.metric_sum("sandpool_operator_child_writes_total"),
        child_writes,
        "child writes in a no-op reconcile"
    );
    assert_eq!(
        operator.metric("sandpool_operator_status_writes_total"),
        status_writes,
        "status writes in a no-op reconcile"
    );
    let writes: Vec<String> = setup.cluster.audit_events()[audit_mark..]
        .iter()
        .filter(|e| e["user"]["username"] == user.as_str())
        // Renewing the leader Lease is the only write a healthy, idle operator makes.
        .filter(|e| e["objectRef"]["resource"] != "leases")
        .map(|e| {
            format!(
                "{} {} {}",
                e["verb"], e["objectRef"]["resource"], e["objectRef"]["name"]
            )
        })
        .collect();
    assert!(writes.is_empty(), "the no-op reconcile wrote: {writes:?}");
}

async fn lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt(sandpool_operator::leader::LEASE_NAME)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_reconciles_and_a_standby_takes_over() {
    let Some(setup) = Setup::new("e2e-leader", privileged()).await else {
        return;
    };
    let leases: Api<Lease> = setup.api();
    let mut a = setup.operator("op-a");
    wait_for("op-a to take the lease", TIMEOUT, || async {
        lease_holder(&leases).await.as_deref() == Some("op-a")
    })
    .await;
    let b = setup.operator("op-b");
    wait_for("op-b to serve /metrics", TIMEOUT, || async { b.metrics().is_some() }).await;

    setup.create_pool("e2e", pool_spec(1)).await;
    setup.wait_ready("e2e", 1, &a).await;
    assert_eq!(a.metric("sandpool_operator_leader"), 1.0);
    assert!(a.metric("sandpool_operator_reconciles_total") >= 1.0);
    assert_eq!(b.metric("sandpool_operator_leader"), 0.0);
    assert_eq!(
        b.metric("sandpool_operator_reconciles_total"),
        0.0,
        "the standby reconciled"
    );

    // The leader dies without releasing the lease; the standby takes over once it expires.
    a.kill();
    let killed = Instant::now();
    // The lease expires at most LEASE_DURATION_S after the last renewal, which came before
    // the kill; the slack covers the standby's and this loop's polling.
    let limit = Duration::from_secs(sandpool_operator::leader::LEASE_DURATION_S + 3);
    wait_for("op-b to take the lease", limit, || async {
        lease_holder(&leases).await.as_deref() == Some("op-b")
    })
    .await;
    eprintln!("lease handed over {:?} after the leader was killed", killed.elapsed());
    setup
        .cluster
        .kubectl(&["scale", "sbp/e2e", "--replicas=2", "-n", &setup.ns.name]);
    setup.wait_ready("e2e", 2, &b).await;
    assert_eq!(b.metric("sandpool_operator_leader"), 1.0);
    assert!(b.metric("sandpool_operator_reconciles_total") >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_whose_pod_security_level_refuses_the_pods_degrades_the_pool() {
    // "baseline" refuses SYS_ADMIN and an Unconfined seccomp profile (docs/operator.md).
    let Some(setup) = Setup::new(
        "e2e-baseline",
        json!({"pod-security.kubernetes.io/enforce": "baseline"}),
    )
    .await
    else {
        return;
    };
    let operator = setup.operator("op-a");
    setup.create_pool("e2e", pool_spec(1)).await;
    let pools = setup.api::<SandboxPool>();
    wait_for("the pool to report the refused pods", TIMEOUT, || async {
        pools.get("e2e").await.is_ok_and(|p| {
            condition(&p, "Degraded").is_some_and(|c| {
                c.status == "True" && c.reason == "ReplicaFailure" && c.message.contains("violates PodSecurity")
            }) && condition(&p, "Ready").is_some_and(|c| c.status == "False")
        })
    })
    .await;
    let pods: Api<Pod> = setup.api();
    assert!(
        pods.list(&ListParams::default().labels("sandpool.dev/pool=e2e"))
            .await
            .expect("pods list")
            .items
            .is_empty(),
        "no pod was admitted"
    );
    // The REASON column and a Warning Event say it too, not "ReplicasNotReady".
    let pool = pools.get("e2e").await.expect("pool reads");
    assert_eq!(
        condition(&pool, "Ready").map(|c| c.reason.as_str()),
        Some("ReplicaFailure")
    );
    wait_for_warning(&setup, "e2e", "ReplicaFailure", "violates PodSecurity").await;
    drop(operator);
}

/// Waits for one Warning Event about pool `pool` with `reason` whose note contains `words`,
/// and returns how many such Events there are.
async fn wait_for_warning(setup: &Setup, pool: &str, reason: &str, words: &str) -> usize {
    let events: Api<Event> = setup.api();
    let matching = || async {
        events
            .list(&ListParams::default())
            .await
            .expect("events list")
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pool)
                    && e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some(reason)
                    && e.note.as_deref().is_some_and(|n| n.contains(words))
            })
            .count()
    };
    wait_for(&format!("a Warning {reason} Event about {pool}"), TIMEOUT, || async {
        matching().await > 0
    })
    .await;
    matching().await
}

/// Whether `kubectl get sbp NAME` (its printer columns) shows `reason`.
fn get_sbp_shows(setup: &Setup, pool: &str, reason: &str) -> bool {
    let line = setup
        .cluster
        .kubectl(&["get", "sbp", pool, "-n", &setup.ns.name, "--no-headers"]);
    line.split_whitespace().any(|w| w == reason)
}

/// How long the issue allows between a failure and the pool saying so (issue 31).
const SAYS_WHY_WITHIN: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_pods_no_node_can_take_says_why_then_recovers() {
    let Some(setup) = Setup::new("e2e-no-gpu", privileged()).await else {
        return;
    };
    let operator = setup.operator("op-a");
    // The kwok nodes have no GPUs: the scheduler says so, and the pool must quote it.
    let mut spec = pool_spec(1);
    spec["gpu"] = json!({"count": 1});
    setup.create_pool("e2e", spec).await;
    let pools = setup.api::<SandboxPool>();
    wait_for("the pool to say no node has a GPU", SAYS_WHY_WITHIN, || async {
        pools.get("e2e").await.is_ok_and(|p| {
            condition(&p, "Ready").is_some_and(|c| {
                c.status == "False" && c.reason == "Unschedulable" && c.message.contains("Insufficient nvidia.com/gpu")
            }) && condition(&p, "Degraded").is_some_and(|c| c.status == "True" && c.reason == "Unschedulable")
        })
    })
    .await;
    assert!(get_sbp_shows(&setup, "e2e", "Unschedulable"));
    assert_eq!(
        wait_for_warning(&setup, "e2e", "Unschedulable", "nvidia.com/gpu").await,
        1,
        "one Event for the problem, however often the pool is reconciled"
    );

    // The Deployment's own deadline (a field the operator leaves alone), made short: it
    // passes, and the pool names it after the cause it is a consequence of.
    let deadline = |seconds: u32| {
        setup.cluster.kubectl(&[
            "patch",
            "deployment",
            "e2e",
            "-n",
            &setup.ns.name,
            "--type=merge",
            "-p",
            &json!({"spec": {"progressDeadlineSeconds": seconds}}).to_string(),
        ]);
    };
    deadline(1);
    wait_for("the pool to see the passed deadline", SAYS_WHY_WITHIN, || async {
        pools.get("e2e").await.is_ok_and(|p| {
            condition(&p, "Progressing").is_some_and(|c| c.status == "False" && c.reason == "ProgressDeadlineExceeded")
                && condition(&p, "Ready").is_some_and(|c| {
                    c.reason == "Unschedulable" && c.message.ends_with("; also ProgressDeadlineExceeded")
                })
        })
    })
    .await;
    deadline(600);

    // Without the GPU the pod is scheduled, and the problem is gone from the pool.
    setup.cluster.kubectl(&[
        "patch",
        "sbp",
        "e2e",
        "-n",
        &setup.ns.name,
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/gpu"}]"#,
    ]);
    setup.wait_ready("e2e", 1, &operator).await;
    let pool = pools.get("e2e").await.expect("pool reads");
    assert_eq!(
        condition(&pool, "Degraded").map(|c| (c.status.as_str(), c.reason.as_str())),
        Some(("False", "AsExpected"))
    );
    assert!(get_sbp_shows(&setup, "e2e", "AllReplicasReady"));
    drop(operator);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_oom_killed_or_imageless_executor_is_named_then_recovers() {
    let Some(setup) = Setup::new("e2e-crash", privileged()).await else {
        return;
    };
    let operator = setup.operator("op-a");
    setup.create_pool("e2e", pool_spec(1)).await;
    setup.wait_ready("e2e", 1, &operator).await;

    // kwok runs no container; it leaves a status it did not write alone, so the pod is made
    // to look as a crash-looping executor's does on a real node (the executor's fatal error
    // in the termination message: docs/operator.md, "When a pool is not Ready").
    let pods: Api<Pod> = setup.api();
    let victim = pods
        .list(&ListParams::default().labels("sandpool.dev/pool=e2e"))
        .await
        .expect("pods list")
        .items
        .first()
        .expect("a pod")
        .name_any();
    let crash = json!({"status": {
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
        ],
        "containerStatuses": [{
            "name": "executor", "image": "ghcr.io/sandpool/executor:0.1.0", "imageID": "",
            "ready": false, "started": false, "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff",
                                  "message": "back-off 1m20s restarting failed container=executor"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z",
                "message": "isolation mode namespaces is not available here: mounting the sandbox root: Operation not permitted (os error 1)"}}
        }]
    }});
    let crashed_at = Instant::now();
    setup.cluster.kubectl(&[
        "patch",
        "pod",
        &victim,
        "-n",
        &setup.ns.name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &crash.to_string(),
    ]);
    let pools = setup.api::<SandboxPool>();
    wait_for("the pool to name the crash loop", SAYS_WHY_WITHIN, || async {
        pools.get("e2e").await.is_ok_and(|p| {
            condition(&p, "Ready").is_some_and(|c| {
                c.status == "False"
                    && c.reason == "CrashLoopBackOff"
                    && c.message.contains(&format!(
                        "pod {victim}: container executor keeps exiting (restarted 4 times"
                    ))
                    && c.message
                        .ends_with("mounting the sandbox root: Operation not permitted (os error 1)")
            })
        })
    })
    .await;
    eprintln!("the pool named the crash loop {:?} after it", crashed_at.elapsed());
    assert!(get_sbp_shows(&setup, "e2e", "CrashLoopBackOff"));
    wait_for_warning(&setup, "e2e", "CrashLoopBackOff", "Operation not permitted").await;

    // The pod replaced (as a fixed image would be), the pool is Ready again.
    pods.delete(&victim, &DeleteParams::default())
        .await
        .expect("pod deletes");
    setup.wait_ready("e2e", 1, &operator).await;
    let pool = pools.get("e2e").await.expect("pool reads");
    assert_eq!(
        condition(&pool, "Degraded").map(|c| (c.status.as_str(), c.reason.as_str())),
        Some(("False", "AsExpected"))
    );

    // Two more shapes a real node gives, each named, each gone with its pod: an executor
    // killed for memory, and an image the node does not have (imagePullPolicy: Never).
    let shapes = [
        (
            json!({"restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                   "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                       "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}}}),
            "OOMKilled",
            "was killed for using more than its memory limit of 1Gi",
        ),
        (
            json!({"restartCount": 0, "state": {"waiting": {"reason": "ErrImageNeverPull",
                   "message": "Container image \"ghcr.io/sandpool/executor:0.1.0\" is not present with pull policy of Never"}}}),
            "ErrImageNeverPull",
            "is not present with pull policy of Never",
        ),
    ];
    for (container, reason, words) in shapes {
        let victim = pods
            .list(&ListParams::default().labels("sandpool.dev/pool=e2e"))
            .await
            .expect("pods list")
            .items
            .into_iter()
            .find(|p| p.metadata.deletion_timestamp.is_none())
            .expect("a pod")
            .name_any();
        let mut status = json!({
            "name": "executor", "image": "ghcr.io/sandpool/executor:0.1.0", "imageID": "",
            "ready": false, "started": false,
        });
        for (k, v) in container.as_object().expect("object") {
            status[k] = v.clone();
        }
        let patch = json!({"status": {
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
            ],
            "containerStatuses": [status]
        }});
        setup.cluster.kubectl(&[
            "patch",
            "pod",
            &victim,
            "-n",
            &setup.ns.name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ]);
        wait_for(&format!("the pool to name {reason}"), SAYS_WHY_WITHIN, || async {
            pools
                .get("e2e")
                .await
                .is_ok_and(|p| condition(&p, "Ready").is_some_and(|c| c.reason == reason && c.message.contains(words)))
        })
        .await;
        wait_for_warning(&setup, "e2e", reason, words).await;
        pods.delete(&victim, &DeleteParams::default())
            .await
            .expect("pod deletes");
        setup.wait_ready("e2e", 1, &operator).await;
    }
    drop(operator);
}

/// Server-side dry run of creating a Pod from `deployment`'s template: admission runs in
/// full (Pod Security included) and nothing is stored. The API server's refusal, if any.
async fn dry_run_pod_from(setup: &Setup, deployment: &str) -> Result<(), String> {
    let template = setup
        .api::<Deployment>()
        .get(deployment)
        .await
        .expect("Deployment reads")
        .spec
        .expect("spec")
        .template;
    let mut pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": format!("{deployment}-dry-run")}})).expect("pod");
    pod.metadata.labels = template.metadata.and_then(|m| m.labels);
    pod.spec = template.spec;
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match setup.api::<Pod>().create(&params, &pod).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(status.message),
        Err(other) => panic!("dry-run create of a Pod from {deployment}: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_pools_run_where_pod_security_enforces_restricted() {
    // The chart's operator and a restricted pool's executors fit "restricted"; namespaces
    // mode's do not (docs/operator.md), and a GPU does not fit restricted mode at all.
    let Some(setup) = Setup::new(
        "e2e-restricted",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    )
    .await
    else {
        return;
    };
    let operator = setup.operator("op-a");
    let mut restricted = pool_spec(1);
    restricted["isolation"] = json!({"mode": "restricted"});
    // The auth Secret adds a secret volume, which "restricted" must admit too.
    restricted["auth"] = json!({"enabled": true});
    setup.create_pool("locked", restricted.clone()).await;
    setup.create_pool("open", pool_spec(1)).await;
    let mut gpu = restricted;
    gpu["gpu"] = json!({"count": 1});
    setup.create_pool("gpu", gpu).await;

    setup.wait_ready("locked", 1, &operator).await;
    let pools = setup.api::<SandboxPool>();
    wait_for(
        "the namespaces-mode pool to report its refused pods",
        TIMEOUT,
        || async {
            pools.get("open").await.is_ok_and(|p| {
                condition(&p, "Degraded").is_some_and(|c| {
                    c.status == "True"
                        && c.reason == "ReplicaFailure"
                        && c.message.contains("violates PodSecurity \"restricted:latest\"")
                })
            })
        },
    )
    .await;
    wait_for("the restricted GPU pool to be refused", TIMEOUT, || async {
        pools.get("gpu").await.is_ok_and(|p| {
            condition(&p, "Ready").is_some_and(|c| {
                c.status == "False" && c.reason == "InvalidSpec" && c.message.starts_with("spec.gpu: ")
            })
        })
    })
    .await;
    assert!(
        setup.api::<Deployment>().get_opt("gpu").await.expect("reads").is_none(),
        "a refused pool gets no children"
    );

    // Admission of each template on its own, with the API server's words.
    dry_run_pod_from(&setup, "locked")
        .await
        .expect("Pod Security \"restricted\" admits a restricted pool's pod");
    let refusal = dry_run_pod_from(&setup, "open")
        .await
        .expect_err("Pod Security \"restricted\" refuses a namespaces-mode pod");
    for violation in [
        "violates PodSecurity \"restricted:latest\"",
        "capabilities",
        "seccompProfile",
        "runAsNonRoot",
    ] {
        assert!(refusal.contains(violation), "{violation:?} not in {refusal}");
    }

    // The running executor pod is the restricted one: non-root, nothing added.
    let pods: Api<Pod> = setup.api();
    let listed = pods
        .list(&ListParams::default().labels("sandpool.dev/pool=locked"))
        .await
        .expect("pods list");
    assert_eq!(listed.items.len(), 1, "one executor pod");
    let spec = serde_json::to_value(listed.items[0].spec.clone().expect("pod spec")).expect("json");
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["containers"][0]["securityContext"]["capabilities"],
        json!({"drop": ["ALL"]})
    );
    drop(operator);
}

/// A pool that loses a pod after its rollout finished is Degraded (ReplicasUnavailable), not
/// rolling out again: the real Deployment controller reports such a loss with available ==
/// ready < desired, which the old condition logic could never turn into Degraded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_that_loses_a_pod_after_its_rollout_is_degraded() {
    let Some(setup) = Setup::new("e2e-degraded", privileged()).await else {
        return;
    };
    let operator = setup.operator("op-a");
    setup.create_pool("e2e", pool_spec(2)).await;
    setup.wait_ready("e2e", 2, &operator).await;

    // kwok plays the kubelet and leaves a status it did not write alone, so a pod whose
    // Ready condition turns False stays that way, as a crashed executor's would.
    let pods: Api<Pod> = setup.api();
    let listed = pods
        .list(&ListParams::default().labels("sandpool.dev/pool=e2e"))
        .await
        .expect("pods list");
    let victim = listed.items.first().expect("a pod").name_any();
    setup.cluster.kubectl(&[
        "patch",
        "pod",
        &victim,
        "-n",
        &setup.ns.name,
        "--subresource=status",
        "--type=strategic",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"False","reason":"E2E","message":"executor lost"}]}}"#,
    ]);

    let pools = setup.api::<SandboxPool>();
    wait_for("the pool to report the lost pod as Degraded", TIMEOUT, || async {
        pools.get("e2e").await.is_ok_and(|p| {
            condition(&p, "Degraded").is_some_and(|c| c.status == "True" && c.reason == "ReplicasUnavailable")
                && condition(&p, "Progressing").is_some_and(|c| c.status == "False" && c.reason == "RolloutComplete")
                && condition(&p, "Ready").is_some_and(|c| c.status == "False")
        })
    })
    .await;
    let status = pools.get("e2e").await.expect("pool").status.expect("status");
    assert_eq!(status.ready_replicas, 1, "{status:?}");
    drop(operator);
}

/// Two tenants as docs/tenants.md shows them.
fn two_tenants() -> Value {
    json!([
        {"name": "rl", "tokenSecretRef": {"name": "rl-token", "key": "token"}, "weight": 3,
         "maxConcurrency": 8, "maxQueue": 1000, "maxSessions": 4, "maxPriority": "interactive"},
        {"name": "sweeps", "tokenSecretRef": {"name": "sweeps-token", "key": "token"}, "maxPriority": "batch"},
    ])
}

/// The tenants file the operator renders for [`two_tenants`] (the executor's format,
/// docs/tenants.md): no token, unset caps left to the executor's defaults.
const TWO_TENANTS_FILE: &str = r#"# Rendered by sandpool-operator from the SandboxPool's spec.tenants; tokens are mounted, not here.

[[tenant]]
name = "rl"
token_file = "/sandpool-tenants/rl/token"
weight = 3
max_concurrency = 8
max_queue = 1000
max_sessions = 4
max_priority = "interactive"

[[tenant]]
name = "sweeps"
token_file = "/sandpool-tenants/sweeps/token"
weight = 1
max_priority = "batch"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_become_a_config_map_and_mounts_and_change_without_a_rollout() {
    let Some(setup) = Setup::new("e2e-tenants", privileged()).await else {
        return;
    };
    let operator = setup.operator("op-a");
    // The pool author's Secrets; the operator never reads them (its Role cannot).
    let secrets = setup.api::<Secret>();
    for name in ["rl-token", "sweeps-token"] {
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "stringData": {"token": format!("{name}-0123456789abcdef")},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("Secret creates");
    }
    let mut spec = pool_spec(1);
    spec["tenants"] = two_tenants();
    setup.create_pool("e2e", spec).await;
    setup.wait_ready("e2e", 1, &operator).await;

    let pools = setup.api::<SandboxPool>();
    let pool = pools.get("e2e").await.expect("pool reads");
    let config_maps = setup.api::<ConfigMap>();
    let cm = config_maps.get("e2e-tenants").await.expect("tenants ConfigMap");
    assert_owned("ConfigMap", cm.owner_references(), &pool);
    let data = cm.data.clone().unwrap_or_default();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["tenants.toml"]);
    assert_eq!(data["tenants.toml"], TWO_TENANTS_FILE);

    let deployments = setup.api::<Deployment>();
    let deploy = deployments.get("e2e").await.expect("Deployment");
    let pod = serde_json::to_value(deploy.spec.clone().expect("spec").template.spec.expect("pod spec")).expect("json");
    let volumes = pod["volumes"].as_array().expect("volumes");
    let volume = |name: &str| {
        volumes
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("volume {name} in {volumes:?}"))
            .clone()
    };
    assert_eq!(volume("tenants-config")["configMap"]["name"], "e2e-tenants");
    let sources: Vec<(String, String, String)> = volume("tenant-tokens")["projected"]["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| {
            let secret = &s["secret"];
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                text(&secret["name"]),
                text(&secret["items"][0]["key"]),
                text(&secret["items"][0]["path"]),
            )
        })
        .collect();
    let source = |n: &str, k: &str, p: &str| (n.to_owned(), k.to_owned(), p.to_owned());
    assert_eq!(
        sources,
        [
            source("rl-token", "token", "rl/token"),
            source("sweeps-token", "token", "sweeps/token")
        ]
    );
    let container = &pod["containers"][0];
    let mounts = container["volumeMounts"].as_array().expect("mounts");
    for (name, path) in [
        ("tenants-config", "/sandpool-tenants-config"),
        ("tenant-tokens", "/sandpool-tenants"),
    ] {
        let mount = mounts
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("mount {name} in {mounts:?}"));
        assert_eq!(mount["mountPath"], path);
        assert_eq!(mount["readOnly"], true);
        assert!(mount.get("subPath").is_none(), "a subPath mount is never refreshed");
    }
    assert!(
        container["env"]
            .as_array()
            .expect("env")
            .contains(&json!({"name": "SANDPOOL_TENANTS_FILE", "value": "/sandpool-tenants-config/tenants.toml"})),
        "{}",
        container["env"]
    );

    // A new weight reaches the ConfigMap, and the pods are left running: the executor
    // re-reads the file the kubelet refreshes.
    let generation = deploy.metadata.generation;
    let mut tenants = two_tenants();
    tenants[1]["weight"] = json!(5);
    pools
        .patch(
            "e2e",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"tenants": tenants}})),
        )
        .await
        .expect("pool patches");
    wait_for("the new weight in the ConfigMap", TIMEOUT, || async {
        config_maps.get("e2e-tenants").await.is_ok_and(|cm| {
            cm.data.unwrap_or_default().get("tenants.toml").is_some_and(|f| {
                f.contains("name = \"sweeps\"\ntoken_file = \"/sandpool-tenants/sweeps/token\"\nweight = 5\n")
            })
        })
    })
    .await;
    setup.wait_ready("e2e", 1, &operator).await;
    let after = deployments.get("e2e").await.expect("Deployment");
    assert_eq!(after.metadata.generation, generation, "no rollout for a new weight");

    // Without tenants, the ConfigMap goes (after the Deployment stops mounting it).
    pools
        .patch(
            "e2e",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"tenants": null}})),
        )
        .await
        .expect("pool patches");
    wait_for("the tenants ConfigMap to go", TIMEOUT, || async {
        config_maps.get_opt("e2e-tenants").await.is_ok_and(|cm| cm.is_none())
    })
    .await;
    let deploy = deployments.get("e2e").await.expect("Deployment");
    let text = serde_json::to_string(&deploy.spec).expect("json");
    assert!(!text.contains("tenant"), "{text}");
    drop(operator);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_with_auth_are_an_invalid_spec() {
    let Some(setup) = Setup::new("e2e-tenants-auth", privileged()).await else {
        return;
    };
    let operator = setup.operator("op-a");
    let mut spec = pool_spec(1);
    spec["tenants"] = two_tenants();
    spec["auth"] = json!({"enabled": true});
    setup.create_pool("e2e", spec).await;
    let pools = setup.api::<SandboxPool>();
    wait_for("Ready=False with reason InvalidSpec", TIMEOUT, || async {
        pools.get("e2e").await.is_ok_and(|p| {
            condition(&p, "Ready").is_some_and(|c| {
                c.status == "False"
                    && c.reason == "InvalidSpec"
                    && c.message.contains("spec.tenants")
                    && c.message.contains("spec.auth.enabled")
            })
        })
    })
    .await;
    wait_for_warning(&setup, "e2e", "InvalidSpec", "spec.auth.enabled").await;
    assert!(get_sbp_shows(&setup, "e2e", "InvalidSpec"));
    // Nothing was made for it: no Deployment, no ConfigMap, no auth Secret.
    assert!(setup.api::<Deployment>().get_opt("e2e").await.expect("get").is_none());
    assert!(
        setup
            .api::<ConfigMap>()
            .get_opt("e2e-tenants")
            .await
            .expect("get")
            .is_none()
    );
    assert!(setup.api::<Secret>().get_opt("e2e-auth").await.expect("get").is_none());
    drop(operator);
}

/// The gateway's objects, by kind, that exist now.
async fn gateway_objects(setup: &Setup, name: &str) -> Vec<&'static str> {
    let mut present = Vec::new();
    macro_rules! check {
        ($kind:ty, $label:literal) => {
            if setup.api::<$kind>().get_opt(name).await.expect("get").is_some() {
                present.push($label);
            }
        };
    }
    check!(Deployment, "Deployment");
    check!(Service, "Service");
    check!(NetworkPolicy, "NetworkPolicy");
    check!(ServiceAccount, "ServiceAccount");
    check!(Role, "Role");
    check!(RoleBinding, "RoleBinding");
    present
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_pool_gets_a_gateway_that_goes_when_turned_off() {
    let Some(setup) = Setup::new("e2e-gateway", privileged()).await else {
        return;
    };
    let operator = setup.operator("op-a");
    setup.create_pool("e2e", pool_spec(1)).await;
    setup.wait_ready("e2e", 1, &operator).await;
    let pools = setup.api::<SandboxPool>();
    let pool = pools.get("e2e").await.expect("pool reads");

    // Every gateway object, owned by the pool; the chart's Role let the operator write a
    // Role that grants EndpointSlice list/watch (it holds them itself).
    wait_for("the gateway's objects", TIMEOUT, || async {
        gateway_objects(&setup, "e2e-gateway").await.len() == 6
    })
    .await;
    let deploy = setup.api::<Deployment>().get("e2e-gateway").await.expect("Deployment");
    assert_owned("Deployment", deploy.owner_references(), &pool);
    let pod = deploy.spec.expect("spec").template.spec.expect("pod spec");
    let container = &pod.containers[0];
    assert_eq!(
        container.command.as_deref(),
        Some(&["/sandpool-gateway".to_owned()][..])
    );
    assert_eq!(pod.service_account_name.as_deref(), Some("e2e-gateway"));
    let role = setup.api::<Role>().get("e2e-gateway").await.expect("Role");
    assert_owned("Role", role.owner_references(), &pool);
    assert_eq!(
        serde_json::to_value(role.rules).expect("json"),
        json!([{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}])
    );
    let svc = setup.api::<Service>().get("e2e-gateway").await.expect("Service");
    let svc_spec = svc.spec.expect("Service spec");
    assert_eq!(svc_spec.type_.as_deref(), Some("ClusterIP"));
    let ports: Vec<i32> = svc_spec.ports.unwrap_or_default().iter().map(|p| p.port).collect();
    assert_eq!(ports, [8080, 9090]);
    let np = setup
        .api::<NetworkPolicy>()
        .get("e2e-gateway")
        .await
        .expect("NetworkPolicy");
    let egress = serde_json::to_value(np.spec.expect("spec").egress).expect("json");
    assert_eq!(
        egress.as_array().map(Vec::len),
        Some(3),
        "executors, DNS, API server: {egress}"
    );

    // The gateway pod runs on a kwok node and the status counts it.
    wait_for("status.gateway with one ready pod", TIMEOUT, || async {
        pools.get("e2e").await.is_ok_and(|p| {
            p.status
                .and_then(|s| s.gateway)
                .is_some_and(|g| g.ready_replicas == 1 && g.replicas == 1)
        })
    })
    .await;
    // Executor pods are still found by the pool label alone; the gateway's are not.
    let pods: Api<Pod> = setup.api();
    let executors = pods
        .list(&ListParams::default().labels("sandpool.dev/pool=e2e"))
        .await
        .expect("pods list");
    assert_eq!(executors.items.len(), 1, "only the executor carries the pool label");

    // A reconcile with nothing to change writes nothing, gateway included.
    no_op_reconcile_writes_nothing(&setup, &operator).await;

    // Turned off: every gateway object goes, and the status no longer names one.
    pools
        .patch(
            "e2e",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gateway": {"enabled": false}}})),
        )
        .await
        .expect("pool patches");
    wait_for("the gateway's objects to go", TIMEOUT, || async {
        gateway_objects(&setup, "e2e-gateway").await.is_empty()
    })
    .await;
    wait_for("status without a gateway", TIMEOUT, || async {
        pools
            .get("e2e")
            .await
            .is_ok_and(|p| p.status.is_some_and(|s| s.gateway.is_none()))
    })
    .await;
    let np = setup.api::<NetworkPolicy>().get("e2e").await.expect("NetworkPolicy");
    let ingress = serde_json::to_value(np.spec.expect("spec").ingress).expect("json");
    assert_eq!(
        ingress.as_array().map(Vec::len),
        Some(1),
        "no gateway admitted: {ingress}"
    );
    drop(operator);
}

/// Restricted executors refuse every session (one uid for every run): a restricted pool that
/// asks for sessions is refused by the API server when it names the mode (the CRD's CEL
/// rule), and reported by the operator when the mode is the operator's default, which the
/// rule cannot see. Neither renders a session capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_pools_with_sessions_are_refused_with_a_reason() {
    let Some(setup) = Setup::new("e2e-restricted-sessions", privileged()).await else {
        return;
    };
    let mut spec = pool_spec(1);
    spec["isolation"] = json!({"mode": "restricted"});
    spec["sessions"] = json!({"maxPerPod": 8});
    let manifest = setup.dir.path().join("restricted-sessions.json");
    let pool = json!({
        "apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
        "metadata": {"name": "named", "namespace": setup.ns.name},
        "spec": spec,
    });
    std::fs::write(&manifest, pool.to_string()).expect("manifest writes");
    let applied = setup.cluster.kubectl_as(
        &setup.cluster.kubeconfig,
        &["apply", "-f", manifest.to_str().expect("utf-8 path")],
    );
    let stderr = String::from_utf8_lossy(&applied.stderr);
    assert!(!applied.status.success(), "kubectl apply must be refused");
    for words in [
        "spec.sessions",
        "isolation mode restricted serves no sessions",
        "share one uid",
    ] {
        assert!(stderr.contains(words), "{words:?} not in kubectl's refusal: {stderr}");
    }
    assert!(
        setup
            .api::<SandboxPool>()
            .get_opt("named")
            .await
            .expect("reads")
            .is_none(),
        "nothing was stored"
    );
    // Without sessions the same pool is admitted.
    spec["sessions"] = json!({"maxPerPod": 0});
    setup.create_pool("named", spec).await;

    // The operator's default mode is restricted: the pool passes admission, then is refused.
    let operator = Operator::start_with_env(
        &setup.operator_kubeconfig,
        Some(&setup.ns.name),
        &setup.ns.name,
        "op-a",
        setup.dir.path(),
        &[("SANDPOOL_DEFAULT_ISOLATION".into(), "restricted".into())],
    );
    let mut by_default = pool_spec(1);
    by_default["sessions"] = json!({"maxPerPod": 8});
    setup.create_pool("defaulted", by_default).await;
    let pools = setup.api::<SandboxPool>();
    wait_for("Ready=False with reason InvalidSpec", TIMEOUT, || async {
        pools.get("defaulted").await.is_ok_and(|p| {
            condition(&p, "Ready").is_some_and(|c| {
                c.status == "False"
                    && c.reason == "InvalidSpec"
                    && c.message.starts_with("spec.sessions: ")
                    && c.message.contains("--default-isolation")
            })
        })
    })
    .await;
    wait_for_warning(&setup, "defaulted", "InvalidSpec", "serves no sessions").await;
    let refused = pools.get("defaulted").await.expect("reads");
    assert!(
        refused.status.and_then(|s| s.sessions).is_none(),
        "a refused pool renders no session capacity"
    );
    assert!(
        setup
            .api::<Deployment>()
            .get_opt("defaulted")
            .await
            .expect("reads")
            .is_none(),
        "a refused pool gets no children"
    );
    setup.wait_ready("named", 1, &operator).await;
    drop(operator);
}

/// The executor Deployment's pod spec of pool `name`, once the operator has made it.
async fn pod_spec_of(setup: &Setup, name: &str) -> Value {
    let deployments = setup.api::<Deployment>();
    wait_for(&format!("Deployment {name}"), TIMEOUT, || async {
        deployments.get_opt(name).await.ok().flatten().is_some()
    })
    .await;
    let d = deployments.get(name).await.expect("Deployment reads");
    serde_json::to_value(d).expect("serializes")["spec"]["template"]["spec"].clone()
}

/// `spec.sessions.store`: a PVC store and an S3 store render their flags and volumes on the
/// executor Deployment the API server keeps; a missing PVC leaves the pods unschedulable and
/// a missing Secret keeps them in ContainerCreating, each named in the pool's Ready condition
/// and a Warning Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_stores_render_on_the_executors_and_missing_references_are_named() {
    let Some(setup) = Setup::new("e2e-session-store", privileged()).await else {
        return;
    };
    let operator = setup.operator("op-a");
    let mut pvc = pool_spec(1);
    pvc["sessions"] = json!({"maxPerPod": 8, "pauseAfterIdle": "2m",
        "store": {"pvc": {"claimName": "sessions"}, "ttl": "24h"}});
    setup.create_pool("pvc", pvc).await;
    let mut s3 = pool_spec(1);
    s3["sessions"] = json!({"maxPerPod": 8, "store": {
        "s3": {"bucket": "agents", "endpoint": "http://s3.storage:8333", "credentialsSecret": "s3-creds"},
        "encryptionKeySecret": {"name": "store-key", "key": "key"}}});
    setup.create_pool("s3", s3).await;

    let pod = pod_spec_of(&setup, "pvc").await;
    let args = pod["containers"][0]["args"].clone();
    let args: Vec<&str> = args
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for flag in [
        "--session-pause-after-idle-ms=120000",
        "--session-store-dir=/var/lib/sandpool-session-store",
        "--session-store-ttl-secs=86400",
        "--drain-timeout-ms=45480",
    ] {
        assert!(args.contains(&flag), "{flag} not in {args:?}");
    }
    assert_eq!(pod["terminationGracePeriodSeconds"], 56);
    let volumes = pod["volumes"].as_array().expect("volumes").clone();
    assert!(
        volumes.contains(&json!({"name": "session-store", "persistentVolumeClaim": {"claimName": "sessions"}})),
        "{volumes:?}"
    );

    let pod = pod_spec_of(&setup, "s3").await;
    let args = pod["containers"][0]["args"].clone();
    let args: Vec<&str> = args
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for flag in [
        "--session-store-s3-bucket=agents",
        "--session-store-s3-endpoint=http://s3.storage:8333",
        "--session-store-s3-credentials-dir=/etc/sandpool/session-store-s3",
        "--session-store-key-file=/etc/sandpool/session-store-key/key",
    ] {
        assert!(args.contains(&flag), "{flag} not in {args:?}");
    }
    let mounts = pod["containers"][0]["volumeMounts"].as_array().expect("mounts").clone();
    assert!(
        mounts.contains(
            &json!({"name": "session-store-s3", "mountPath": "/etc/sandpool/session-store-s3", "readOnly": true})
        ),
        "{mounts:?}"
    );

    // No claim "sessions": the scheduler (real) cannot place the PVC pool's pod.
    let pools = setup.api::<SandboxPool>();
    wait_for("the PVC pool to name its missing claim", TIMEOUT, || async {
        pools.get("pvc").await.is_ok_and(|p| {
            condition(&p, "Ready").is_some_and(|c| {
                c.status == "False" && c.reason == "Unschedulable" && c.message.contains("\"sessions\" not found")
            })
        })
    })
    .await;

    // No Secret "s3-creds": kwok runs no kubelet, so the S3 pool's pod is made to look as a
    // real node leaves it (ContainerCreating, and the kubelet's FailedMount Event).
    let pods: Api<Pod> = setup.api();
    let victim = pods
        .list(&ListParams::default().labels("sandpool.dev/pool=s3"))
        .await
        .expect("pods list")
        .items
        .first()
        .expect("a pod")
        .name_any();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let missing = "MountVolume.SetUp failed for volume \"session-store-s3\" : secret \"s3-creds\" not found";
    let event: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": format!("{victim}.mount")},
        "involvedObject": {"kind": "Pod", "name": victim, "namespace": setup.ns.name},
        "reason": "FailedMount", "type": "Warning", "message": missing,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        "source": {"component": "kubelet"},
    }))
    .expect("event");
    setup
        .api::<k8s_openapi::api::core::v1::Event>()
        .create(&PostParams::default(), &event)
        .await
        .expect("Event creates");
    let creating = json!({"status": {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"},
                       {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [{"name": "executor", "image": "ghcr.io/sandpool/executor:0.1.0", "imageID": "",
            "ready": false, "started": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}}]
    }});
    setup.cluster.kubectl(&[
        "patch",
        "pod",
        &victim,
        "-n",
        &setup.ns.name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &creating.to_string(),
    ]);
    wait_for("the S3 pool to name its missing Secret", TIMEOUT, || async {
        pools.get("s3").await.is_ok_and(|p| {
            condition(&p, "Ready").is_some_and(|c| {
                c.status == "False" && c.reason == "FailedMount" && c.message.contains("secret \"s3-creds\" not found")
            })
        })
    })
    .await;
    wait_for_warning(&setup, "s3", "FailedMount", "s3-creds").await;
    drop(operator);
}
