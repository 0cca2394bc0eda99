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
/// The tenants ConfigMap: a pool without tenants checks that none is left.
const CM: &str = "/api/v1/namespaces/evals/configmaps/python-tenants";
/// The gateway's NetworkPolicy: a pool without a gateway checks that none is left.
const GW_NP: &str = "/apis/networking.k8s.io/v1/namespaces/evals/networkpolicies/python-gateway";
const STATUS: &str = "/apis/sandpool.dev/v1alpha1/namespaces/evals/sandboxpools/python/status";
const PODS: &str = "/api/v1/namespaces/evals/pods";
const CORE_EVENTS: &str = "/api/v1/namespaces/evals/events";

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

/// The pool's pods, as a list answers.
fn list_pods(items: Vec<Value>) -> Reply {
    get(
        PODS,
        json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": items}),
    )
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
    plan::plan(pool, &OperatorConfig::default(), "evals")
        .expect("test pool is valid")
        .children
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

const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/evals/events";

/// Runs one reconcile against a fake API server that expects exactly `replies`, in order.
async fn run(pool: SandboxPool, replies: Vec<Reply>) -> (Result<Action, Error>, Vec<Seen>, Arc<Context>) {
    let (result, seen, _events, ctx) = run_with_events(pool, replies, OperatorConfig::default()).await;
    (result, seen, ctx)
}

/// [`run`], also returning the Events published (answered whenever they come, outside the
/// expected order), with the given operator defaults and policy.
async fn run_with_events(
    pool: SandboxPool,
    replies: Vec<Reply>,
    config: OperatorConfig,
) -> (Result<Action, Error>, Vec<Seen>, Vec<Value>, Arc<Context>) {
    run_remembering(pool, replies, config, &[]).await
}

/// [`run_with_events`] by an operator that already remembers creating these auth Secrets.
async fn run_remembering(
    pool: SandboxPool,
    replies: Vec<Reply>,
    config: OperatorConfig,
    secrets: &[&str],
) -> (Result<Action, Error>, Vec<Seen>, Vec<Value>, Arc<Context>) {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let ctx = Arc::new(Context::new(
        Client::new(service, "default"),
        config,
        Metrics::default(),
    ));
    ctx.secrets
        .lock()
        .expect("lock")
        .extend(secrets.iter().map(|s| s.to_string()));
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut events = Vec::new();
        let mut replies = replies.into_iter();
        // Paths whose GET found nothing: an apply there creates, which needs `create`.
        let mut missing = std::collections::HashSet::new();
        loop {
            let next = tokio::select! {
                next = handle.next_request() => next,
                _ = &mut stop_rx => break,
            };
            let Some((request, respond)) = next else { break };
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
            let answer = |status: StatusCode, answer: &Value| {
                Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(answer).expect("answer serializes")))
                    .expect("response builds")
            };
            assert_granted(&method, &path, &mut missing);
            if path.starts_with(EVENTS) {
                respond.send_response(answer(StatusCode::CREATED, &body));
                events.push(body);
                continue;
            }
            let Some(reply) = replies.next() else {
                panic!("unexpected request #{}: {method} {path}", seen.len() + 1);
            };
            assert_eq!(
                (&method, path.as_str()),
                (&reply.method, reply.path),
                "request #{}",
                seen.len() + 1
            );
            if method == Method::GET && reply.status == StatusCode::NOT_FOUND {
                missing.insert(path.clone());
            }
            let body_back = reply.body.unwrap_or_else(|| echo(reply.path, &body));
            respond.send_response(answer(reply.status, &body_back));
            seen.push(Seen {
                method,
                path,
                query,
                content_type,
                body,
            });
        }
        let left: Vec<String> = replies.map(|r| format!("{} {}", r.method, r.path)).collect();
        assert!(left.is_empty(), "reconcile stopped before {left:?}");
        (seen, events)
    });
    let result = reconcile(Arc::new(pool), ctx.clone()).await;
    let _ = stop_tx.send(());
    let (seen, events) = match server.await {
        Ok(out) => out,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    (result, seen, events, ctx)
}

/// Asserts that `crate::rbac::RULES` grants the call, so the chart (which check-manifests
/// compares with those rules) grants every call the code paths under test make.
fn assert_granted(method: &Method, path: &str, missing: &mut std::collections::HashSet<String>) {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // /api/v1/namespaces/NS/RES[/NAME[/SUB]] or /apis/GROUP/VERSION/namespaces/NS/RES[/NAME[/SUB]]
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => panic!("unexpected path {path}"),
    };
    let (resource, named) = match rest {
        ["namespaces", _ns, resource] => ((*resource).to_owned(), false),
        ["namespaces", _ns, resource, _name] => ((*resource).to_owned(), true),
        ["namespaces", _ns, resource, _name, sub] => (format!("{resource}/{sub}"), true),
        [resource, _name] => ((*resource).to_owned(), true),
        _ => panic!("unexpected path {path}"),
    };
    let mut verbs = vec![match (method.as_str(), named) {
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", _) => "delete",
        (other, _) => panic!("unexpected method {other}"),
    }];
    if method == Method::PATCH && missing.remove(path) {
        verbs.push("create");
    }
    for verb in verbs {
        assert!(
            crate::rbac::granted(group, &resource, verb),
            "{method} {path} needs {verb} on {group}/{resource}, which crate::rbac::RULES does not grant"
        );
    }
}

/// (type, reason, note) of each Event.
fn event_summary(events: &[Value]) -> Vec<(String, String, String)> {
    events
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (s("type"), s("reason"), s("note"))
        })
        .collect()
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
    let resolved = plan::plan(pool, &OperatorConfig::default(), "evals")
        .expect("valid")
        .pool;
    let deployment: Deployment = serde_json::from_value(live_children(pool, replicas)[4].clone()).expect("deployment");
    let now = Time("2026-01-01T00:00:00Z".parse().expect("timestamp"));
    status::from_deployment(pool, &resolved, &deployment, &Default::default(), "cluster.local", &now)
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
            get_missing(CM),
            get_missing(GW_NP),
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
    let status_write = &seen[12];
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
            get_missing(CM),
            get_missing(GW_NP),
        ],
    )
    .await;
    assert_eq!(result.expect("reconcile succeeds"), Action::requeue(RESYNC));
    assert!(seen.iter().all(|s| s.method == Method::GET), "{seen:?}");
    assert_eq!(seen.len(), 7);
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
            get_missing(CM),
            get_missing(GW_NP),
            list_pods(vec![]),
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
            get_missing(CM),
            get_missing(GW_NP),
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
            get_missing(CM),
            get_missing(GW_NP),
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
            get_missing(CM),
            get_missing(GW_NP),
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
            get_missing(CM),
            get_missing(GW_NP),
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

const SECRETS: &str = "/api/v1/namespaces/evals/secrets";

fn api_error(method: Method, path: &'static str, code: u16, reason: &str, message: &str) -> Reply {
    Reply {
        method,
        path,
        status: StatusCode::from_u16(code).expect("status code"),
        body: Some(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": message, "reason": reason, "code": code}),
        ),
    }
}

#[tokio::test]
async fn creating_a_pool_tells_kubectl_describe() {
    let pool = pool(spec(), 1);
    let (result, _seen, events, _ctx) = run_with_events(
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
            get_missing(CM),
            get_missing(GW_NP),
            apply(STATUS),
        ],
        OperatorConfig::default(),
    )
    .await;
    result.expect("reconcile succeeds");
    assert_eq!(
        event_summary(&events),
        [(
            "Normal".to_owned(),
            "Created".to_owned(),
            "created 3 executors".to_owned()
        )]
    );
    assert_eq!(events[0]["regarding"]["kind"], "SandboxPool");
    assert_eq!(events[0]["regarding"]["name"], "python");
    assert_eq!(events[0]["reportingController"], "sandpool-operator");
}

#[tokio::test]
async fn scaling_and_rollouts_are_events() {
    let old = pool(spec(), 1);
    let [sa, np, svc, pdb, deploy] = live_children(&old, 3);
    let mut new_spec = spec();
    new_spec["replicas"] = json!(5);
    new_spec["limits"]["wallTime"] = json!("20s");
    let mut pool = pool(new_spec, 2);
    pool.status = Some(settled_status(&old, 3));
    let (result, _seen, events, _ctx) = run_with_events(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy.clone()),
            apply_returning(DEPLOY, deploy),
            get_missing(CM),
            get_missing(GW_NP),
            list_pods(vec![]),
            apply(STATUS),
        ],
        OperatorConfig::default(),
    )
    .await;
    result.expect("reconcile succeeds");
    let reasons: Vec<String> = event_summary(&events).into_iter().map(|e| e.1).collect();
    assert_eq!(reasons, ["Scaled", "RolloutStarted"]);
    assert_eq!(event_summary(&events)[0].2, "scaled from 3 to 5 executors");
}

#[tokio::test]
async fn a_finished_rollout_is_an_event() {
    let mut pool = pool(spec(), 1);
    let mut rolling = settled_status(&pool, 3);
    let progressing = rolling
        .conditions
        .iter_mut()
        .find(|c| c.type_ == "Progressing")
        .expect("condition");
    progressing.reason = "RollingOut".to_owned();
    progressing.status = "True".to_owned();
    pool.status = Some(rolling);
    let [sa, np, svc, pdb, deploy] = live_children(&pool, 3);
    let (result, _seen, events, _ctx) = run_with_events(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy),
            get_missing(CM),
            get_missing(GW_NP),
            apply(STATUS),
        ],
        OperatorConfig::default(),
    )
    .await;
    result.expect("reconcile succeeds");
    assert_eq!(
        event_summary(&events),
        [(
            "Normal".to_owned(),
            "RolloutComplete".to_owned(),
            "3 executors run the current spec".to_owned()
        )]
    );
}

#[tokio::test]
async fn an_invalid_spec_is_a_warning_event() {
    let mut bad = spec();
    bad["limits"]["cpuTime"] = json!("2m");
    let (result, _seen, events, _ctx) =
        run_with_events(pool(bad, 3), vec![apply(STATUS)], OperatorConfig::default()).await;
    result.expect("not retried");
    let (type_, reason, note) = event_summary(&events).pop().expect("one event");
    assert_eq!((type_.as_str(), reason.as_str()), ("Warning", "InvalidSpec"));
    assert!(note.starts_with("spec.limits.cpuTime: "), "{note}");
}

#[tokio::test]
async fn a_restricted_pool_asking_for_what_restricted_cannot_give_is_refused_with_the_field() {
    let cases = [
        (json!({"gpu": {"count": 1}}), "spec.gpu: "),
        (
            json!({"podTemplate": {"annotations": {"container.apparmor.security.beta.kubernetes.io/executor": "unconfined"}}}),
            "spec.podTemplate.annotations[\"container.apparmor.security.beta.kubernetes.io/executor\"]: ",
        ),
    ];
    for (extra, field) in cases {
        let mut spec = spec();
        spec["isolation"] = json!({"mode": "restricted"});
        for (k, v) in extra.as_object().expect("object") {
            spec[k] = v.clone();
        }
        let (result, seen, events, _ctx) =
            run_with_events(pool(spec, 2), vec![apply(STATUS)], OperatorConfig::default()).await;
        assert_eq!(result.expect("not retried"), Action::await_change());
        assert_eq!(seen.len(), 1, "no child may be touched: {seen:?}");
        let status = &seen[0].body["status"];
        for type_ in ["Ready", "Degraded"] {
            let (_, reason, message) = condition(status, type_);
            assert_eq!(reason, "InvalidSpec", "{type_}");
            assert!(message.starts_with(field), "{type_}: {message}");
        }
        let (type_, reason, note) = event_summary(&events).pop().expect("one event");
        assert_eq!((type_.as_str(), reason.as_str()), ("Warning", "InvalidSpec"));
        assert!(note.starts_with(field), "{note}");
    }
}

#[tokio::test]
async fn a_pool_the_policy_refuses_gets_nothing_but_a_condition_and_an_event() {
    let mut spec = spec();
    spec["image"] = json!("docker.io/attacker/root-shell:latest");
    let (result, seen, events, _ctx) =
        run_with_events(pool(spec, 2), vec![apply(STATUS)], OperatorConfig::default()).await;
    assert_eq!(result.expect("not retried"), Action::await_change());
    assert_eq!(seen.len(), 1, "no child may be touched: {seen:?}");
    let status = &seen[0].body["status"];
    let (ready, reason, message) = condition(status, "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "PolicyRefused"));
    assert!(message.starts_with("spec.image: "), "{message}");
    let (type_, reason, _) = event_summary(&events).pop().expect("one event");
    assert_eq!((type_.as_str(), reason.as_str()), ("Warning", "PolicyRefused"));

    let mut spec = self::spec();
    spec["tolerations"] = json!([{"operator": "Exists"}]);
    let (_, seen, _, _) = run_with_events(pool(spec, 2), vec![apply(STATUS)], OperatorConfig::default()).await;
    let (_, reason, message) = condition(&seen[0].body["status"], "Ready");
    assert_eq!(reason, "PolicyRefused");
    assert!(message.starts_with("spec.tolerations[0]: "), "{message}");
}

#[tokio::test]
async fn a_namespace_outside_the_policy_is_refused() {
    let config = OperatorConfig {
        policy: crate::policy::Policy {
            namespaces: vec!["other".to_owned()],
            ..Default::default()
        },
        ..OperatorConfig::default()
    };
    let (result, seen, events, _ctx) = run_with_events(pool(spec(), 1), vec![apply(STATUS)], config).await;
    // Not retried as an error, but looked at again: the pool's spec is fine, and what the
    // policy asks of its namespace (a label) can change without the pool changing.
    assert_eq!(result.expect("not an error"), Action::requeue(RESYNC));
    let (_, reason, message) = condition(&seen[0].body["status"], "Ready");
    assert_eq!(reason, "PolicyRefused");
    assert!(message.starts_with("metadata.namespace: "), "{message}");
    assert_eq!(event_summary(&events).len(), 1);
}

#[tokio::test]
async fn an_apply_the_api_server_rejects_is_a_condition_and_an_event() {
    let pool = pool(spec(), 1);
    let [sa, np, svc, pdb, _] = live_children(&pool, 3);
    let (result, seen, events, _ctx) = run_with_events(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get_missing(DEPLOY),
            api_error(
                Method::PATCH,
                DEPLOY,
                422,
                "Invalid",
                "Deployment.apps \"python\" is invalid: spec.template.spec.containers[0].resources.requests: Invalid value: \"2\": must be equal to example.com/fpga limit of 1",
            ),
            apply(STATUS),
        ],
        OperatorConfig::default(),
    )
    .await;
    let err = result.expect_err("retried with backoff");
    assert_eq!(err.class(), "api");
    let (ready, reason, message) = condition(&seen[6].body["status"], "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "ApplyRejected"));
    assert!(message.contains("must be equal to example.com/fpga limit"), "{message}");
    let (type_, reason, _) = event_summary(&events).pop().expect("one event");
    assert_eq!((type_.as_str(), reason.as_str()), ("Warning", "ApplyRejected"));
}

#[tokio::test]
async fn a_conflict_is_a_warning_event_too() {
    let pool = pool(spec(), 1);
    let [sa, np, mut svc, _, _] = live_children(&pool, 3);
    svc["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("ownerReferences");
    let (_result, _seen, events, _ctx) = run_with_events(
        pool,
        vec![get(SA, sa), get(NP, np), get(SVC, svc), apply(STATUS)],
        OperatorConfig::default(),
    )
    .await;
    let (type_, reason, note) = event_summary(&events).pop().expect("one event");
    assert_eq!((type_.as_str(), reason.as_str()), ("Warning", "ObjectConflict"));
    assert!(note.contains("Service python"), "{note}");
}

#[tokio::test]
async fn auth_creates_a_token_secret_once_and_never_overwrites_it() {
    let mut spec = spec();
    spec["auth"] = json!({"enabled": true});
    let mut pool = pool(spec, 1);
    pool.status = Some(settled_status(&pool, 3));
    let [sa, np, svc, pdb, deploy] = live_children(&pool, 3);
    let post = |status: StatusCode| Reply {
        method: Method::POST,
        path: SECRETS,
        status,
        body: Some(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": "secrets \"python-auth\" already exists", "reason": "AlreadyExists",
                          "code": status.as_u16()}),
        ),
    };
    let expect = |secret: Option<Reply>| {
        let mut replies = vec![
            get(SA, sa.clone()),
            get(NP, np.clone()),
            get(SVC, svc.clone()),
            get(PDB, pdb.clone()),
        ];
        replies.extend(secret);
        replies.push(get(DEPLOY, deploy.clone()));
        replies.push(get_missing(CM));
        replies.push(get_missing(GW_NP));
        replies
    };
    // The Secret exists already (a user rotated it): the create is refused and nothing else
    // is tried, so it cannot be overwritten (the operator has no update or patch on Secrets).
    let (result, seen, _, ctx) = run_with_events(
        pool.clone(),
        expect(Some(post(StatusCode::CONFLICT))),
        OperatorConfig::default(),
    )
    .await;
    result.expect("an existing Secret is fine");
    let created = &seen[4].body;
    assert_eq!(created["metadata"]["name"], "python-auth");
    assert_eq!(created["metadata"]["ownerReferences"][0]["uid"], "u-1");
    let token = created["stringData"]["token"].as_str().expect("token");
    assert_eq!(token.len(), 64);
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(
        seen[4].query.contains("fieldManager=sandpool-operator"),
        "{}",
        seen[4].query
    );

    // The operator remembers the Secret exists, so a steady pool makes no create calls.
    assert!(ctx.secrets.lock().expect("lock").contains("evals/python-auth/u-1"));

    // A fresh pool gets a Secret of its own.
    let mut first = expect(Some(post(StatusCode::CREATED)));
    first[4].body = None;
    let (result, seen, _, ctx) = run_with_events(pool.clone(), first, OperatorConfig::default()).await;
    result.expect("created");
    let other_token = seen[4].body["stringData"]["token"].as_str().expect("token").to_owned();
    assert_ne!(other_token, token, "every Secret gets its own random token");
    assert!(ctx.secrets.lock().expect("lock").contains("evals/python-auth/u-1"));

    // The pool deleted (its Secret garbage-collected with it) and created again under the
    // same name: the new instance gets a Secret, although the old one was remembered.
    let mut again = pool.clone();
    again.metadata.uid = Some("u-2".to_owned());
    let [sa, np, svc, pdb, deploy] = live_children(&again, 3);
    let mut created = post(StatusCode::CREATED);
    created.body = None;
    let replies = vec![
        get(SA, sa),
        get(NP, np),
        get(SVC, svc),
        get(PDB, pdb),
        created,
        get(DEPLOY, deploy),
        get_missing(CM),
        get_missing(GW_NP),
    ];
    let (result, seen, _, ctx) =
        run_remembering(again, replies, OperatorConfig::default(), &["evals/python-auth/u-1"]).await;
    result.expect("created");
    assert_eq!(seen[4].method, Method::POST, "the recreated pool's Secret is created");
    assert!(ctx.secrets.lock().expect("lock").contains("evals/python-auth/u-2"));
}

#[test]
fn children_are_watched_by_owner_not_by_label() {
    let config = crate::controller::child_watch_config();
    assert_eq!(config.label_selector, None, "a removed label must not hide a child");
}

/// An executor pod of the pool that crash-loops with the executor's fatal error.
fn crash_looping_pod(restarts: i32) -> Value {
    json!({
        "metadata": {"name": "python-7d9-abc", "namespace": "evals",
                     "labels": {"sandpool.dev/pool": "python"}},
        "spec": {"containers": [{"name": "executor"}]},
        "status": {"phase": "Running", "containerStatuses": [{
            "name": "executor", "image": "ghcr.io/sandpool/executor:0.1.0", "imageID": "",
            "ready": false, "restartCount": restarts,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                "message": "cannot set up the sandbox root under /var/lib/sandpool/mnt: Operation not permitted (os error 1)"}}
        }]}
    })
}

/// A pool whose Deployment has `ready` of 3 executors ready, and that Deployment.
fn pool_with_ready(ready: i32) -> (SandboxPool, [Value; 5]) {
    let mut pool = pool(spec(), 1);
    pool.status = Some(settled_status(&pool, 3));
    let mut live = live_children(&pool, 3);
    live[4]["status"]["readyReplicas"] = json!(ready);
    live[4]["status"]["availableReplicas"] = json!(ready);
    (pool, live)
}

#[tokio::test]
async fn a_crash_looping_pod_is_the_pools_reason_and_one_warning_event() {
    let (pool, [sa, np, svc, pdb, deploy]) = pool_with_ready(2);
    let replies = |pods: Vec<Value>| {
        vec![
            get(SA, sa.clone()),
            get(NP, np.clone()),
            get(SVC, svc.clone()),
            get(PDB, pdb.clone()),
            get(DEPLOY, deploy.clone()),
            get_missing(CM),
            get_missing(GW_NP),
            list_pods(pods),
            apply(STATUS),
        ]
    };
    let (result, seen, events, _ctx) = run_with_events(
        pool.clone(),
        replies(vec![crash_looping_pod(3)]),
        OperatorConfig::default(),
    )
    .await;
    result.expect("reconcile succeeds");
    let list = &seen[7];
    assert_eq!(list.method, Method::GET);
    assert!(
        list.query
            .contains("labelSelector=app.kubernetes.io%2Finstance%3Dpython%2Capp.kubernetes.io%2Fname%3Dsandpool-executor%2Csandpool.dev%2Fpool%3Dpython"),
        "only the pool's own pods are listed: {}",
        list.query
    );
    let status = &seen[8].body["status"];
    let (ready, reason, message) = condition(status, "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "CrashLoopBackOff"));
    assert!(
        message.starts_with("2/3 executors ready: pod python-7d9-abc: "),
        "{message}"
    );
    assert!(message.contains("restarted 3 times"), "{message}");
    assert!(
        message.ends_with(
            ": cannot set up the sandbox root under /var/lib/sandpool/mnt: Operation not permitted (os error 1)"
        ),
        "{message}"
    );
    assert_eq!(condition(status, "Degraded").1, "CrashLoopBackOff");
    let warnings: Vec<_> = event_summary(&events)
        .into_iter()
        .filter(|e| e.0 == "Warning")
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].1, "CrashLoopBackOff");
    assert!(warnings[0].2.contains("Operation not permitted"), "{}", warnings[0].2);

    // The next restart: the status follows the count, but no second Event.
    let mut crashing = pool.clone();
    crashing.status = Some(serde_json::from_value(status.clone()).expect("status"));
    let (result, seen, events, _ctx) = run_with_events(
        crashing.clone(),
        replies(vec![crash_looping_pod(4)]),
        OperatorConfig::default(),
    )
    .await;
    result.expect("reconcile succeeds");
    assert!(
        condition(&seen[8].body["status"], "Ready")
            .2
            .contains("restarted 4 times")
    );
    assert!(
        events.is_empty(),
        "one Event per problem, not per reconcile: {events:?}"
    );

    // Fixed: the Deployment settles, the pods are not even listed, the conditions clear,
    // and nothing warns.
    let mut settled = deploy.clone();
    settled["status"] = serde_json::to_value(rolled_out(3)).expect("serializes");
    let (result, seen, events, _ctx) = run_with_events(
        crashing,
        vec![
            get(SA, sa.clone()),
            get(NP, np.clone()),
            get(SVC, svc.clone()),
            get(PDB, pdb.clone()),
            get(DEPLOY, settled),
            get_missing(CM),
            get_missing(GW_NP),
            apply(STATUS),
        ],
        OperatorConfig::default(),
    )
    .await;
    result.expect("reconcile succeeds");
    let status = &seen[7].body["status"];
    assert_eq!(condition(status, "Ready").1, "AllReplicasReady");
    assert_eq!(
        condition(status, "Degraded"),
        (
            "False".to_owned(),
            "AsExpected".to_owned(),
            "no problems detected".to_owned()
        )
    );
    assert!(event_summary(&events).iter().all(|e| e.0 != "Warning"), "{events:?}");
    // ... and one Normal Event says the problem is over.
    let recovered: Vec<_> = event_summary(&events)
        .into_iter()
        .filter(|e| e.1 == "Recovered")
        .collect();
    assert_eq!(recovered.len(), 1, "{events:?}");
    assert_eq!(recovered[0].0, "Normal");
    assert_eq!(recovered[0].2, "no longer CrashLoopBackOff: 3/3 executors ready");
}

#[tokio::test]
async fn a_failing_readiness_probe_is_quoted_from_the_kubelets_events() {
    let (pool, [sa, np, svc, pdb, deploy]) = pool_with_ready(2);
    let unready = json!({
        "metadata": {"name": "python-7d9-abc", "namespace": "evals"},
        "status": {"phase": "Running", "containerStatuses": [{
            "name": "executor", "image": "e:1", "imageID": "", "ready": false, "started": true,
            "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
    });
    let now = Timestamp::now();
    let ago = |s: i64| {
        now.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(s))
            .expect("time")
            .to_string()
    };
    let unhealthy = json!({
        "metadata": {"name": "python-7d9-abc.1", "namespace": "evals"},
        "involvedObject": {"kind": "Pod", "name": "python-7d9-abc", "namespace": "evals"},
        "reason": "Unhealthy", "type": "Warning",
        "message": "Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")",
        "firstTimestamp": ago(60), "lastTimestamp": ago(2), "count": 12
    });
    let (result, seen, events, _ctx) = run_with_events(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy),
            get_missing(CM),
            get_missing(GW_NP),
            list_pods(vec![unready]),
            get(
                CORE_EVENTS,
                json!({"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": [unhealthy]}),
            ),
            apply(STATUS),
        ],
        OperatorConfig::default(),
    )
    .await;
    result.expect("reconcile succeeds");
    assert!(
        seen[8].query.contains("fieldSelector=reason%3DUnhealthy"),
        "only probe failures are read: {}",
        seen[8].query
    );
    let (_, reason, message) = condition(&seen[9].body["status"], "Ready");
    assert_eq!(reason, "Unhealthy");
    assert!(
        message.ends_with(
            "runs but is not ready: Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")"
        ),
        "{message}"
    );
    assert_eq!(event_summary(&events)[0].1, "Unhealthy");
}

#[tokio::test]
async fn a_passed_progress_deadline_is_a_warning_event_and_the_ready_reason() {
    let (pool, [sa, np, svc, pdb, mut deploy]) = pool_with_ready(0);
    deploy["status"]["conditions"] = json!([{"type": "Progressing", "status": "False",
        "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"python-7d9\" has timed out progressing."}]);
    let (result, seen, events, _ctx) = run_with_events(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy),
            get_missing(CM),
            get_missing(GW_NP),
            list_pods(vec![]),
            apply(STATUS),
        ],
        OperatorConfig::default(),
    )
    .await;
    result.expect("reconcile succeeds");
    let status = &seen[8].body["status"];
    assert_eq!(condition(status, "Ready").1, "ProgressDeadlineExceeded");
    assert_eq!(condition(status, "Degraded").1, "ProgressDeadlineExceeded");
    assert_eq!(
        event_summary(&events),
        [(
            "Warning".to_owned(),
            "ProgressDeadlineExceeded".to_owned(),
            "the rollout made no progress within its deadline: ReplicaSet \"python-7d9\" has timed out progressing."
                .to_owned()
        )]
    );
}

#[tokio::test]
async fn pods_the_operator_may_not_list_leave_the_deployments_word() {
    let (pool, [sa, np, svc, pdb, deploy]) = pool_with_ready(2);
    let (result, seen, _events, _ctx) = run_with_events(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy),
            get_missing(CM),
            get_missing(GW_NP),
            api_error(
                Method::GET,
                PODS,
                403,
                "Forbidden",
                "pods is forbidden: User \"system:serviceaccount:x:y\" cannot list resource \"pods\"",
            ),
            apply(STATUS),
        ],
        OperatorConfig::default(),
    )
    .await;
    result.expect("a pod list is not worth failing the reconcile for");
    let status = &seen[8].body["status"];
    assert_eq!(condition(status, "Ready").1, "ReplicasNotReady");
    assert_eq!(condition(status, "Degraded").1, "ReplicasUnavailable");
}

#[test]
fn executor_pods_are_watched_by_label_and_mapped_to_their_pool() {
    use crate::controller::{pod_watch_config, pod_watch_namespaces, pool_of_pod};
    assert_eq!(
        pod_watch_config().label_selector.as_deref(),
        Some("app.kubernetes.io/managed-by=sandpool-operator,sandpool.dev/pool"),
        "only pods our Deployments made"
    );
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(crash_looping_pod(1)).expect("pod deserializes");
    assert_eq!(
        pool_of_pod(pod.clone()),
        Some(kube::runtime::reflector::ObjectRef::new("python").within("evals"))
    );
    let mut unlabelled = pod;
    unlabelled.metadata.labels = None;
    assert_eq!(pool_of_pod(unlabelled), None);

    let s = |v: &str| Some(v.to_owned());
    assert_eq!(pod_watch_namespaces(Some("evals"), &[]), [s("evals")]);
    assert_eq!(
        pod_watch_namespaces(None, &["a".to_owned(), "b".to_owned()]),
        [s("a"), s("b")],
        "pods are read only where the operator manages pools"
    );
    assert_eq!(pod_watch_namespaces(None, &[]), [None]);
}

mod gateway;
mod sessions;
mod tenants;
