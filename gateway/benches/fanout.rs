//! The front door at fan-out (issue 50), measured in one run, every figure against a
//! baseline of the same run. The gateway runs as its own process (the built
//! `sandpool-gateway` binary), so its memory is its own.
//!
//! 1. **Throughput over N real executors** (in-process, `--slots` each): `/run_code` straight
//!    to the executors (clients split evenly) against the same number of clients through the
//!    gateway, rounds in alternating order. Target: ratio ≥ 0.9.
//! 2. **One slow executor of 8**: loopback stand-ins that hold one of their slots for a fixed
//!    time per request (CPU-free, so the machine's two cores measure the spreading, not the
//!    runs); the pool's throughput through the gateway with all 8 at speed, then with one 10x
//!    slower. Target: it falls by no more than that executor's share (1/8).
//! 3. **Added latency per call**: sequential `GET /v1/ping` to a real executor, alternating
//!    direct and through the gateway; p50 and p99 of each.
//! 4. **Memory with 1,000 endpoints**: the gateway over 1,000 stand-ins, its RSS at rest and
//!    after requests reached every one of them.
//! 5. **Two replicas, one session**: two gateways with the same backends listed in different
//!    orders, no state shared; every session id reaches the executor it names through both.
//!
//! Needs root (the executors' sandboxes). `cargo bench -p sandpool-gateway --bench fanout`;
//! `SANDPOOL_BENCH_EXECUTORS` (4), `SANDPOOL_BENCH_SLOTS` (1), `SANDPOOL_BENCH_REQUESTS` (200
//! per phase), `SANDPOOL_BENCH_ROUNDS` (2), `SANDPOOL_BENCH_PINGS` (2000),
//! `SANDPOOL_BENCH_ENDPOINTS` (1000).

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

const HEX: &str = "0123456789abcdef0123456789abcdef";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

// ---------------------------------------------------------------------------------------
// Executors, stand-ins and the gateway process

fn start_executor(name: &str, index: u32, slots: usize) -> SocketAddr {
    let pid = std::process::id();
    let work_root = std::env::temp_dir().join(format!("sandpool-fanout-bench-{pid}-{index}"));
    // 100 uids per executor: its slots, then its session seats.
    let uid_base = 120_000 + index * 100;
    let args = ServerArgs::parse_from([
        "sandpool-executor".to_string(),
        "--work-root".into(),
        work_root.display().to_string(),
        "--uid-base".into(),
        uid_base.to_string(),
        "--enable-languages".into(),
        "python".into(),
        "--slots".into(),
        slots.to_string(),
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

/// A stand-in executor named `name`: `POST /run_code` holds one of `slots` places for
/// `hold` (a queue beyond them, as an executor's), then answers; anything else is answered
/// at once with the name.
async fn stand_in(name: String, slots: usize, hold: Duration) -> SocketAddr {
    let sem = Arc::new(tokio::sync::Semaphore::new(slots));
    let app = axum::Router::new()
        .route(
            "/run_code",
            axum::routing::post(move || {
                let sem = sem.clone();
                async move {
                    let _slot = sem.acquire().await.expect("semaphore");
                    tokio::time::sleep(hold).await;
                    r#"{"status":"Success"}"#
                }
            }),
        )
        .fallback(move || {
            let name = name.clone();
            async move { name }
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A free loopback port (bound, then released for the gateway to take).
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
}

/// The `sandpool-gateway` binary, running until dropped.
struct Gateway {
    addr: SocketAddr,
    child: std::process::Child,
}

impl Gateway {
    async fn start(backends: &[(String, SocketAddr)]) -> Gateway {
        let (addr, metrics) = (free_addr(), free_addr());
        let list: Vec<String> = backends.iter().map(|(n, a)| format!("{n}={a}")).collect();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_sandpool-gateway"))
            .args(["--listen", &addr.to_string(), "--metrics-listen", &metrics.to_string()])
            .env("SANDPOOL_GATEWAY_BACKENDS", list.join(","))
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start sandpool-gateway");
        let started = Instant::now();
        loop {
            if let Ok(tcp) = tokio::net::TcpStream::connect(metrics).await {
                drop(tcp);
                let mut c = Client::open(metrics).await;
                if c.get("/readyz").await.0 == 200 {
                    break;
                }
            }
            assert!(started.elapsed() < Duration::from_secs(30), "gateway not ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Gateway { addr, child }
    }

    /// `VmRSS` and `VmHWM` of the gateway process, KiB.
    fn rss_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        let field = |f: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(f))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------
// A client

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

    async fn send(&mut self, req: http::Request<Full<Bytes>>) -> (u16, Bytes) {
        self.send.ready().await.expect("ready");
        let resp = self.send.send_request(req).await.expect("response");
        let status = resp.status().as_u16();
        (status, resp.into_body().collect().await.expect("body").to_bytes())
    }

    /// `GET path`, with more headers.
    async fn get_with(&mut self, path: &str, headers: &[(&str, &str)]) -> (u16, Bytes) {
        let mut req = http::Request::get(path).header("host", "bench");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req.body(Full::new(Bytes::new())).expect("request")).await
    }

    async fn get(&mut self, path: &str) -> (u16, Bytes) {
        self.get_with(path, &[]).await
    }

    /// One `/v1/ping` (no run: the hop alone); its latency.
    async fn ping(&mut self) -> Duration {
        let t = Instant::now();
        let (status, _) = self.get("/v1/ping").await;
        assert_eq!(status, 200);
        t.elapsed()
    }

    /// One `/run_code`, which must succeed.
    async fn run(&mut self, body: &Bytes) {
        let req = http::Request::post("/run_code")
            .header("host", "bench")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .expect("request");
        let (status, b) = self.send(req).await;
        assert!(
            status == 200 && b.windows(9).any(|w| w == b"\"Success\""),
            "{status}: {}",
            String::from_utf8_lossy(&b)
        );
    }
}

/// `n` `/run_code`s by one keep-alive client per address in `addrs`; requests per second.
async fn phase(addrs: &[SocketAddr], n: usize, body: &Bytes) -> f64 {
    let left = Arc::new(AtomicUsize::new(n));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for &a in addrs {
        let (left, body) = (left.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Client::open(a).await;
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                .is_ok()
            {
                c.run(&body).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// Completed `/run_code`s per second over `dur`, by one client per address; what is still in
/// flight at the end is not counted (so a slow executor's last answers do not stretch the window).
async fn timed_phase(addrs: &[SocketAddr], dur: Duration, body: &Bytes) -> f64 {
    let done = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + dur;
    let mut tasks = Vec::new();
    for &a in addrs {
        let (done, body) = (done.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Client::open(a).await;
            while Instant::now() < end {
                c.run(&body).await;
                if Instant::now() <= end {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    done.load(Ordering::Relaxed) as f64 / dur.as_secs_f64()
}

fn quantile(v: &mut [Duration], q: f64) -> Duration {
    v.sort_unstable();
    let i = ((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1));
    v.get(i).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------
// The phases

/// 1: N real executors, direct against through the gateway.
async fn real_executors(n_exec: usize, slots: usize, n: usize, rounds: usize) -> SocketAddr {
    let execs: Vec<(String, SocketAddr)> = (0..n_exec)
        .map(|i| {
            let name = format!("fan-{i}");
            let a = start_executor(&name, i as u32, slots);
            (name, a)
        })
        .collect();
    let gw = Gateway::start(&execs).await;
    let body = Bytes::from(serde_json::json!({"code": PROGRAM, "language": "python"}).to_string());
    // Two clients per slot in the pool, so every executor has a queue, direct or not.
    let clients = 2 * n_exec * slots;
    let direct: Vec<SocketAddr> = (0..clients).map(|i| execs[i % n_exec].1).collect();
    let through = vec![gw.addr; clients];
    phase(&direct, clients * 2, &body).await; // warm the zygotes and the page cache
    phase(&through, clients * 2, &body).await;
    let (mut direct_s, mut gw_s) = (0.0, 0.0);
    for round in 0..rounds {
        for side in [round % 2, 1 - round % 2] {
            if side == 0 {
                direct_s += n as f64 / phase(&direct, n, &body).await;
            } else {
                gw_s += n as f64 / phase(&through, n, &body).await;
            }
        }
    }
    let total = (n * rounds) as f64;
    let (d, g) = (total / direct_s, total / gw_s);
    println!(
        "1. {n_exec} real executors x {slots} slot(s), {clients} clients, {n} requests x {rounds} rounds per side"
    );
    println!("   direct (clients split evenly): {d:7.1} req/s");
    println!("   through the gateway:           {g:7.1} req/s");
    println!("   ratio gateway/direct: {:.3}  (target >= 0.9)", g / d);
    execs[0].1
}

/// 2: one slow stand-in of 8.
async fn one_slow_of_eight(n: usize) {
    const SLOTS: usize = 2;
    let hold = Duration::from_millis(20);
    let mut fast = Vec::new();
    for i in 0..8 {
        fast.push((format!("fast-{i}"), stand_in(format!("fast-{i}"), SLOTS, hold).await));
    }
    let mut slowed = fast.clone();
    slowed[7] = ("slow-7".into(), stand_in("slow-7".into(), SLOTS, hold * 10).await);
    // Twice the pool's slots, so executors queue and a slow one could collect clients.
    let clients = 2 * 8 * SLOTS;
    let body = Bytes::from_static(b"{}");
    let window = Duration::from_secs(4);
    let measure = |set: Vec<(String, SocketAddr)>| {
        let body = body.clone();
        async move {
            let gw = Gateway::start(&set).await;
            phase(&vec![gw.addr; clients], n / 4, &body).await;
            timed_phase(&vec![gw.addr; clients], window, &body).await
        }
    };
    let all = measure(fast.clone()).await;
    let one = measure(slowed).await;
    // For comparison, per connection as a ClusterIP Service spreads: each client stays on
    // the executor its connection was placed on.
    let pinned: Vec<SocketAddr> = (0..clients).map(|i| fast[i % 8].1).collect();
    let mut pinned_slow = pinned.clone();
    let slow_addr = stand_in("slow-x".into(), SLOTS, hold * 10).await;
    for (i, a) in pinned_slow.iter_mut().enumerate() {
        if i % 8 == 7 {
            *a = slow_addr;
        }
    }
    let pinned_rps = timed_phase(&pinned_slow, window, &body).await;
    let ideal = 7.0 / 8.0 + 1.0 / 80.0;
    println!(
        "2. 8 stand-ins x {SLOTS} slots, {} ms a request; one 10x slower; {clients} clients through the gateway",
        hold.as_millis()
    );
    println!("   all at speed:        {all:7.1} req/s");
    println!(
        "   one slow:            {one:7.1} req/s  ratio {:.3}  (target >= 0.875, its share gone; ideal {ideal:.3})",
        one / all
    );
    println!(
        "   per connection (each client pinned, as a ClusterIP Service does), one slow: {pinned_rps:7.1} req/s  ratio {:.3}",
        pinned_rps / all
    );
}

/// 3: the latency the gateway adds to a call.
async fn added_latency(exec: SocketAddr, pings: usize) {
    let gw = Gateway::start(&[("lat-0".into(), exec)]).await;
    let (mut cd, mut cg) = (Client::open(exec).await, Client::open(gw.addr).await);
    for _ in 0..100 {
        cd.ping().await;
        cg.ping().await;
    }
    let (mut d, mut g) = (Vec::new(), Vec::new());
    for i in 0..pings {
        if i % 2 == 0 {
            d.push(cd.ping().await);
            g.push(cg.ping().await);
        } else {
            g.push(cg.ping().await);
            d.push(cd.ping().await);
        }
    }
    let (d50, d99) = (quantile(&mut d, 0.5), quantile(&mut d, 0.99));
    let (g50, g99) = (quantile(&mut g, 0.5), quantile(&mut g, 0.99));
    println!("3. GET /v1/ping to a real executor, {pings} sequential pairs");
    println!("   direct:  p50 {:.3} ms  p99 {:.3} ms", ms(d50), ms(d99));
    println!("   gateway: p50 {:.3} ms  p99 {:.3} ms", ms(g50), ms(g99));
    println!(
        "   added:   p50 {:.3} ms  p99 {:.3} ms",
        ms(g50) - ms(d50),
        ms(g99) - ms(d99)
    );
}

/// 4: the gateway's memory over 1,000 endpoints.
async fn thousand_endpoints(endpoints: usize) {
    let mut set = Vec::new();
    for i in 0..endpoints {
        let name = format!("ep-{i:04}");
        set.push((name.clone(), stand_in(name, 4, Duration::from_millis(1)).await));
    }
    let gw = Gateway::start(&set).await;
    let (rest, _) = gw.rss_kib();
    // Enough requests at once that every endpoint gets some (least outstanding, ties in
    // turn), so the gateway holds a connection to each.
    let body = Bytes::from_static(b"{}");
    phase(&vec![gw.addr; 64], endpoints * 4, &body).await;
    let (after, peak) = gw.rss_kib();
    println!("4. the gateway over {endpoints} stand-in endpoints");
    println!(
        "   RSS at rest {:.1} MiB; after {} requests over all of them {:.1} MiB (peak {:.1} MiB)",
        rest as f64 / 1024.0,
        endpoints * 4,
        after as f64 / 1024.0,
        peak as f64 / 1024.0
    );
}

/// 5: two replicas route each session id to the same executor.
async fn two_replicas() {
    let mut set = Vec::new();
    for i in 0..8 {
        let name = format!("pod-{i}");
        set.push((name.clone(), stand_in(name, 1, Duration::ZERO).await));
    }
    let mut reversed = set.clone();
    reversed.reverse();
    let (g1, g2) = (Gateway::start(&set).await, Gateway::start(&reversed).await);
    let (mut c1, mut c2) = (Client::open(g1.addr).await, Client::open(g2.addr).await);
    let (mut same, mut total) = (0, 0);
    for k in 0..200 {
        let id = format!("{HEX}-pod-{}", (k * 7) % 8);
        let h = [("X-Sandpool-Session", id.as_str())];
        let (a, b) = (c1.get_with("/files", &h).await, c2.get_with("/files", &h).await);
        total += 1;
        let want = id.rsplit_once("-pod-").map(|(_, n)| format!("pod-{n}"));
        if a == b && a.0 == 200 && Some(String::from_utf8_lossy(&a.1).into_owned()) == want {
            same += 1;
        }
    }
    println!("5. two gateway replicas (backends listed in opposite orders, nothing shared)");
    println!("   session ids routed to the executor they name by both: {same}/{total}");
}

#[tokio::main]
async fn main() {
    let n_exec = env_or("SANDPOOL_BENCH_EXECUTORS", 4).max(1);
    let slots = env_or("SANDPOOL_BENCH_SLOTS", 1).max(1);
    let n = env_or("SANDPOOL_BENCH_REQUESTS", 200).max(1);
    let rounds = env_or("SANDPOOL_BENCH_ROUNDS", 2).max(1);
    let pings = env_or("SANDPOOL_BENCH_PINGS", 2000).max(1);
    let endpoints = env_or("SANDPOOL_BENCH_ENDPOINTS", 1000).max(1);
    let exec = real_executors(n_exec, slots, n, rounds).await;
    one_slow_of_eight(n * 4).await;
    added_latency(exec, pings).await;
    thousand_endpoints(endpoints).await;
    two_replicas().await;
}
