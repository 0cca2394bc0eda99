//! Reconcile tests against kube's mocked API server (tower-test): every request's method,
//! path, field manager and body is checked, and so is the absence of writes.

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::DeploymentStatus;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;

use super::*;
use crate::labels::APPLIED_HASH_ANNOTATION;

const SA: &str = "/api/v1/namespaces/evals/serviceaccounts/python";
const NP: &str = "/apis/networking.k8s.io/v1/namespaces/evals/networkpolicies/python";
const SVC: &str = "/api/v1/namespaces/evals/services/python";
const PDB: &str = "/apis/policy/v1/namespaces/evals/poddisruptionbudgets/python";
const DEPLOY: &str = "/apis/apps/v1/namespaces/evals/deployments/python";
const STATUS: &str = "/apis/sandpool.dev/v1alpha1/namespaces/evals/sandboxpools/python/status";

/// One request the fake API server expects, and its answer.
struct Reply {
    method: Method,
    path: &'static str,
    status: StatusCode,
    /// `None` echoes the request body back (what an apply returns, near enough).
    body: Option<Value>,
}

fn get(path: &'static str, live: Value) -> Reply {
    Reply {
        method: Method::GET,
        path,
        status: StatusCode::OK,
        body: Some(live),
    }
}

fn get_missing(path: &'static str) -> Reply {
    Reply {
        method: Method::GET,
        path,
        status: StatusCode::NOT_FOUND,
        body: Some(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": "not found", "reason": "NotFound", "code": 404}),
        ),
    }
}

fn apply(path: &'static str) -> Reply {
    Reply {
        method: Method::PATCH,
        path,
        status: StatusCode::OK,
        body: None,
    }
}

fn apply_returning(path: &'static str, body: Value) -> Reply {
    Reply {
        method: Method::PATCH,
        path,
        status: StatusCode::OK,
        body: Some(body),
    }
}

/// A request the fake API server saw.
#[derive(Debug)]
struct Seen {
    method: Method,
    path: String,
    query: String,
    content_type: String,
    body: Value,
}

impl Seen {
    /// Asserts this is a forced server-side apply under the operator's field manager.
    fn assert_apply(&self) {
        assert_eq!(self.method, Method::PATCH, "{} must be applied", self.path);
        assert_eq!(self.content_type, "application/apply-patch+yaml", "{}", self.path);
        let params: Vec<&str> = self.query.split('&').filter(|p| !p.is_empty()).collect();
        assert!(
            params.contains(&"fieldManager=sandpool-operator"),
            "{}?{}",
            self.path,
            self.query
        );
        assert!(params.contains(&"force=true"), "{}?{}", self.path, self.query);
    }
}

fn pool(spec: Value, generation: i64) -> SandboxPool {
    serde_json::from_value(json!({
        "apiVersion": "sandpool.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "python", "namespace": "evals", "uid": "u-1", "generation": generation},
        "spec": spec,
    }))
    .expect("test pool deserializes")
}

fn spec() -> Value {
    json!({"replicas": 3, "languages": ["python"], "limits": {"wallTime": "10s"}})
}

/// What the operator would apply for `pool`, as the JSON it sends.
fn desired(pool: &SandboxPool) -> Children {
    let resolved = resolve::resolve(pool, &PoolDefaults::default(), "evals").expect("test pool is valid");
    build::children(&resolved)
}

fn stamped<K: Resource + Serialize>(mut object: K) -> Value {
    apply::stamp(&mut object).expect("stamps");
    serde_json::to_value(object).expect("serializes")
}

/// Adds what the API server adds: identity, versions and defaulted fields.
fn as_live(mut object: Value) -> Value {
    object["metadata"]["uid"] = json!("child-uid");
    object["metadata"]["resourceVersion"] = json!("42");
    object["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    object["metadata"]["managedFields"] = json!([{"manager": "sandpool-operator", "operation": "Apply"}]);
    if object["kind"] == "Deployment" {
        object["metadata"]["generation"] = json!(1);
        let pod = &mut object["spec"]["template"]["spec"];
        pod["restartPolicy"] = json!("Always");
        pod["dnsPolicy"] = json!("ClusterFirst");
        pod["schedulerName"] = json!("default-scheduler");
        pod["containers"][0]["terminationMessagePath"] = json!("/dev/termination-log");
        pod["containers"][0]["readinessProbe"]["timeoutSeconds"] = json!(1);
        pod["containers"][0]["readinessProbe"]["successThreshold"] = json!(1);
        pod["volumes"][0]["emptyDir"] = json!({});
        object["spec"]["revisionHistoryLimit"] = json!(10);
        object["spec"]["progressDeadlineSeconds"] = json!(600);
    }
    if object["kind"] == "Service" {
        object["spec"]["clusterIPs"] = json!(["None"]);
        object["spec"]["sessionAffinity"] = json!("None");
        object["spec"]["type"] = json!("ClusterIP");
    }
    if object["kind"] == "NetworkPolicy" {
        // The API server drops the empty egress list on the way back.
        if let Some(spec) = object["spec"].as_object_mut() {
            spec.remove("egress");
        }
    }
    object
}

fn rolled_out(replicas: i32) -> DeploymentStatus {
    DeploymentStatus {
        observed_generation: Some(1),
        replicas: Some(replicas),
        updated_replicas: Some(replicas),
        available_replicas: Some(replicas),
        ready_replicas: Some(replicas),
        ..Default::default()
    }
}

/// The five live children of `pool` (the budget is `null` when disabled), with the
/// Deployment fully rolled out.
fn live_children(pool: &SandboxPool, replicas: i32) -> [Value; 5] {
    let c = desired(pool);
    let pdb = c.disruption_budget.map(|pdb| as_live(stamped(pdb))).unwrap_or_default();
    let mut deployment = as_live(stamped(c.deployment));
    deployment["status"] = serde_json::to_value(rolled_out(replicas)).expect("serializes");
    [
        as_live(stamped(c.service_account)),
        as_live(stamped(c.network_policy)),
        as_live(stamped(c.service)),
        pdb,
        deployment,
    ]
}

/// What an apply returns: the object itself, or for a status apply the whole pool.
fn echo(path: &str, body: &Value) -> Value {
    if path.ends_with("/status") {
        json!({"apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
               "metadata": {"name": "python", "namespace": "evals", "uid": "u-1"},
               "spec": {}, "status": body["status"]})
    } else {
        body.clone()
    }
}

/// Runs one reconcile against a fake API server that expects exactly `replies`, in order.
async fn run(pool: SandboxPool, replies: Vec<Reply>) -> (Result<Action, Error>, Vec<Seen>, Arc<Context>) {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let ctx = Arc::new(Context::new(
        Client::new(service, "default"),
        PoolDefaults::default(),
        Metrics::default(),
    ));
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        for reply in replies {
            let Some((request, respond)) = handle.next_request().await else {
                panic!("reconcile stopped before {} {}", reply.method, reply.path);
            };
            let method = request.method().clone();
            let path = request.uri().path().to_owned();
            let query = request.uri().query().unwrap_or_default().to_owned();
            let content_type = request
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let bytes = request.into_body().collect_bytes().await.expect("request body");
            let body: Value = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("request body is JSON")
            };
            assert_eq!(
                (&method, path.as_str()),
                (&reply.method, reply.path),
                "request #{}",
                seen.len() + 1
            );
            let answer = reply.body.unwrap_or_else(|| echo(reply.path, &body));
            respond.send_response(
                Response::builder()
                    .status(reply.status)
                    .body(Body::from(serde_json::to_vec(&answer).expect("answer serializes")))
                    .expect("response builds"),
            );
            seen.push(Seen {
                method,
                path,
                query,
                content_type,
                body,
            });
        }
        // Any request after the expected ones finds the server gone and fails the reconcile.
        drop(handle);
        seen
    });
    let result = reconcile(Arc::new(pool), ctx.clone()).await;
    let seen = match server.await {
        Ok(seen) => seen,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    (result, seen, ctx)
}

fn writes(ctx: &Context) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    ctx.metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("metrics encode");
    text.lines()
        .filter(|l| {
            l.starts_with("sandpool_operator_child_writes_total{")
                || l.starts_with("sandpool_operator_status_writes_total ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn condition(status: &Value, type_: &str) -> (String, String, String) {
    let c = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"));
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    (s("status"), s("reason"), s("message"))
}

/// The status a reconcile of `pool` over `live_children` reports, with a fixed clock.
fn settled_status(pool: &SandboxPool, replicas: i32) -> SandboxPoolStatus {
    let resolved = resolve::resolve(pool, &PoolDefaults::default(), "evals").expect("valid");
    let deployment: Deployment = serde_json::from_value(live_children(pool, replicas)[4].clone()).expect("deployment");
    let now = Time("2026-01-01T00:00:00Z".parse().expect("timestamp"));
    status::from_deployment(pool, &resolved, &deployment, "cluster.local", &now)
}

#[tokio::test]
async fn create_applies_every_child_in_order_then_status() {
    let pool = pool(spec(), 1);
    let want = desired(&pool);
    let (result, seen, ctx) = run(
        pool,
        vec![
            get_missing(SA),
            apply(SA),
            get_missing(NP),
            apply(NP),
            get_missing(SVC),
            apply(SVC),
            get_missing(PDB),
            apply(PDB),
            get_missing(DEPLOY),
            apply(DEPLOY),
            apply(STATUS),
        ],
    )
    .await;
    assert_eq!(result.expect("reconcile succeeds"), Action::requeue(RESYNC));

    let pdb = want.disruption_budget.clone().expect("budget");
    let expected_bodies = [
        stamped(want.service_account),
        stamped(want.network_policy),
        stamped(want.service),
        stamped(pdb),
        stamped(want.deployment),
    ];
    for (seen, expected) in seen.iter().skip(1).step_by(2).zip(&expected_bodies) {
        seen.assert_apply();
        assert_eq!(&seen.body, expected, "{}", seen.path);
        assert_eq!(seen.body["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert!(seen.body["metadata"]["annotations"][APPLIED_HASH_ANNOTATION].is_string());
    }
    let status_write = &seen[10];
    status_write.assert_apply();
    assert_eq!(status_write.body["apiVersion"], "sandpool.dev/v1alpha1");
    assert_eq!(status_write.body["kind"], "SandboxPool");
    let status = &status_write.body["status"];
    assert_eq!(status["endpoint"], "dns:///python.evals.svc.cluster.local:50051");
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["replicas"], 0);
    assert_eq!(condition(status, "Ready").0, "False");
    assert_eq!(condition(status, "Progressing").1, "RollingOut");
    assert_eq!(condition(status, "Degraded").0, "False");
    assert!(status.get("spec").is_none() && status_write.body.get("spec").is_none());
    assert!(
        writes(&ctx).contains("kind=\"Deployment\",outcome=\"created\"} 1"),
        "{}",
        writes(&ctx)
    );
}

#[tokio::test]
async fn nothing_to_change_means_no_writes() {
    let mut pool = pool(spec(), 1);
    pool.status = Some(settled_status(&pool, 3));
    let [sa, np, svc, pdb, deploy] = live_children(&pool, 3);
    let (result, seen, ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy),
        ],
    )
    .await;
    assert_eq!(result.expect("reconcile succeeds"), Action::requeue(RESYNC));
    assert!(seen.iter().all(|s| s.method == Method::GET), "{seen:?}");
    assert_eq!(seen.len(), 5);
    assert_eq!(writes(&ctx), "sandpool_operator_status_writes_total 0");
}

#[tokio::test]
async fn spec_change_updates_only_what_changed() {
    let old = pool(spec(), 1);
    let [sa, np, svc, pdb, deploy] = live_children(&old, 3);
    let mut new_spec = spec();
    new_spec["replicas"] = json!(5);
    let mut pool = pool(new_spec, 2);
    pool.status = Some(settled_status(&old, 3));
    let mut rolled = deploy.clone();
    rolled["spec"]["replicas"] = json!(5);
    let (result, seen, _ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy),
            apply_returning(DEPLOY, rolled),
            apply(STATUS),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    let patches: Vec<&Seen> = seen.iter().filter(|s| s.method == Method::PATCH).collect();
    assert_eq!(
        patches.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
        [DEPLOY, STATUS]
    );
    patches[0].assert_apply();
    assert_eq!(patches[0].body["spec"]["replicas"], 5);
    let status = &patches[1].body["status"];
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(
        condition(status, "Ready"),
        (
            "False".to_owned(),
            "ReplicasNotReady".to_owned(),
            "3/5 executors ready".to_owned()
        )
    );
    assert_eq!(condition(status, "Progressing").1, "RollingOut");
}

#[tokio::test]
async fn invalid_spec_only_reports_it() {
    let mut bad = spec();
    bad["limits"]["wallTime"] = json!("soon");
    let (result, seen, _ctx) = run(pool(bad, 3), vec![apply(STATUS)]).await;
    assert_eq!(
        result.expect("an invalid spec is not a retryable error"),
        Action::await_change()
    );
    assert_eq!(seen.len(), 1, "no child object may be touched");
    seen[0].assert_apply();
    let status = &seen[0].body["status"];
    let (ready, reason, message) = condition(status, "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(message.starts_with("spec.limits.wallTime: "), "{message}");
    assert_eq!(condition(status, "Degraded").0, "True");
    assert_eq!(status["observedGeneration"], 3);
}

#[tokio::test]
async fn a_deleted_child_is_recreated() {
    let mut pool = pool(spec(), 1);
    pool.status = Some(settled_status(&pool, 3));
    let want = desired(&pool);
    let [sa, np, _svc, pdb, deploy] = live_children(&pool, 3);
    let (result, seen, ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get_missing(SVC),
            apply(SVC),
            get(PDB, pdb),
            get(DEPLOY, deploy),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    seen[3].assert_apply();
    assert_eq!(seen[3].body, stamped(want.service));
    assert_eq!(
        writes(&ctx),
        "sandpool_operator_child_writes_total{kind=\"Service\",outcome=\"created\"} 1\nsandpool_operator_status_writes_total 0"
    );
}

#[tokio::test]
async fn an_edited_child_is_put_back() {
    let mut pool = pool(spec(), 1);
    pool.status = Some(settled_status(&pool, 3));
    let [sa, mut np, svc, pdb, deploy] = live_children(&pool, 3);
    // Someone opened egress by hand; the hash still matches, the fields do not.
    np["spec"]["egress"] = json!([{}]);
    let (result, seen, _ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            apply(NP),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    seen[2].assert_apply();
    assert_eq!(seen[2].body["spec"]["egress"], json!([]));
}

#[tokio::test]
async fn a_disabled_budget_is_deleted_only_if_ours() {
    let mut spec = spec();
    spec["disruptionBudget"] = json!({"enabled": false});
    let mut pool = pool(spec, 1);
    pool.status = Some(settled_status(&pool, 3));
    let with_budget = self::pool(self::spec(), 1);
    let [sa, np, svc, pdb, _] = live_children(&with_budget, 3);
    let deploy = live_children(&pool, 3)[4].clone();
    let (result, seen, ctx) = run(
        pool.clone(),
        vec![
            get(SA, sa.clone()),
            get(NP, np.clone()),
            get(SVC, svc.clone()),
            get(PDB, pdb.clone()),
            Reply {
                method: Method::DELETE,
                path: PDB,
                status: StatusCode::OK,
                body: Some(pdb.clone()),
            },
            get(DEPLOY, deploy.clone()),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    assert_eq!(seen[4].method, Method::DELETE);
    assert!(writes(&ctx).contains("kind=\"PodDisruptionBudget\",outcome=\"deleted\"} 1"));

    let mut foreign = pdb;
    foreign["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
    let (result, seen, _ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, foreign),
            get(DEPLOY, deploy),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    assert!(
        seen.iter().all(|s| s.method == Method::GET),
        "a PDB we do not own is left alone"
    );
}

#[tokio::test]
async fn a_name_taken_by_someone_else_is_reported_not_taken_over() {
    let pool = pool(spec(), 1);
    let [sa, np, mut svc, _, _] = live_children(&pool, 3);
    svc["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("ownerReferences");
    let (result, seen, _ctx) = run(pool, vec![get(SA, sa), get(NP, np), get(SVC, svc), apply(STATUS)]).await;
    let err = result.expect_err("must not take over the Service");
    assert_eq!(err.class(), "conflict");
    let status = &seen[3].body["status"];
    let (ready, reason, message) = condition(status, "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "ObjectConflict"));
    assert!(message.contains("Service python"), "{message}");
}

#[tokio::test]
async fn api_errors_back_off_exponentially() {
    let pool = pool(spec(), 1);
    let (result, _seen, ctx) = run(
        pool.clone(),
        vec![Reply {
            method: Method::GET,
            path: SA,
            status: StatusCode::INTERNAL_SERVER_ERROR,
            body: Some(json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "message": "etcd unavailable", "reason": "InternalError", "code": 500})),
        }],
    )
    .await;
    let err = result.expect_err("a 500 fails the reconcile");
    assert_eq!(err.class(), "api");
    let pool = Arc::new(pool);
    let delays: Vec<Action> = (0..3).map(|_| error_policy(pool.clone(), &err, ctx.clone())).collect();
    assert_eq!(
        delays,
        [
            Action::requeue(Duration::from_secs(5)),
            Action::requeue(Duration::from_secs(10)),
            Action::requeue(Duration::from_secs(20)),
        ]
    );
    assert_eq!(backoff(30), MAX_BACKOFF);
}
