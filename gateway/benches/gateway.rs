//! The gateway's cost, measured in one run: HumanEval-sized `/run_code` Python programs at
//! concurrency 16, first straight to two in-process executors (8 clients each), then
//! through the gateway (16 clients); then sequential requests alternating direct and
//! through the gateway for the latency it adds. Needs root (the executors' sandboxes).
//!
//! `cargo bench -p sandpool-gateway --bench gateway`; `SANDPOOL_BENCH_REQUESTS` (default
//! 400) requests per concurrent phase, `SANDPOOL_BENCH_ROUNDS` (default 4) phases per side,
//! `SANDPOOL_BENCH_SEQUENTIAL` (default 100) sequential pairs.

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use sandpool_executor::config::ServerArgs;
use sandpool_executor::server::{ServeOptions, serve_with_http};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const PROGRAM: &str = r#"
def has_close_elements(numbers, threshold):
    for i, a in enumerate(numbers):
        for j, b in enumerate(numbers):
            if i != j and abs(a - b) < threshold:
                return True
    return False

assert has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3)
assert not has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05)
print(sum(range(1000)))
"#;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn start_executor(name: &str, index: u32) -> SocketAddr {
    let pid = std::process::id();
    let work_root = std::env::temp_dir().join(format!("sandpool-gateway-bench-{pid}-{index}"));
    // 100 uids per executor: its slots, then its session seats.
    let uid_base = 98_000 + index * 100;
    let args = ServerArgs::parse_from([
        "sandpool-executor".to_string(),
        "--work-root".into(),
        work_root.display().to_string(),
        "--uid-base".into(),
        uid_base.to_string(),
        "--enable-languages".into(),
        "python".into(),
        "--queue".into(),
        "64".into(),
    ]);
    let name = name.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async move {
            let ex = &args.executor;
            let mut table = sandpool_executor::languages::LanguageTable::load(None).expect("table");
            table.retain(&["python".to_string()]);
            let sandbox = sandpool_executor::sandbox::open(ex.sandbox_config()).expect("sandbox (run as root)");
            let mut cfg = ex.engine_config();
            cfg.identity.name = name;
            let engine = Arc::new(sandpool_executor::Engine::new(sandbox, table, cfg).await);
            let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let opts = ServeOptions::local(grpc.local_addr().expect("addr"), ex.session_policy());
            tx.send(http.local_addr().expect("addr")).expect("send");
            serve_with_http(engine, grpc, Some(http), opts, std::future::pending())
                .await
                .expect("serve");
        });
    });
    rx.recv_timeout(Duration::from_secs(300)).expect("executor started")
}

struct Client {
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Client {
    async fn open(addr: SocketAddr) -> Client {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let _ = tcp.set_nodelay(true);
        let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        Client { send }
    }

    /// One `GET /v1/ping` (no run: the hop alone); its latency.
    async fn ping(&mut self) -> Duration {
        let req = http::Request::get("/v1/ping")
            .header("host", "bench")
            .body(Full::new(Bytes::new()))
            .expect("request");
        let t = Instant::now();
        self.send.ready().await.expect("ready");
        let resp = self.send.send_request(req).await.expect("response");
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.expect("body");
        t.elapsed()
    }

    /// One `/run_code`; its latency.
    async fn run(&mut self, body: &Bytes) -> Duration {
        let req = http::Request::post("/run_code")
            .header("host", "bench")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .expect("request");
        let t = Instant::now();
        self.send.ready().await.expect("ready");
        let resp = self.send.send_request(req).await.expect("response");
        let status = resp.status();
        let b = resp.into_body().collect().await.expect("body").to_bytes();
        let took = t.elapsed();
        assert!(
            status == 200 && b.windows(9).any(|w| w == b"\"Success\""),
            "{status}: {}",
            String::from_utf8_lossy(&b)
        );
        took
    }
}

/// `n` requests by one client per address in `addrs`; requests per second and latencies.
async fn phase(addrs: &[SocketAddr], n: usize, body: &Bytes) -> (f64, Vec<Duration>) {
    let left = Arc::new(AtomicUsize::new(n));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for &a in addrs {
        let (left, body) = (left.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Client::open(a).await;
            let mut lat = Vec::new();
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                .is_ok()
            {
                lat.push(c.run(&body).await);
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client"));
    }
    (n as f64 / t.elapsed().as_secs_f64(), all)
}

fn p50(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

#[tokio::main]
async fn main() {
    let n = env_or("SANDPOOL_BENCH_REQUESTS", 400);
    let seq = env_or("SANDPOOL_BENCH_SEQUENTIAL", 100);
    let rounds = env_or("SANDPOOL_BENCH_ROUNDS", 4).max(1);
    let (a, b) = (start_executor("bench-a", 0), start_executor("bench-b", 1));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let metrics_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let gw = listener.local_addr().expect("addr");
    let args = sandpool_gateway::Args::parse_from([
        "sandpool-gateway".to_string(),
        "--backend".into(),
        format!("bench-a={a}"),
        "--backend".into(),
        format!("bench-b={b}"),
    ]);
    tokio::spawn(sandpool_gateway::run(
        args,
        listener,
        metrics_listener,
        std::future::pending(),
    ));
    let body = Bytes::from(serde_json::json!({"code": PROGRAM, "language": "python"}).to_string());

    // Warm both executors (zygotes, page cache) and the gateway's upstream pool.
    phase(&[a, b, gw, gw], 32, &body).await;

    // Rounds in alternating order (direct first, then gateway first, ...): a machine
    // shared with other work drifts, and drift then weighs on both sides alike.
    let direct: Vec<SocketAddr> = (0..16).map(|i| if i % 2 == 0 { a } else { b }).collect();
    let (mut direct_s, mut gw_s) = (0.0, 0.0);
    let (mut direct_lat, mut gw_lat) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for side in [round % 2, 1 - round % 2] {
            let (addrs, secs, lat) = if side == 0 {
                (&direct[..], &mut direct_s, &mut direct_lat)
            } else {
                (&[gw; 16][..], &mut gw_s, &mut gw_lat)
            };
            let (rps, l) = phase(addrs, n, &body).await;
            *secs += n as f64 / rps;
            lat.extend(l);
        }
    }
    let (direct_rps, gw_rps) = ((n * rounds) as f64 / direct_s, (n * rounds) as f64 / gw_s);

    // Sequential, alternating, so drift hits both sides alike.
    let (mut cd, mut cg) = (Client::open(a).await, Client::open(gw).await);
    let (mut sd, mut sg) = (Vec::new(), Vec::new());
    for i in 0..seq {
        if i % 2 == 0 {
            sd.push(cd.run(&body).await);
            sg.push(cg.run(&body).await);
        } else {
            sg.push(cg.run(&body).await);
            sd.push(cd.run(&body).await);
        }
    }
    let (pd, pg) = (p50(&mut sd), p50(&mut sg));
    let (mut pingd, mut pingg) = (Vec::new(), Vec::new());
    for _ in 0..seq * 10 {
        pingd.push(cd.ping().await);
        pingg.push(cg.ping().await);
    }
    let (qd, qg) = (p50(&mut pingd), p50(&mut pingg));
    println!("requests per phase: {n}, concurrency 16, {rounds} rounds per side; sequential pairs: {seq}");
    println!("direct:  {direct_rps:8.1} req/s  p50 {:?}", p50(&mut direct_lat));
    println!("gateway: {gw_rps:8.1} req/s  p50 {:?}", p50(&mut gw_lat));
    println!(
        "throughput ratio (gateway / direct): {:.3}  (target >= 0.9)",
        gw_rps / direct_rps
    );
    println!(
        "sequential p50: direct {pd:?}, gateway {pg:?}; added {:.3} ms  (target <= 1 ms)",
        (pg.as_secs_f64() - pd.as_secs_f64()) * 1000.0
    );
    println!(
        "/v1/ping p50 ({} pairs): direct {qd:?}, gateway {qg:?}; added {:.3} ms",
        seq * 10,
        (qg.as_secs_f64() - qd.as_secs_f64()) * 1000.0
    );
}
