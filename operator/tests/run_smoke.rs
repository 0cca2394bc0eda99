//! Smoke tests of `run` (leader election, watches, reconcile, health and metrics endpoints)
//! against a fake API server on loopback: one pool exists, and a Lease once created.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use sandpool_operator::config::OperatorConfig;
use sandpool_operator::controller::{RunConfig, run_with_client};
use serde_json::{Value, json};

type Log = Arc<Mutex<Vec<(Method, String)>>>;

/// The fake API server's state: requests seen, and the one Lease it can hold.
#[derive(Clone, Default)]
struct Fake {
    log: Log,
    lease: Arc<Mutex<Option<Value>>>,
    /// Answer 403 to every pods request, as a Role without pods would.
    refuse_pods: bool,
}

fn pool() -> Value {
    json!({
        "apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
        "metadata": {"name": "python", "namespace": "evals", "uid": "u-1", "generation": 1,
                     "resourceVersion": "7"},
        "spec": {"replicas": 2}
    })
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, [("content-type", "application/json")], body.to_string()).into_response()
}

/// Answers like an API server that holds one SandboxPool and no other objects.
async fn api(State(fake): State<Fake>, method: Method, uri: Uri, body: Bytes) -> Response {
    let path = uri.path().to_owned();
    let query = uri.query().unwrap_or_default().to_owned();
    if let Ok(mut log) = fake.log.lock() {
        log.push((method.clone(), format!("{path}?{query}")));
    }
    if path.contains("/leases") {
        return lease(&fake, method, &body);
    }
    if fake.refuse_pods && path.ends_with("/pods") {
        return json_response(
            StatusCode::FORBIDDEN,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "pods is forbidden", "reason": "Forbidden", "code": 403}),
        );
    }
    let is_pool_collection = path.ends_with("/sandboxpools");
    let is_collection = is_pool_collection
        || [
            "deployments",
            "services",
            "serviceaccounts",
            "networkpolicies",
            "poddisruptionbudgets",
            "configmaps",
            "pods",
        ]
        .iter()
        .any(|kind| path.ends_with(&format!("/{kind}")));
    match method {
        Method::GET if is_collection && query.contains("watch=true") => {
            // A watch that never reports anything.
            Response::new(Body::from_stream(futures::stream::pending::<
                Result<Bytes, std::io::Error>,
            >()))
        }
        Method::GET if is_collection => {
            let items = if is_pool_collection { vec![pool()] } else { vec![] };
            json_response(
                StatusCode::OK,
                json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "10"}, "items": items}),
            )
        }
        Method::GET => json_response(
            StatusCode::NOT_FOUND,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "reason": "NotFound", "code": 404}),
        ),
        Method::PATCH if path.ends_with("/status") => {
            let applied: Value = serde_json::from_slice(&body).unwrap_or_default();
            let mut pool = pool();
            pool["status"] = applied["status"].clone();
            json_response(StatusCode::OK, pool)
        }
        Method::PATCH => {
            let applied: Value = serde_json::from_slice(&body).unwrap_or_default();
            json_response(StatusCode::OK, applied)
        }
        _ => json_response(StatusCode::METHOD_NOT_ALLOWED, json!({})),
    }
}

/// A minimal Lease store: create, read, and apply (the spec of the patch replaces fields).
fn lease(fake: &Fake, method: Method, body: &[u8]) -> Response {
    let Ok(mut stored) = fake.lease.lock() else {
        return json_response(StatusCode::INTERNAL_SERVER_ERROR, json!({}));
    };
    let sent: Value = serde_json::from_slice(body).unwrap_or_default();
    let not_found = || {
        json_response(
            StatusCode::NOT_FOUND,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "reason": "NotFound", "code": 404}),
        )
    };
    match (method, stored.as_mut()) {
        (Method::GET, Some(lease)) => json_response(StatusCode::OK, lease.clone()),
        (Method::GET, None) => not_found(),
        (Method::POST, _) => {
            let mut lease = sent;
            lease["metadata"]["resourceVersion"] = json!("1");
            lease["metadata"]["namespace"] = json!("evals");
            *stored = Some(lease.clone());
            json_response(StatusCode::CREATED, lease)
        }
        (Method::PATCH, Some(lease)) => {
            if !lease["spec"].is_object() {
                lease["spec"] = json!({});
            }
            for (key, value) in sent["spec"].as_object().into_iter().flatten() {
                lease["spec"][key] = value.clone();
            }
            let version: u64 = lease["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            lease["metadata"]["resourceVersion"] = json!((version + 1).to_string());
            json_response(StatusCode::OK, lease.clone())
        }
        (Method::PATCH, None) => not_found(),
        _ => json_response(StatusCode::METHOD_NOT_ALLOWED, json!({})),
    }
}

fn free_port() -> SocketAddr {
    let listener = StdListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("bound address")
}

async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connects");
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("writes");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("reads");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, response)
}

/// Runs the operator against a fresh fake API server until it writes the pool's status;
/// returns the server's state, the health address and the running operator.
async fn run_until_status(
    leader: Option<(String, String)>,
) -> (
    Fake,
    SocketAddr,
    tokio::task::JoinHandle<Result<(), sandpool_operator::controller::RunError>>,
) {
    run_until_status_with(Fake::default(), leader).await
}

/// [`run_until_status`] against the given fake API server.
async fn run_until_status_with(
    fake: Fake,
    leader: Option<(String, String)>,
) -> (
    Fake,
    SocketAddr,
    tokio::task::JoinHandle<Result<(), sandpool_operator::controller::RunError>>,
) {
    let log = fake.log.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let api_addr = listener.local_addr().expect("address");
    let app = Router::new().fallback(api).with_state(fake.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let config = kube::Config::new(format!("http://{api_addr}").parse().expect("uri"));
    let client = kube::Client::try_from(config).expect("client");
    let health = free_port();
    let operator = tokio::spawn(run_with_client(
        client,
        RunConfig {
            namespace: Some("evals".to_owned()),
            pools: OperatorConfig::default(),
            http_listen: health,
            leader,
            max_concurrent_reconciles: 16,
        },
    ));

    let status_path = "/apis/sandpool.dev/v1alpha1/namespaces/evals/sandboxpools/python/status";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let done = log
            .lock()
            .map(|l| l.iter().any(|(m, p)| m == Method::PATCH && p.starts_with(status_path)))
            .unwrap_or(false);
        if done {
            break;
        }
        assert!(!operator.is_finished(), "run stopped early: {:?}", operator.await);
        assert!(
            tokio::time::Instant::now() < deadline,
            "no status write; saw {:?}",
            log.lock().map(|l| l.clone())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (fake, health, operator)
}

#[tokio::test]
async fn run_reconciles_an_existing_pool_and_serves_health() {
    let (fake, health, operator) = run_until_status(None).await;
    let status_path = "/apis/sandpool.dev/v1alpha1/namespaces/evals/sandboxpools/python/status";
    let seen = fake.log.lock().map(|l| l.clone()).unwrap_or_default();
    let patches: Vec<&str> = seen
        .iter()
        .filter(|(m, _)| m == Method::PATCH)
        .map(|(_, p)| p.split('?').next().unwrap_or_default())
        .collect();
    assert_eq!(
        patches,
        [
            "/api/v1/namespaces/evals/serviceaccounts/python",
            "/apis/networking.k8s.io/v1/namespaces/evals/networkpolicies/python",
            "/api/v1/namespaces/evals/services/python",
            "/apis/policy/v1/namespaces/evals/poddisruptionbudgets/python",
            "/apis/apps/v1/namespaces/evals/deployments/python",
            status_path,
        ]
    );
    // Every owned kind is watched in the pool's namespace, by owner and not by label, so a
    // child whose managed-by label was removed is still seen at once.
    for kind in [
        "deployments",
        "services",
        "serviceaccounts",
        "networkpolicies",
        "poddisruptionbudgets",
    ] {
        assert!(
            seen.iter().any(|(m, p)| m == Method::GET
                && p.contains(&format!("/namespaces/evals/{kind}?"))
                && p.contains("watch=true")),
            "{kind} is not watched: {seen:?}"
        );
        assert!(
            !seen
                .iter()
                .any(|(_, p)| p.contains(&format!("/namespaces/evals/{kind}?")) && p.contains("labelSelector")),
            "{kind} is watched through a label: {seen:?}"
        );
    }

    // Executor pods are watched by label: their failures reconcile the pool, and no other
    // pod of the namespace is cached.
    assert!(
        seen.iter().any(|(m, p)| m == Method::GET
            && p.starts_with("/api/v1/namespaces/evals/pods?")
            && p.contains("watch=true")
            && p.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dsandpool-operator%2Csandpool.dev%2Fpool")),
        "executor pods are not watched by label: {seen:?}"
    );
    // Tenants ConfigMaps too: a namespace's other ConfigMaps are not cached.
    assert!(
        seen.iter().any(|(m, p)| m == Method::GET
            && p.starts_with("/api/v1/namespaces/evals/configmaps?")
            && p.contains("watch=true")
            && p.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dsandpool-operator%2Csandpool.dev%2Fpool")),
        "tenants ConfigMaps are not watched by label: {seen:?}"
    );

    let (status, _) = http_get(health, "/readyz").await;
    assert_eq!(status, 200);
    let (status, metrics) = http_get(health, "/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("sandpool_operator_reconciles_total 1"), "{metrics}");
    assert!(metrics.contains("sandpool_operator_status_writes_total 1"), "{metrics}");
    operator.abort();
}

#[tokio::test]
async fn run_reconciles_only_after_taking_the_lease() {
    let (fake, health, operator) = run_until_status(Some(("evals".to_owned(), "replica-a".to_owned()))).await;
    let holder = fake
        .lease
        .lock()
        .ok()
        .and_then(|l| l.as_ref().map(|l| l["spec"]["holderIdentity"].clone()));
    assert_eq!(holder, Some(json!("replica-a")));
    let seen = fake.log.lock().map(|l| l.clone()).unwrap_or_default();
    let first_lease = seen.iter().position(|(_, p)| p.contains("/leases"));
    let first_child = seen.iter().position(|(_, p)| p.contains("/serviceaccounts/python"));
    assert!(first_lease < first_child, "reconciled before leading: {seen:?}");
    let (_, metrics) = http_get(health, "/metrics").await;
    assert!(metrics.contains("sandpool_operator_leader 1"), "{metrics}");
    operator.abort();
}

#[tokio::test]
async fn without_pods_permission_the_operator_still_reconciles_and_watches_its_children() {
    // An operator newer than its chart's Role: pods are refused, so their watch is not
    // started (a failing watcher retries for ever, and its errors back off the triggers the
    // children's watches share), and the children are watched and the pool reconciled.
    let fake = Fake {
        refuse_pods: true,
        ..Fake::default()
    };
    let (fake, _health, operator) = run_until_status_with(fake, None).await;
    // Give every watch its chance to start.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let watched = |seen: &[(Method, String)], kind: &str| {
        seen.iter().any(|(m, p)| {
            m == Method::GET && p.contains(&format!("/namespaces/evals/{kind}?")) && p.contains("watch=true")
        })
    };
    loop {
        let seen = fake.log.lock().map(|l| l.clone()).unwrap_or_default();
        if watched(&seen, "deployments") && watched(&seen, "services") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "children not watched: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The one refused list at start-up is all: no watcher retrying pods (and backing off the
    // controller's triggers with it).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = fake.log.lock().map(|l| l.clone()).unwrap_or_default();
    let pods: Vec<_> = seen
        .iter()
        .filter(|(_, p)| p.contains("/namespaces/evals/pods?"))
        .collect();
    assert_eq!(pods.len(), 1, "{pods:?}");
    operator.abort();
}
