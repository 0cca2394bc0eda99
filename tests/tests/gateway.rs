//! The gateway end to end on loopback: two real in-process executors behind it (spread
//! per request, retry on a full queue, a dead backend skipped), and small fake upstreams
//! for what executors cannot show yet (session routing, streaming, large bodies).
//!
//! Runs as root (the executors' sandboxes need it).

use bytes::Bytes;
use clap::Parser;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use sandpool_executor::config::ServerArgs;
use sandpool_executor::server::{ServeOptions, serve_with_http};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

type Body = UnsyncBoxBody<Bytes, Infallible>;

// ---------------------------------------------------------------------------------------
// Executors

/// One in-process executor: its HTTP address and its engine (for its metrics).
#[derive(Clone)]
struct Exec {
    http: SocketAddr,
    engine: Arc<sandpool_executor::Engine>,
}

/// Starts an executor named `name` (its `executor_pod_name`, as a pod's name would be) on
/// a thread and runtime of its own. `SANDPOOL_NAME` is process-wide, so the engine is
/// built here with the name set, as `ExecutorArgs::build_engine` would build it.
fn start_executor(name: &str, index: u32, extra: &[&str]) -> Exec {
    clean_stale();
    let pid = std::process::id();
    let work_root = std::env::temp_dir().join(format!("sandpool-gateway-{pid}-{index}"));
    // Far from the other suites' uid ranges (60000-..., 61000-64800, 63000-83000).
    // 100 uids per executor: its slots, then its session seats.
    let uid_base = 400_000 + (pid % 200) * 400 + index * 100;
    let args = ServerArgs::parse_from(
        [
            "sandpool-executor".to_string(),
            "--work-root".into(),
            work_root.display().to_string(),
            "--uid-base".into(),
            uid_base.to_string(),
            "--enable-languages".into(),
            "python".into(),
        ]
        .into_iter()
        .chain(extra.iter().map(|s| s.to_string())),
    );
    let name = name.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async move {
            let ex = &args.executor;
            let mut table = sandpool_executor::languages::LanguageTable::load(None).expect("language table");
            table.retain(&["python".to_string()]);
            let sandbox = sandpool_sandbox::open(ex.sandbox_config()).expect("sandbox (run as root)");
            let mut cfg = ex.engine_config();
            cfg.identity.name = name;
            let engine = Arc::new(sandpool_executor::Engine::new(sandbox, table, cfg).await);
            let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let opts = ServeOptions {
                drain_timeout: Duration::from_secs(1),
                ..ServeOptions::local(grpc.local_addr().expect("addr"), ex.session_policy())
            };
            tx.send(Exec {
                http: http.local_addr().expect("addr"),
                engine: engine.clone(),
            })
            .expect("send");
            serve_with_http(engine, grpc, Some(http), opts, std::future::pending())
                .await
                .expect("serve");
        });
    });
    rx.recv_timeout(Duration::from_secs(300)).expect("executor started")
}

/// Removes the work roots that earlier runs of this suite (now dead) left, when nothing is
/// mounted below them any more.
fn clean_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("sandpool-gateway-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let path = e.path();
        if std::path::Path::new(&format!("/proc/{pid}")).exists() || mountinfo.contains(&format!(" {}", path.display()))
        {
            continue;
        }
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// The two executors most tests share, `exec-a` and `exec-b`.
fn pair() -> &'static (Exec, Exec) {
    static PAIR: OnceLock<(Exec, Exec)> = OnceLock::new();
    PAIR.get_or_init(|| {
        (
            start_executor("exec-a", 0, &["--slots", "2"]),
            start_executor("exec-b", 1, &["--slots", "2"]),
        )
    })
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------
// The gateway and a client

struct Gateway {
    addr: SocketAddr,
    metrics: SocketAddr,
}

/// A gateway in this test's runtime over `backends` (name, address), with more flags.
async fn gateway(backends: &[(&str, SocketAddr)], extra: &[&str]) -> Gateway {
    gateway_until(backends, extra, std::future::pending()).await.0
}

/// [`gateway`] that shuts down when `shutdown` resolves; the handle ends with the drain.
async fn gateway_until(
    backends: &[(&str, SocketAddr)],
    extra: &[&str],
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> (Gateway, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let metrics_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let g = Gateway {
        addr: listener.local_addr().expect("addr"),
        metrics: metrics_listener.local_addr().expect("addr"),
    };
    let mut argv = vec!["sandpool-gateway".to_string()];
    for (name, addr) in backends {
        argv.push("--backend".into());
        argv.push(format!("{name}={addr}"));
    }
    argv.extend(extra.iter().map(|s| s.to_string()));
    let args = sandpool_gateway::Args::parse_from(argv);
    let task = tokio::spawn(async move {
        sandpool_gateway::run(args, listener, metrics_listener, shutdown)
            .await
            .expect("gateway serves");
    });
    (g, task)
}

/// One HTTP/1.1 keep-alive connection.
struct Conn {
    send: hyper::client::conn::http1::SendRequest<Body>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        Conn { send }
    }

    async fn request(&mut self, req: http::Request<Body>) -> http::Response<hyper::body::Incoming> {
        self.send.ready().await.expect("connection ready");
        tokio::time::timeout(Duration::from_secs(60), self.send.send_request(req))
            .await
            .expect("response within a minute")
            .expect("response")
    }

    /// Sends `req`; the status and the whole body.
    async fn call(&mut self, req: http::Request<Body>) -> (u16, Bytes) {
        let resp = self.request(req).await;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, body)
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed_unsync()
}

fn get(path: &str) -> http::Request<Body> {
    http::Request::get(path)
        .header("host", "gateway")
        .body(full(Bytes::new()))
        .expect("request")
}

fn run_code(code: &str, run_timeout: f64) -> http::Request<Body> {
    let body = serde_json::json!({ "code": code, "language": "python", "run_timeout": run_timeout });
    http::Request::post("/run_code")
        .header("host", "gateway")
        .header("content-type", "application/json")
        .body(full(body.to_string()))
        .expect("request")
}

fn json(body: &Bytes) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(body)))
}

async fn gateway_metrics(g: &Gateway) -> String {
    let (status, body) = Conn::open(g.metrics).await.call(get("/metrics")).await;
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body).into_owned()
}

/// A port nothing listens on: bound, then closed.
fn dead_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
}

// ---------------------------------------------------------------------------------------
// Real executors

/// A keep-alive client of a Service sticks to one pod; through the gateway its requests
/// spread over both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_keep_alive_connection_spreads_over_both_executors() {
    let (a, b) = pair().clone();
    let g = gateway(&[("exec-a", a.http), ("exec-b", b.http)], &[]).await;
    let mut conn = Conn::open(g.addr).await;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..40 {
        let (status, body) = conn.call(run_code(&format!("print({i} * 2)"), 20.0)).await;
        let v = json(&body);
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["status"], "Success", "{v}");
        assert_eq!(v["run_result"]["stdout"], format!("{}\n", i * 2));
        let pod = v["executor_pod_name"].as_str().unwrap_or("?").to_string();
        *seen.entry(pod).or_default() += 1;
    }
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["exec-a", "exec-b"], "{seen:?}");
    assert!(seen.values().all(|&n| n >= 10), "lopsided: {seen:?}");
    let m = gateway_metrics(&g).await;
    assert_eq!(
        metric(
            &m,
            "sandpool_gateway_requests_total{kind=\"stateless\",outcome=\"2xx\"}"
        ),
        40.0,
        "{m}"
    );
}

/// E2B over the pool: creates spread over the executors, each sandbox's calls reach the
/// executor holding it by `E2b-Sandbox-Id`, and a list shows every executor's sandboxes,
/// paged as one executor pages its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2b_sandboxes_spread_are_routed_and_listed_over_the_pool() {
    let (a, b) = pair().clone();
    let g = gateway(&[("exec-a", a.http), ("exec-b", b.http)], &[]).await;
    let mut conn = Conn::open(g.addr).await;
    let req = |method: &str, path: &str, headers: &[(&str, &str)], body: String| {
        let mut r = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "gateway")
            .header("x-api-key", "e2b-key-0123456789")
            .header("content-type", "application/json");
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(full(body)).expect("request")
    };
    let mut sandboxes = Vec::new();
    for _ in 0..2 {
        let body = serde_json::json!({"templateID": "code-interpreter-v1", "metadata": {"suite": "gateway"}});
        let (status, got) = conn.call(req("POST", "/v2/sandboxes", &[], body.to_string())).await;
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&got));
        let v = json(&got);
        sandboxes.push((
            v["sandboxID"].as_str().expect("id").to_owned(),
            v["envdAccessToken"].as_str().expect("token").to_owned(),
        ));
    }
    let mut homes: Vec<&str> = sandboxes.iter().map(|(id, _)| &id[33..]).collect();
    homes.sort_unstable();
    assert_eq!(homes, ["exec-a", "exec-b"], "one sandbox on each executor");
    for (i, (id, token)) in sandboxes.iter().enumerate() {
        let headers = [("e2b-sandbox-id", id.as_str()), ("x-access-token", token.as_str())];
        let cell = serde_json::json!({"code": format!("v = {i} + 40\nv + 1")}).to_string();
        let (status, got) = conn.call(req("POST", "/execute", &headers, cell)).await;
        let text = String::from_utf8_lossy(&got);
        assert_eq!(status, 200, "{text}");
        assert!(text.contains(&format!("\"text\":\"{}\"", i + 41)), "{text}");
    }
    let (status, got) = conn
        .call(req("GET", "/v2/sandboxes?metadata=suite%3Dgateway", &[], String::new()))
        .await;
    assert_eq!(status, 200);
    let listed: Vec<String> = json(&got)
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|v| v["sandboxID"].as_str().map(str::to_owned))
        .collect();
    let mut want: Vec<String> = sandboxes.iter().map(|(id, _)| id.clone()).collect();
    let mut got_sorted = listed.clone();
    want.sort();
    got_sorted.sort();
    assert_eq!(got_sorted, want, "both executors' sandboxes");
    let first = conn
        .request(req("GET", "/v2/sandboxes?limit=1", &[], String::new()))
        .await;
    let token = first
        .headers()
        .get("x-next-token")
        .and_then(|v| v.to_str().ok())
        .expect("a next page")
        .to_owned();
    // A cursor: the page's last sandbox, `<startedAt>_<sandboxID>`.
    assert!(
        token.ends_with(&format!("_{}", listed[0])),
        "pages follow the merged order: {token}"
    );
    let _ = first.into_body().collect().await;
    let (_, got) = conn
        .call(req(
            "GET",
            &format!("/v2/sandboxes?limit=1&nextToken={token}"),
            &[],
            String::new(),
        ))
        .await;
    assert_eq!(json(&got)[0]["sandboxID"], listed[1]);
    // Another key sees none of them, on any executor.
    let other = http::Request::get("/v2/sandboxes")
        .header("host", "gateway")
        .header("x-api-key", "someone-else-0123456789")
        .body(full(Bytes::new()))
        .expect("request");
    let (_, got) = conn.call(other).await;
    assert_eq!(json(&got), serde_json::json!([]));
    for (id, _) in &sandboxes {
        let (status, _) = conn
            .call(req("DELETE", &format!("/sandboxes/{id}"), &[], String::new()))
            .await;
        assert_eq!(status, 204, "killed on its executor");
    }
}

/// An executor whose queue is full answers 429 before running anything: the request
/// goes to the other, and every one succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_backend_is_retried_on_the_other() {
    let (_, b) = pair().clone();
    static FULL: OnceLock<Exec> = OnceLock::new();
    let full = FULL
        .get_or_init(|| start_executor("exec-full", 2, &["--slots", "1", "--queue", "0"]))
        .clone();
    // Its one slot taken by a sleeper, sent to it directly.
    let direct = full.http;
    let sleeper = tokio::spawn(async move {
        Conn::open(direct)
            .await
            .call(run_code("import time; time.sleep(30); print('slept')", 40.0))
            .await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while metric(&full.engine.metrics_text(), "sandpool_busy_slots") < 1.0 {
        assert!(std::time::Instant::now() < deadline, "the sleeper never took the slot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let g = gateway(&[("exec-full", full.http), ("exec-b", b.http)], &[]).await;
    let mut conn = Conn::open(g.addr).await;
    for i in 0..10 {
        let (status, body) = conn.call(run_code(&format!("print({i})"), 20.0)).await;
        let v = json(&body);
        assert_eq!(status, 200, "request {i}: {v}");
        assert_eq!(v["executor_pod_name"], "exec-b", "{v}");
    }
    let m = gateway_metrics(&g).await;
    assert!(metric(&m, "sandpool_gateway_retries_total") >= 1.0, "{m}");
    assert!(
        metric(&m, "sandpool_gateway_upstream_errors_total{reason=\"status_429\"}") >= 1.0,
        "{m}"
    );
    // Still busy: every request above met a full queue there, however slow they were.
    assert!(!sleeper.is_finished(), "the sleeper ended before the test did");
    sleeper.abort();
}

/// A backend that refuses connections: requests still succeed on the other, and it is
/// skipped while marked down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_backend_is_skipped() {
    let (a, _) = pair().clone();
    // Down for longer than the test takes, however loaded the machine: one connect only.
    let g = gateway(&[("dead", dead_addr()), ("exec-a", a.http)], &["--down-ms", "600000"]).await;
    let mut conn = Conn::open(g.addr).await;
    for i in 0..10 {
        let (status, body) = conn.call(run_code(&format!("print({i})"), 20.0)).await;
        let v = json(&body);
        assert_eq!(status, 200, "request {i}: {v}");
        assert_eq!(v["executor_pod_name"], "exec-a", "{v}");
    }
    let m = gateway_metrics(&g).await;
    // Tried once, then skipped while down: not tried for each request.
    let connects = metric(&m, "sandpool_gateway_upstream_errors_total{reason=\"connect\"}");
    assert_eq!(connects, 1.0, "connect errors\n{m}");
}

// ---------------------------------------------------------------------------------------
// Fake upstreams

/// What a fake upstream got.
#[derive(Debug, Clone)]
struct Seen {
    path_and_query: String,
    headers: http::HeaderMap,
}

#[derive(Clone)]
struct Fake {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Released by the test to let `/stream` send its second line.
    go_on: Arc<tokio::sync::Notify>,
}

/// A fake executor named `name`: `/stream` sends a line, waits for `go_on`, sends another;
/// `/echo` sends back its body; anything else is recorded and answered with the name.
async fn fake(name: &'static str) -> Fake {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    serve_fake(name, listener)
}

/// [`fake`] on `addr` (a port that was free a moment ago).
async fn fake_at(name: &'static str, addr: SocketAddr) -> Fake {
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind the same port");
    serve_fake(name, listener)
}

fn serve_fake(name: &'static str, listener: tokio::net::TcpListener) -> Fake {
    use axum::response::IntoResponse;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let go_on = Arc::new(tokio::sync::Notify::new());
    let (s, n) = (seen.clone(), go_on.clone());
    let app = axum::Router::new()
        .route(
            "/stream",
            axum::routing::get(move || {
                let n = n.clone();
                async move {
                    let lines = futures::stream::unfold(0, move |i| {
                        let n = n.clone();
                        async move {
                            match i {
                                0 => Some((Ok::<_, Infallible>(Bytes::from("line 1\n")), 1)),
                                1 => {
                                    n.notified().await;
                                    Some((Ok(Bytes::from("line 2\n")), 2))
                                }
                                _ => None,
                            }
                        }
                    });
                    axum::body::Body::from_stream(lines).into_response()
                }
            }),
        )
        .route("/echo", axum::routing::post(|body: Bytes| async move { body }))
        .fallback(move |req: axum::extract::Request| {
            let s = s.clone();
            async move {
                s.lock().expect("lock").push(Seen {
                    path_and_query: req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default(),
                    headers: req.headers().clone(),
                });
                name
            }
        })
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20));
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    Fake { addr, seen, go_on }
}

const HEX: &str = "0123456789abcdef0123456789abcdef";

/// Each way a request names its session reaches the pod the id names, every time (a
/// balancer would send half elsewhere), with its path, query and auth headers intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_bound_requests_reach_the_pod_their_id_names() {
    let (pa, pb) = (fake("pod-a").await, fake("pod-b").await);
    let g = gateway(&[("pod-a", pa.addr), ("pod-b", pb.addr)], &[]).await;
    let mut conn = Conn::open(g.addr).await;
    for target in ["pod-a", "pod-b"] {
        let id = format!("{HEX}-{target}");
        let forms: Vec<http::Request<Body>> = (0..4)
            .flat_map(|_| {
                let b = || http::Request::get("/files?path=%2Fx").header("host", "gw");
                [
                    b().header("E2b-Sandbox-Id", &id),
                    b().header("X-Sandpool-Session", &id),
                    http::Request::get(format!("/sandboxes/{id}?x=1")).header("host", "gw"),
                    http::Request::post(format!("/sandboxes/{id}/timeout")).header("host", "gw"),
                    http::Request::get(format!("/v2/sandboxes/{id}/logs")).header("host", "gw"),
                ]
            })
            .map(|r| {
                r.header("Authorization", "Bearer secret")
                    .header("X-API-KEY", "key")
                    .header("X-Access-Token", "token")
                    .body(full(Bytes::new()))
                    .expect("request")
            })
            .collect();
        for req in forms {
            let pq = req.uri().to_string();
            let (status, body) = conn.call(req).await;
            assert_eq!((status, &body[..]), (200, target.as_bytes()), "{pq} went elsewhere");
        }
    }
    let seen = pb.seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 20);
    let first = &seen[0];
    assert_eq!(first.path_and_query, "/files?path=%2Fx");
    for (h, v) in [
        ("authorization", "Bearer secret"),
        ("x-api-key", "key"),
        ("x-access-token", "token"),
    ] {
        assert_eq!(first.headers.get(h).map(|v| v.as_bytes()), Some(v.as_bytes()), "{h}");
    }
    assert!(
        seen.iter()
            .any(|s| s.path_and_query == format!("/sandboxes/{HEX}-pod-b?x=1"))
    );
}

/// A session whose pod is gone goes to a live executor, which resumes it from the store the
/// pool shares (docs/sessions.md, "Surviving the pod") or, holding no such session, answers
/// with its own "not found" in E2B's shapes; a malformed id is a 400 naming where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_and_malformed_sessions() {
    let pa = fake("pod-a").await;
    let g = gateway(&[("pod-a", pa.addr)], &[]).await;
    let mut conn = Conn::open(g.addr).await;
    let gone = format!("{HEX}-pod-gone");
    let start = || {
        http::Request::post("/process.Process/Start")
            .header("host", "gw")
            .header("E2b-Sandbox-Id", &gone)
            .body(full("{}"))
            .expect("request")
    };
    for req in [get(&format!("/sandboxes/{gone}")), start()] {
        let (status, body) = conn.call(req).await;
        assert_eq!((status, &body[..]), (200, &b"pod-a"[..]), "to the live executor");
    }
    assert_eq!(pa.seen.lock().expect("lock").len(), 2);

    // Real executors holding no such session: their own "not found", as E2B's SDKs expect.
    let (a, b) = pair().clone();
    let real = gateway(&[("exec-a", a.http), ("exec-b", b.http)], &[]).await;
    let mut rc = Conn::open(real.addr).await;
    let (status, body) = rc.call(get(&format!("/sandboxes/{gone}"))).await;
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
    assert_eq!(json(&body)["code"], 404);
    let (status, body) = rc.call(start()).await;
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
    let v = json(&body);
    assert_eq!(v["code"], 502, "{v}");
    assert!(
        v["message"].as_str().is_some_and(|m| m.contains("was not found")),
        "{v}"
    );

    for (req, names) in [
        (
            http::Request::get("/files").header("E2b-Sandbox-Id", "not-an-id"),
            "E2b-Sandbox-Id",
        ),
        (
            http::Request::get("/files").header("X-Sandpool-Session", "ABC"),
            "X-Sandpool-Session",
        ),
        (http::Request::get("/sandboxes/bogus/pause"), "path"),
    ] {
        let (status, body) = conn
            .call(req.header("host", "gw").body(full(Bytes::new())).expect("request"))
            .await;
        let v = json(&body);
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["code"], 400);
        assert!(v["message"].as_str().is_some_and(|m| m.contains(names)), "{v}");
    }
    assert_eq!(
        pa.seen.lock().expect("lock").len(),
        2,
        "a bad request reached a backend"
    );
}

/// A session's calls go to its holder even while the holder is marked down: the mark (from
/// one failed connect) steers stateless calls away, but another executor cannot serve the
/// session (a draining holder's sessions are not in the store yet; E2B answers 502 "not
/// found" there). Here A's port refuses one stateless call and is marked down for ten
/// minutes, then A is up again: a call for A's session reaches A, not B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_marked_down_still_gets_its_sessions_calls() {
    let a_addr = dead_addr();
    let pb = fake("pod-b").await;
    let g = gateway(&[("pod-a", a_addr), ("pod-b", pb.addr)], &["--down-ms", "600000"]).await;
    let mut conn = Conn::open(g.addr).await;
    // Stateless calls until one has tried A and marked it down (B answers them all).
    for _ in 0..4 {
        let (status, body) = conn.call(get("/v1/runtimes")).await;
        assert_eq!((status, &body[..]), (200, &b"pod-b"[..]));
    }
    let m = gateway_metrics(&g).await;
    assert_eq!(
        metric(&m, "sandpool_gateway_upstream_errors_total{reason=\"connect\"}"),
        1.0,
        "A was tried once and marked down\n{m}"
    );
    // A comes back on its address.
    let pa = fake_at("pod-a", a_addr).await;
    let id = format!("{HEX}-pod-a");
    let req = http::Request::post("/execute")
        .header("host", "gw")
        .header("E2b-Sandbox-Id", &id)
        .body(full("{}"))
        .expect("request");
    let (status, body) = conn.call(req).await;
    assert_eq!((status, &body[..]), (200, &b"pod-a"[..]), "to the session's holder");
    assert_eq!(pa.seen.lock().expect("lock").len(), 1);
}

/// Responses stream: the client has the first line before the upstream sends the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_stream_through() {
    let up = fake("pod-a").await;
    let g = gateway(&[("pod-a", up.addr)], &[]).await;
    let mut conn = Conn::open(g.addr).await;
    // A gateway that buffers would send nothing before the upstream ends, which it never does.
    let resp = tokio::time::timeout(Duration::from_secs(5), conn.request(get("/stream")))
        .await
        .expect("the response head and first line arrive before the second is sent");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while !got.ends_with(b"line 1\n") {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("the first line arrives before the second is sent")
            .expect("a frame")
            .expect("body");
        if let Ok(d) = frame.into_data() {
            got.extend_from_slice(&d);
        }
    }
    assert_eq!(got, b"line 1\n");
    up.go_on.notify_one();
    let rest = body.collect().await.expect("rest").to_bytes();
    assert_eq!(&rest[..], b"line 2\n");
}

/// A body larger than the retry cap is streamed through whole, declared or chunked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_pass_through_intact() {
    let up = fake("pod-a").await;
    let g = gateway(&[("pod-a", up.addr)], &["--max-retry-body-bytes", "65536"]).await;
    let mut conn = Conn::open(g.addr).await;
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let big = Bytes::from(big);

    let req = http::Request::post("/echo")
        .header("host", "gw")
        .header("content-length", big.len())
        .body(full(big.clone()))
        .expect("request");
    let (status, body) = conn.call(req).await;
    assert_eq!(status, 200);
    assert!(
        body == big,
        "declared body changed on the way: {} bytes back",
        body.len()
    );

    let chunks: Vec<Result<Frame<Bytes>, Infallible>> = big
        .chunks(100_000)
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    let req = http::Request::post("/echo")
        .header("host", "gw")
        .body(StreamBody::new(futures::stream::iter(chunks)).boxed_unsync())
        .expect("request");
    let (status, body) = conn.call(req).await;
    assert_eq!(status, 200);
    assert!(
        body == big,
        "chunked body changed on the way: {} bytes back",
        body.len()
    );
}

/// Ready once a backend is known; health and metrics served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_metrics() {
    let up = fake("pod-a").await;
    let g = gateway(&[("pod-a", up.addr)], &[]).await;
    let mut m = Conn::open(g.metrics).await;
    assert_eq!(m.call(get("/healthz")).await.0, 200);
    assert_eq!(m.call(get("/readyz")).await.0, 200);
    let text = gateway_metrics(&g).await;
    assert_eq!(metric(&text, "sandpool_gateway_backends"), 1.0, "{text}");
}

/// On shutdown the gateway stops accepting and turns unready, while a response in flight
/// streams to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_requests_in_flight() {
    let up = fake("pod-a").await;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (g, task) = gateway_until(&[("pod-a", up.addr)], &["--drain-timeout-ms", "10000"], async {
        let _ = stop_rx.await;
    })
    .await;
    let mut metrics = Conn::open(g.metrics).await;
    let mut conn = Conn::open(g.addr).await;
    let resp = conn.request(get("/stream")).await;
    let mut body = resp.into_body();
    let first = body.frame().await.expect("frame").expect("body");
    assert_eq!(first.into_data().ok().as_deref(), Some(&b"line 1\n"[..]));

    stop_tx.send(()).expect("stop");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(g.addr).await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "still accepting after shutdown");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(metrics.call(get("/readyz")).await.0, 503, "ready while draining");
    assert!(!task.is_finished(), "stopped with a response in flight");

    up.go_on.notify_one();
    let rest = body.collect().await.expect("rest").to_bytes();
    assert_eq!(&rest[..], b"line 2\n");
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the drain ends once the response has")
        .expect("gateway task");
}

// ---------------------------------------------------------------------------------------
// Issue 46 finding 6: unread streams, list pages, made-up session ids

/// Clients that start a stream and never read held every gateway connection. A client
/// address now holds at most `--max-connections-per-client`, more are told so (503), and a
/// response nobody reads is ended after `--write-timeout-ms`, with its upstream request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_streams_hold_a_clients_share_and_end_at_the_write_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (a, b) = pair().clone();
    let g = gateway(
        &[("exec-a", a.http), ("exec-b", b.http)],
        &[
            "--max-connections",
            "4",
            "--max-connections-per-client",
            "2",
            "--write-timeout-ms",
            "3000",
        ],
    )
    .await;
    // 8 MB of output: more than the reader's small window and the gateway's send buffer
    // (4 MiB at most), so the gateway's writes wait on a reader that never reads.
    let body = serde_json::json!({"code": "print('x' * 8_000_000)", "language": "python", "run_timeout": 30});
    let body = body.to_string();
    let raw = format!(
        "POST /run_code HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut unread = Vec::new();
    for _ in 0..4 {
        let s = tokio::net::TcpSocket::new_v4().expect("socket");
        s.set_recv_buffer_size(4096).expect("receive buffer");
        // Another client address than the reader's below (all of 127/8 is loopback).
        s.bind("127.0.0.2:0".parse().expect("addr")).expect("bind 127.0.0.2");
        let mut tcp = s.connect(g.addr).await.expect("connect");
        tcp.write_all(raw.as_bytes()).await.expect("send");
        unread.push(tcp);
    }
    // Another client is served meanwhile (today it waited behind the four, for ever).
    let served = tokio::time::timeout(Duration::from_secs(60), async {
        Conn::open(g.addr).await.call(run_code("print(6 * 7)", 20.0)).await
    })
    .await
    .expect("another client is served while the unread streams are held");
    assert_eq!(served.0, 200);
    assert_eq!(json(&served.1)["run_result"]["stdout"], "42\n");
    // The streamer's connections past its share were answered, not held.
    for tcp in &mut unread[2..] {
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut got))
            .await
            .expect("the refusal ends")
            .expect("read");
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
        assert!(text.contains("--max-connections-per-client"), "{text}");
    }
    // The unread ones end at the write timeout: nothing is outstanding any more.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let m = gateway_metrics(&g).await;
        let held = metric(&m, "sandpool_gateway_outstanding{backend=\"exec-a\"}")
            + metric(&m, "sandpool_gateway_outstanding{backend=\"exec-b\"}");
        if held == 0.0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "unread streams still held: {m}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for tcp in &mut unread[..2] {
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(60), tcp.read_to_end(&mut got))
            .await
            .expect("the connection was ended");
        assert!(got.len() < 8_000_000, "the whole response came: {} bytes", got.len());
    }
}

/// Each gateway list page fetched every executor's whole list. Now every executor is asked
/// for one page after the client's cursor, and the pages merge into the client's; walking
/// the pages gives each sandbox once, in the merged order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_ask_each_executor_for_one_page() {
    let (a, b) = pair().clone();
    let spy = fake("pod-spy").await;
    let make = gateway(&[("exec-a", a.http), ("exec-b", b.http)], &[]).await;
    let list = gateway(&[("exec-a", a.http), ("exec-b", b.http), ("pod-spy", spy.addr)], &[]).await;
    let req = |method: &str, path: &str, body: String| {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "gateway")
            .header("x-api-key", "e2b-key-paging-0123456789")
            .header("content-type", "application/json")
            .body(full(body))
            .expect("request")
    };
    let mut conn = Conn::open(make.addr).await;
    let mut made = Vec::new();
    for _ in 0..5 {
        let body = serde_json::json!({"templateID": "code-interpreter-v1", "metadata": {"suite": "paging"}});
        let (status, got) = conn.call(req("POST", "/v2/sandboxes", body.to_string())).await;
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&got));
        made.push(json(&got)["sandboxID"].as_str().expect("id").to_owned());
    }
    let mut lconn = Conn::open(list.addr).await;
    let (status, got) = lconn
        .call(req("GET", "/v2/sandboxes?metadata=suite%3Dpaging", String::new()))
        .await;
    assert_eq!(status, 200);
    let whole: Vec<String> = json(&got)
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|v| v["sandboxID"].as_str().map(str::to_owned))
        .collect();
    let (mut sorted, mut want) = (whole.clone(), made.clone());
    sorted.sort();
    want.sort();
    assert_eq!(sorted, want, "the pool's list");
    let mut walked = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..5 {
        let path = match &token {
            Some(t) => format!("/v2/sandboxes?metadata=suite%3Dpaging&limit=2&nextToken={t}"),
            None => "/v2/sandboxes?metadata=suite%3Dpaging&limit=2".to_string(),
        };
        let resp = lconn.request(req("GET", &path, String::new())).await;
        assert_eq!(resp.status(), 200);
        token = resp
            .headers()
            .get("x-next-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let got = resp.into_body().collect().await.expect("body").to_bytes();
        let page = json(&got);
        let page = page.as_array().expect("a page");
        assert!(page.len() <= 2, "{page:?}");
        walked.extend(page.iter().filter_map(|v| v["sandboxID"].as_str().map(str::to_owned)));
        if token.is_none() {
            break;
        }
    }
    assert_eq!(walked, whole, "the pages walk the merged list once, in order");
    // What each executor was asked for: a page of the client's size after its cursor,
    // never the whole list.
    let asked: Vec<String> = spy
        .seen
        .lock()
        .expect("lock")
        .iter()
        .map(|s| s.path_and_query.clone())
        .collect();
    assert_eq!(asked.len(), 4, "{asked:?}");
    assert!(asked[0].contains("limit=100"), "{asked:?}");
    for q in &asked[1..] {
        assert!(q.contains("limit=2") && !q.contains("limit=1000"), "{asked:?}");
    }
    assert!(asked[2].contains("nextToken="), "{asked:?}");
    for id in &made {
        let (status, _) = conn
            .call(req("DELETE", &format!("/sandboxes/{id}"), String::new()))
            .await;
        assert_eq!(status, 204);
    }
}

/// A made-up session header pinned stateless work to the executor it named. Session
/// headers now bind only the data plane, where the executor answers a made-up id with its
/// "not found"; on stateless routes they are ignored and the work spreads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_session_header_pins_nothing() {
    let (a, b) = pair().clone();
    let g = gateway(&[("exec-a", a.http), ("exec-b", b.http)], &[]).await;
    let mut conn = Conn::open(g.addr).await;
    let made_up = format!("{HEX}-exec-a");
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..20 {
        let mut req = run_code(&format!("print({i})"), 20.0);
        let h = if i % 2 == 0 {
            "x-sandpool-session"
        } else {
            "e2b-sandbox-id"
        };
        req.headers_mut()
            .insert(h, http::HeaderValue::from_str(&made_up).expect("value"));
        let (status, body) = conn.call(req).await;
        let v = json(&body);
        assert_eq!(status, 200, "{v}");
        *seen
            .entry(v["executor_pod_name"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["exec-a", "exec-b"], "{seen:?}");
    // On the data plane, the id is what the executor serves by: a made-up one is its "not
    // found", run nowhere.
    let req = http::Request::post("/execute")
        .header("host", "gw")
        .header("content-type", "application/json")
        .header("e2b-sandbox-id", &made_up)
        .body(full(r#"{"code":"1"}"#))
        .expect("request");
    let (status, body) = conn.call(req).await;
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("was not found"));
}

/// Two gateway replicas share nothing, yet send each session id to the executor it names (the id
/// carries the pod's name), whatever order each lists its backends in, as two watches may; and
/// stateless requests through either still reach both executors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_route_a_session_to_the_same_executor() {
    let (pa, pb) = (fake("pod-a").await, fake("pod-b").await);
    let g1 = gateway(&[("pod-a", pa.addr), ("pod-b", pb.addr)], &[]).await;
    let g2 = gateway(&[("pod-b", pb.addr), ("pod-a", pa.addr)], &[]).await;
    let mut conns = [Conn::open(g1.addr).await, Conn::open(g2.addr).await];
    for k in 0..12 {
        let target = if k % 3 == 0 { "pod-a" } else { "pod-b" };
        let id = format!("{HEX}-{target}");
        for (r, c) in conns.iter_mut().enumerate() {
            let req = http::Request::get("/files?path=%2Fx")
                .header("host", "gw")
                .header("E2b-Sandbox-Id", &id)
                .body(full(Bytes::new()))
                .expect("request");
            let (status, body) = c.call(req).await;
            assert_eq!(
                (status, &body[..]),
                (200, target.as_bytes()),
                "replica {r}, session {k}"
            );
        }
    }
    for (r, c) in conns.iter_mut().enumerate() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..4 {
            let (status, body) = c.call(get("/v1/ping")).await;
            assert_eq!(status, 200);
            seen.insert(body);
        }
        assert_eq!(seen.len(), 2, "replica {r} spreads stateless requests over both");
    }
}

// ---------------------------------------------------------------------------------------
// A pod that goes (issue 47: "the next call through the gateway resumes it on another pod")

const TENANT_KEY: &str = "tenant-m-token-0123456789abcdef";

/// A real executor process named `name` (as its pod would be), serving E2B on HTTP, keeping
/// paused sessions in `store`.
async fn named_executor(name: &str, dir: &std::path::Path, store: &std::path::Path) -> sandpool_tests::Executor {
    let f = dir.join("tenants.toml");
    std::fs::write(&f, format!("[[tenant]]\nname = \"m\"\ntoken = \"{TENANT_KEY}\"\n")).expect("tenants file");
    sandpool_tests::Executor::start(sandpool_tests::Options {
        slots: 2,
        languages: vec!["python", "bash"],
        http: true,
        env: vec![
            ("SANDPOOL_TENANTS_FILE".into(), f.display().to_string()),
            ("SANDPOOL_NAME".into(), name.into()),
        ],
        extra_args: vec!["--session-store-dir".into(), store.display().to_string()],
        ..Default::default()
    })
    .await
}

/// SIGTERM to `e` (its drain pauses its sessions into the store), waited for off the
/// runtime; it must exit cleanly.
async fn drain_and_stop(mut e: sandpool_tests::Executor) {
    let status = tokio::task::spawn_blocking(move || e.terminate(Duration::from_secs(120)))
        .await
        .expect("join");
    assert!(
        status.is_some_and(|s| s.success()),
        "the executor exited badly: {status:?}"
    );
}

/// One request through the gateway at `addr` (a fresh connection each, as a client after a
/// pod's end would open): status and body text.
async fn raw_call(addr: SocketAddr, method: &str, path: &str, headers: String, body: String) -> (u16, String) {
    let (method, path) = (method.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || sandpool_tests::http(&addr.to_string(), &method, &path, &headers, &body))
        .await
        .expect("http")
}

fn api_key() -> String {
    format!("X-API-KEY: {TENANT_KEY}\r\n")
}

fn envd(id: &str, token: &str) -> String {
    format!("E2b-Sandbox-Id: {id}\r\nE2b-Sandbox-Port: 49983\r\nX-Access-Token: {token}\r\n")
}

/// Creates a code-interpreter sandbox through the gateway, with a file and a variable; its
/// id and access token.
async fn sandbox_with_state(g: SocketAddr, n: u32) -> (String, String) {
    sandbox_with_state_on(g, n, "mv-a").await
}

/// [`sandbox_with_state`] on the executor named `on` (the only one behind `g`).
async fn sandbox_with_state_on(g: SocketAddr, n: u32, on: &str) -> (String, String) {
    let (code, v) = raw_call(
        g,
        "POST",
        "/v2/sandboxes",
        api_key(),
        r#"{"templateID":"code-interpreter-v1"}"#.into(),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let v: serde_json::Value = serde_json::from_str(&v).expect("JSON");
    let id = v["sandboxID"].as_str().expect("sandboxID").to_owned();
    let token = v["envdAccessToken"].as_str().expect("envdAccessToken").to_owned();
    assert!(
        id.ends_with(&format!("-{on}")),
        "created on {on}, the only one up: {id}"
    );
    let put = format!("/files?path=/home/user/kept-{n}.txt");
    let (code, v) = raw_call(g, "POST", &put, envd(&id, &token), format!("kept {n}")).await;
    assert!(code < 300, "{code} {v}");
    let cell = serde_json::json!({"code": format!("x = {}", 40 + n)}).to_string();
    let (code, v) = raw_call(g, "POST", "/execute", envd(&id, &token), cell).await;
    assert_eq!(code, 200, "{v}");
    (id, token)
}

/// Issue 47, items 2 and 4: an E2B sandbox made through the gateway on executor A outlives
/// A. SIGTERM pauses it into the store the executors share and A exits; the next calls
/// through the gateway (E2B `connect`, then the data plane with the token from before the
/// drain, and a data-plane call as the very first one) resume each on B, with its file
/// and its interpreter's variable, and the gateway keeps sending the sandbox there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_pods_sandboxes_continue_on_another_through_the_gateway() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).expect("store dir");
    let a = named_executor("mv-a", dir.path(), &store).await;
    let a_http: SocketAddr = a.http_addr.clone().expect("http").parse().expect("addr");
    // Only A at first, so both sandboxes are made there.
    let ga = gateway(&[("mv-a", a_http)], &[]).await;
    let (s1, t1) = sandbox_with_state(ga.addr, 1).await;
    let (s2, t2) = sandbox_with_state(ga.addr, 2).await;
    let b = named_executor("mv-b", dir.path(), &store).await;
    let b_http: SocketAddr = b.http_addr.clone().expect("http").parse().expect("addr");
    let g = gateway(&[("mv-a", a_http), ("mv-b", b_http)], &[]).await.addr;
    let (code, _) = raw_call(g, "GET", &format!("/sandboxes/{s1}"), api_key(), String::new()).await;
    assert_eq!(code, 200, "on A, through the pool's gateway");

    drain_and_stop(a).await;

    // connect: resumed on B, the gateway's answer says so.
    let (code, v) = raw_call(
        g,
        "POST",
        &format!("/v2/sandboxes/{s1}/connect"),
        api_key(),
        r#"{"timeout":60}"#.into(),
    )
    .await;
    assert_eq!(code, 201, "resumed on connect: {v}");
    for (path, body, want) in [
        ("/files?path=/home/user/kept-1.txt", String::new(), "kept 1"),
        (
            "/execute",
            serde_json::json!({"code": "print(x + 1)"}).to_string(),
            "\"text\":\"42\\n\"",
        ),
    ] {
        let method = if body.is_empty() { "GET" } else { "POST" };
        let (code, v) = raw_call(g, method, path, envd(&s1, &t1), body).await;
        assert_eq!(code, 200, "{path}: {v}");
        assert!(v.contains(want), "{path}: {v}");
    }
    let (code, v) = raw_call(g, "GET", &format!("/sandboxes/{s1}"), api_key(), String::new()).await;
    assert_eq!(code, 200, "{v}");

    // The data plane first, with no tenant (only the sandbox's token): B finds it in the
    // store under the tenants it serves, and resumes it only for one of its own tokens.
    let cell = serde_json::json!({"code": "print(x + 1)"}).to_string();
    for wrong in [t1.clone(), format!("{}x", &t2[..31])] {
        let (code, v) = raw_call(g, "POST", "/execute", envd(&s2, &wrong), cell.clone()).await;
        assert_eq!(code, 502, "another token resumes nothing: {v}");
        assert!(v.contains("was not found"), "{v}");
    }
    let (code, v) = raw_call(g, "POST", "/execute", envd(&s2, &t2), cell).await;
    assert_eq!(code, 200, "resumed by its data plane: {v}");
    assert!(v.contains("\"text\":\"43\\n\""), "{v}");
    let (code, v) = raw_call(
        g,
        "GET",
        "/files?path=/home/user/kept-2.txt",
        envd(&s2, &t2),
        String::new(),
    )
    .await;
    assert_eq!((code, v.as_str()), (200, "kept 2"));
    drop(b);
}

/// Issue 47 item 4: calls that reach a pod while it drains. Its sessions' next calls come
/// while the drain is still pausing them (the pod is terminating, not gone); each must be
/// answered: by A while the session is live there, else refused unrun once it is in the
/// store and resumed on B by the gateway's retry. None may reach B before A has stored it
/// (B would not find it: the bug this test was written on, with A's ports closed at
/// SIGTERM). Big files make the drain take long enough for the calls to land inside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_during_a_drain_are_answered_and_none_is_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).expect("store dir");
    let mut a = named_executor("dr-a", dir.path(), &store).await;
    let a_http: SocketAddr = a.http_addr.clone().expect("http").parse().expect("addr");
    let ga = gateway(&[("dr-a", a_http)], &[]).await;
    let mut sandboxes = Vec::new();
    for n in 1..=4u32 {
        let (id, token) = sandbox_with_state_on(ga.addr, n, "dr-a").await;
        let cell = serde_json::json!({"code": "import os\nopen('big', 'wb').write(os.urandom(12 << 20))"});
        let (code, v) = raw_call(ga.addr, "POST", "/execute", envd(&id, &token), cell.to_string()).await;
        assert_eq!(code, 200, "{v}");
        sandboxes.push((n, id, token));
    }
    let b = named_executor("dr-b", dir.path(), &store).await;
    let b_http: SocketAddr = b.http_addr.clone().expect("http").parse().expect("addr");
    // The gateway still lists A (as it does a terminating pod's endpoint).
    let g = gateway(&[("dr-a", a_http), ("dr-b", b_http)], &[]).await.addr;

    a.signal(libc::SIGTERM);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let calls = sandboxes.iter().map(|(n, id, token)| {
        let cell = serde_json::json!({"code": "print(x + 1, len(open('big', 'rb').read()))"}).to_string();
        let want = format!("{} {}", 41 + n, 12 << 20);
        let (id, token) = (id.clone(), token.clone());
        async move {
            let (code, v) = raw_call(g, "POST", "/execute", envd(&id, &token), cell).await;
            (id, want, code, v)
        }
    });
    for (id, want, code, v) in futures::future::join_all(calls).await {
        assert_eq!(code, 200, "{id}: {v}");
        assert!(v.contains(&want), "{id}: wanted {want:?} in {v}");
    }
    let status = tokio::task::spawn_blocking(move || a.wait_exit(Duration::from_secs(120)))
        .await
        .expect("join");
    assert!(status.is_some_and(|s| s.success()), "A exited badly: {status:?}");
    // Every one is on B now, with its state.
    for (n, id, token) in &sandboxes {
        let cell = serde_json::json!({"code": "print(x + 2)"}).to_string();
        let (code, v) = raw_call(g, "POST", "/execute", envd(id, token), cell).await;
        assert_eq!(code, 200, "{id}: {v}");
        assert!(v.contains(&format!("\"text\":\"{}\\n\"", 42 + n)), "{id}: {v}");
    }
    drop(b);
}

// ---------------------------------------------------------------------------------------
// The unmodified E2B SDK through the gateway (issue 47's "Done when")

/// Runs scripts/e2b-sdk-lifecycle.py (the unmodified `e2b` / `e2b-code-interpreter` SDKs from
/// the repository's `.venv`, or `SANDPOOL_E2B_PYTHON`; never skipped) against the gateway at
/// `g`: whether it succeeded, and its output.
async fn sdk_lifecycle(g: SocketAddr) -> (bool, String) {
    let py = std::env::var("SANDPOOL_E2B_PYTHON")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../.venv/bin/python").to_owned());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/e2b-sdk-lifecycle.py");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("timeout")
            .args(["300", &py, script, &format!("http://{g}")])
            .env("E2B_API_KEY", TENANT_KEY)
            .output()
            .expect("running python")
    })
    .await
    .expect("python");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("e2b-sdk: FAILED import"),
        "make the venv (scripts/test.sh) or set SANDPOOL_E2B_PYTHON: {text}"
    );
    (out.status.success(), text)
}

/// Issue 47's "Done when", through the gateway: the unmodified E2B SDKs pause (both modes),
/// resume on `connect`, auto-pause at the timeout and resume on the next call,
/// `create_snapshot()`, `Sandbox.create(snapshot_id)` and `delete_snapshot`, through a
/// gateway over two executors sharing one store; the two copies of the snapshot start one on
/// each executor, so one is restored by the executor that did not take it. Over executors
/// with stores of their own that copy is not found, and the script says where it failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unmodified_e2b_sdk_pauses_resumes_and_snapshots_through_the_gateway() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).expect("store dir");
    let a = named_executor("sdk-a", dir.path(), &store).await;
    let b = named_executor("sdk-b", dir.path(), &store).await;
    let addr =
        |e: &sandpool_tests::Executor| -> SocketAddr { e.http_addr.clone().expect("http").parse().expect("addr") };
    let g = gateway(&[("sdk-a", addr(&a)), ("sdk-b", addr(&b))], &[]).await;
    let (ok, out) = sdk_lifecycle(g.addr).await;
    let last = out.lines().find(|l| l.starts_with("e2b-sdk: ok ")).unwrap_or_default();
    assert!(
        ok && last.contains(" autopause=paused,resumed ")
            && last.contains(" fork=2 ")
            && last.contains(" executors=sdk-a,sdk-b "),
        "{out}"
    );

    // The same over A and an executor with a store of its own: the copy started there
    // cannot find A's snapshot.
    let own = dir.path().join("own-store");
    std::fs::create_dir_all(&own).expect("store dir");
    let c = named_executor("sdk-c", dir.path(), &own).await;
    let g = gateway(&[("sdk-a", addr(&a)), ("sdk-c", addr(&c))], &[]).await;
    let (ok, out) = sdk_lifecycle(g.addr).await;
    assert!(!ok && out.contains("e2b-sdk: FAILED from-snapshot: "), "{out}");
    drop((a, b, c));
}

/// Issue 47 item 4 on an open pool (no tenants): a sandbox's owner is what its caller sent
/// (E2B's API key), which a data-plane call does not carry, so an executor could resume a
/// drain-paused sandbox only on its `connect`. The record now holds the owner sealed under
/// the access token: the first data-plane call after the drain resumes it on B, for its
/// token only, and the owner is still the caller's (another key cannot reach it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_pools_drained_sandbox_resumes_from_its_data_plane_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).expect("store dir");
    let open = |name: &str| {
        sandpool_tests::Executor::start(sandpool_tests::Options {
            slots: 2,
            languages: vec!["python", "bash"],
            http: true,
            env: vec![("SANDPOOL_NAME".into(), name.into())],
            extra_args: vec!["--session-store-dir".into(), store.display().to_string()],
            ..Default::default()
        })
    };
    let a = open("op-a").await;
    let addr =
        |e: &sandpool_tests::Executor| -> SocketAddr { e.http_addr.clone().expect("http").parse().expect("addr") };
    let ga = gateway(&[("op-a", addr(&a))], &[]).await;
    let owner = "X-API-KEY: open-pool-key\r\n".to_string();
    let (code, v) = raw_call(
        ga.addr,
        "POST",
        "/v2/sandboxes",
        owner.clone(),
        r#"{"templateID":"code-interpreter-v1"}"#.into(),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let v: serde_json::Value = serde_json::from_str(&v).expect("JSON");
    let (id, token) = (
        v["sandboxID"].as_str().expect("id").to_owned(),
        v["envdAccessToken"].as_str().expect("token").to_owned(),
    );
    let cell = serde_json::json!({"code": "x = 41"}).to_string();
    let (code, v) = raw_call(ga.addr, "POST", "/execute", envd(&id, &token), cell).await;
    assert_eq!(code, 200, "{v}");
    let b = open("op-b").await;
    let g = gateway(&[("op-a", addr(&a)), ("op-b", addr(&b))], &[]).await.addr;
    drain_and_stop(a).await;
    // Another token resumes nothing.
    let cell = serde_json::json!({"code": "print(x + 1)"}).to_string();
    let (code, v) = raw_call(
        g,
        "POST",
        "/execute",
        envd(&id, &format!("{}x", &token[..31])),
        cell.clone(),
    )
    .await;
    assert_eq!(code, 502, "{v}");
    let (code, v) = raw_call(g, "POST", "/execute", envd(&id, &token), cell).await;
    assert_eq!(code, 200, "resumed on B by its data-plane call: {v}");
    assert!(v.contains("\"text\":\"42\\n\""), "{v}");
    // Still the caller's: its key reaches it, another's does not.
    let (code, v) = raw_call(g, "GET", &format!("/sandboxes/{id}"), owner, String::new()).await;
    assert_eq!(code, 200, "{v}");
    let (code, v) = raw_call(
        g,
        "GET",
        &format!("/sandboxes/{id}"),
        "X-API-KEY: another-key\r\n".into(),
        String::new(),
    )
    .await;
    assert_eq!(code, 404, "{v}");
    drop(b);
}
