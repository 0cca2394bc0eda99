//! Requests as an attacker shapes them, against the real executor over
//! loopback: what a request may cost the server (paths, fetches, slow HTTP
//! clients), mistakes that must be INVALID_ARGUMENT rather than
//! SANDBOX_ERROR, the bearer token, bad-case capture, and draining.
//!
//! Every setting is given by environment, so that the same tests run
//! against an older binary (`SANDPOOL_EXECUTOR_BIN`) and show what it got wrong.

use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Options, binary, describe, http, request, stdout};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

async fn python(http: bool, vars: &[(&str, &str)]) -> Executor {
    Executor::start(Options {
        slots: 2,
        languages: vec!["python"],
        http,
        env: env(vars),
        ..Default::default()
    })
    .await
}

fn code_of(r: &Result<tonic::Response<pb::ExecuteResponse>, tonic::Status>) -> String {
    match r {
        Ok(r) => format!("OK {}", describe(r.get_ref())),
        Err(s) => format!("{:?}: {}", s.code(), s.message()),
    }
}

/// Asserts INVALID_ARGUMENT naming `field`.
fn assert_invalid(r: &Result<tonic::Response<pb::ExecuteResponse>, tonic::Status>, field: &str) {
    match r {
        Err(s) if s.code() == tonic::Code::InvalidArgument => {
            assert!(s.message().contains(field), "{field} not named: {}", s.message())
        }
        other => panic!("expected INVALID_ARGUMENT naming {field}, got {}", code_of(other)),
    }
}

/// A path `depth` directories deep, about `2 * depth` bytes.
fn deep_path(depth: usize) -> String {
    let mut p = "a/".repeat(depth);
    p.push('x');
    p
}

/// Finding 3: two 300 KB requests of deep paths froze both ports for minutes
/// (quadratic validation and writing, on the async runtime). They must be
/// answered at once, while a trivial request sent after them still runs.
#[tokio::test]
async fn deep_paths_are_refused_at_once_and_do_not_stall_other_requests() {
    let exe = python(true, &[]).await;
    let deep = deep_path(150_000);
    let file_req = pb::ExecuteRequest {
        files: vec![pb::File {
            path: deep.clone(),
            content: vec![],
            executable: false,
        }],
        ..request("python", "print(1)", "")
    };
    let fetch_req = pb::ExecuteRequest {
        fetch_files: vec![deep.clone()],
        ..request("python", "print(1)", "")
    };
    let t = Instant::now();
    let (mut c1, mut c2, mut c3) = (exe.client(), exe.client(), exe.client());
    let attack = async move {
        let (a, b) = tokio::join!(c1.execute(file_req), c2.execute(fetch_req));
        (a, b, t.elapsed())
    };
    let trivial = async move {
        // Sent just after the attack, so it meets whatever the attack does to the server.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = c3.execute(request("python", "print('alive')", "")).await;
        (r, t.elapsed())
    };
    let joined = tokio::time::timeout(Duration::from_secs(60), async { tokio::join!(attack, trivial) }).await;
    let ((a, b, attack_took), (r, trivial_took)) = joined.expect("requests still unanswered after 60 s");
    assert_invalid(&a, "files[0].path");
    assert_invalid(&b, "fetch_files[0]");
    let r = r.expect("trivial request").into_inner();
    assert_eq!(stdout(&r), "alive\n", "{}", describe(&r));
    assert!(attack_took < Duration::from_secs(20), "deep paths took {attack_took:?}");
    assert!(
        trivial_took < Duration::from_secs(20),
        "trivial request took {trivial_took:?}"
    );

    // The same over HTTP: a clear 400, promptly.
    let addr = exe.http_addr.clone().expect("http");
    let body = serde_json::json!({"code": "print(1)", "language": "python", "files": {deep: ""}}).to_string();
    let t = Instant::now();
    let (status, reply) = tokio::task::spawn_blocking(move || http(&addr, "POST", "/run_code", "", &body))
        .await
        .expect("http");
    assert_eq!(status, 400, "{reply}");
    assert!(t.elapsed() < Duration::from_secs(20), "HTTP took {:?}", t.elapsed());
}

/// Finding 4: a 1.3 KB request naming one 16 MiB file 64 times drove the executor to
/// gigabytes. Duplicates are returned once, and the total fetched is capped.
#[tokio::test]
async fn fetching_one_big_file_many_times_does_not_grow_the_executor() {
    let exe = python(false, &[("SANDPOOL_FETCH_TOTAL_BYTES", "20971520")]).await;
    exe.run(request("python", "print(1)", "")).await;
    let before = exe.status_kib("VmHWM");
    let code = "open('big','wb').write(b'x' * (16 << 20))\nopen('big2','wb').write(b'y' * (16 << 20))\n";
    let req = pb::ExecuteRequest {
        fetch_files: vec!["big".to_owned(); 64],
        ..request("python", code, "")
    };
    let r = exe.run(req).await;
    let grown_mib = exe.status_kib("VmHWM").saturating_sub(before) / 1024;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{}", describe(&r));
    assert!(grown_mib < 256, "the executor's peak RSS grew by {grown_mib} MiB");
    assert_eq!(r.files.len(), 1, "duplicates returned");
    assert_eq!(r.files[0].content.len(), 16 << 20);

    // Two distinct 16 MiB files against a 20 MiB total: one comes back, the other is named.
    let req = pb::ExecuteRequest {
        fetch_files: vec!["big".into(), "big2".into()],
        ..request("python", code, "")
    };
    let r = exe.run(req).await;
    assert_eq!(r.files.len(), 1, "{}", describe(&r));
    assert!(
        r.message.contains("big2") && r.message.contains("20971520"),
        "{}",
        r.message
    );
}

/// Finding 6: request mistakes came back as SANDBOX_ERROR (which clients retry), with host
/// cgroup paths in the message. They are INVALID_ARGUMENT naming the field.
#[tokio::test]
async fn request_mistakes_are_invalid_argument_naming_the_field() {
    let exe = python(true, &[]).await;
    let mut c = exe.client();
    let with_limits = |l: pb::Limits| pb::ExecuteRequest {
        limits: Some(l),
        ..request("python", "print(1)", "")
    };
    let tiny_memory = c
        .execute(with_limits(pb::Limits {
            memory_bytes: 4096,
            ..Default::default()
        }))
        .await;
    assert_invalid(&tiny_memory, "limits.memory_bytes");
    let tiny_compile = c
        .execute(pb::ExecuteRequest {
            compile_limits: Some(pb::Limits {
                memory_bytes: 8192,
                ..Default::default()
            }),
            ..request("python", "print(1)", "")
        })
        .await;
    assert_invalid(&tiny_compile, "compile_limits.memory_bytes");
    let huge_arg = c
        .execute(pb::ExecuteRequest {
            args: vec!["a".repeat(200_000)],
            ..request("python", "print(1)", "")
        })
        .await;
    assert_invalid(&huge_arg, "args[0]");
    let below_source = c
        .execute(pb::ExecuteRequest {
            files: vec![pb::File {
                path: "main.py/x".into(),
                content: b"x".to_vec(),
                executable: false,
            }],
            ..request("python", "print(1)", "")
        })
        .await;
    assert_invalid(&below_source, "files[0].path");
    for r in [&tiny_memory, &tiny_compile, &huge_arg, &below_source] {
        let text = code_of(r);
        assert!(!text.contains("/sys/fs/cgroup"), "host path in {text}");
    }

    // HTTP: memory_limit_MB 1 is a 400 naming the field, and nothing falls over.
    let addr = exe.http_addr.clone().expect("http");
    let body = serde_json::json!({"code": "print(1)", "language": "python", "memory_limit_MB": 1}).to_string();
    let (status, reply) = tokio::task::spawn_blocking(move || http(&addr, "POST", "/run_code", "", &body))
        .await
        .expect("http");
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("memory_limit_MB"), "{reply}");
    let addr = exe.http_addr.clone().expect("http");
    let body = serde_json::json!({
        "completion": "print(input())",
        "config": {
            "language": "python",
            "run_timeout": 0.001,
            "provided_data": {"test_cases": {"type": "stdin_stdout", "input": ["1"], "output": ["1"]}},
        },
    })
    .to_string();
    let (status, reply) = tokio::task::spawn_blocking(move || http(&addr, "POST", "/common_evaluate_batch", "", &body))
        .await
        .expect("http");
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("config.run_timeout"), "{reply}");
    let r = exe.run(request("python", "print('still here')", "")).await;
    assert_eq!(stdout(&r), "still here\n", "{}", describe(&r));
}

/// Reads from `conn` until EOF; true if that came within `within`.
fn closed_within(conn: &mut TcpStream, within: Duration) -> (bool, String) {
    conn.set_read_timeout(Some(within)).expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let t = Instant::now();
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return (true, String::from_utf8_lossy(&got).into_owned()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (true, String::from_utf8_lossy(&got).into_owned());
            }
            Err(_) => return (false, String::from_utf8_lossy(&got).into_owned()),
        }
        if t.elapsed() > within {
            return (false, String::from_utf8_lossy(&got).into_owned());
        }
    }
}

/// Finding 5: half-sent headers or bodies held HTTP connections forever. With 1 s timeouts
/// both are cut off within seconds.
#[tokio::test]
async fn slow_http_clients_are_disconnected() {
    let exe = python(
        true,
        &[
            ("SANDPOOL_HTTP_HEADER_TIMEOUT_MS", "1000"),
            ("SANDPOOL_HTTP_BODY_TIMEOUT_MS", "1000"),
        ],
    )
    .await;
    let addr = exe.http_addr.clone().expect("http");
    tokio::task::spawn_blocking(move || {
        let mut headers = TcpStream::connect(&addr).expect("connect");
        headers.write_all(b"POST /run_code HTTP/1.1\r\nHost: x\r\n").expect("write");
        let mut body = TcpStream::connect(&addr).expect("connect");
        body.write_all(b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"code\":")
            .expect("write");
        let (closed, _) = closed_within(&mut headers, Duration::from_secs(15));
        assert!(closed, "a client that never finished its headers is still connected after 15 s");
        let (closed, reply) = closed_within(&mut body, Duration::from_secs(15));
        assert!(closed, "a client that never finished its body is still connected after 15 s");
        assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    })
    .await
    .expect("slow clients");
}

/// Finding 5 on the gRPC port: with a connection cap, sockets that never say anything must
/// not keep their place forever.
#[tokio::test]
async fn silent_grpc_connections_are_dropped() {
    let exe = python(false, &[("SANDPOOL_GRPC_SILENT_TIMEOUT_MS", "1000")]).await;
    let addr = exe.addr.clone();
    tokio::task::spawn_blocking(move || {
        let mut silent = TcpStream::connect(&addr).expect("connect");
        let (closed, _) = closed_within(&mut silent, Duration::from_secs(15));
        assert!(closed, "a gRPC client that sent nothing is still connected after 15 s");
        // One byte, then nothing (issue 24 item 4): the handshake has a deadline too.
        let mut one = TcpStream::connect(&addr).expect("connect");
        one.write_all(b"P").expect("one byte");
        let (closed, _) = closed_within(&mut one, Duration::from_secs(15));
        assert!(closed, "a gRPC client that sent one byte is still connected after 15 s");
        // Most of the preface, trickled: still not a handshake.
        let mut partial = TcpStream::connect(&addr).expect("connect");
        for b in b"PRI * HTTP/2.0\r\n\r\nSM\r\n" {
            partial.write_all(&[*b]).expect("a byte");
            std::thread::sleep(Duration::from_millis(20));
        }
        let (closed, _) = closed_within(&mut partial, Duration::from_secs(15));
        assert!(
            closed,
            "a gRPC client that sent only the preface is still connected after 15 s"
        );
    })
    .await
    .expect("silent client");
    let r = exe.run(request("python", "print('ok')", "")).await;
    assert_eq!(stdout(&r), "ok\n", "{}", describe(&r));
}

/// Finding 5, the other half: enough idle HTTP connections took every descriptor, and gRPC
/// stopped accepting. With the HTTP connection cap, a new gRPC connection still runs code.
#[tokio::test]
async fn idle_http_connections_cannot_starve_grpc() {
    let exe = python(
        true,
        &[
            ("SANDPOOL_HTTP_HEADER_TIMEOUT_MS", "120000"),
            ("SANDPOOL_HTTP_MAX_CONNECTIONS", "32"),
        ],
    )
    .await;
    exe.run(request("python", "print(1)", "")).await;
    // Room for a gRPC connection and a run, but not for 100 more sockets.
    let headroom = 100;
    exe.limit_fds(exe.open_fds() as u64 + headroom);
    let addr: std::net::SocketAddr = exe.http_addr.clone().expect("http").parse().expect("addr");
    let idle: Vec<TcpStream> = tokio::task::spawn_blocking(move || {
        // Until connecting stalls: the executor and the kernel's accept queue are full.
        let mut idle = Vec::new();
        for _ in 0..400 {
            let Ok(mut c) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
                break;
            };
            if c.write_all(b"POST /run_code HTTP/1.1\r\n").is_err() {
                break;
            }
            idle.push(c);
        }
        idle
    })
    .await
    .expect("connecting");
    assert!(idle.len() as u64 > headroom, "only {} connections opened", idle.len());
    // Let the executor accept what it will.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let run = async {
        let mut c = exe.fresh_client().await.map_err(|e| format!("connecting: {e}"))?;
        c.execute(request("python", "print('served')", ""))
            .await
            .map(|r| r.into_inner())
            .map_err(|s| format!("{s:?}"))
    };
    let r = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("gRPC not answered within 20 s")
        .expect("gRPC call");
    assert_eq!(stdout(&r), "served\n", "{}", describe(&r));
    drop(idle);
}

/// Item 3: with a token configured, calls without it or with a wrong one are refused
/// (UNAUTHENTICATED / 401) and run nothing; health and ping stay open; the CLI sends
/// `SANDPOOL_TOKEN`.
#[tokio::test]
async fn bearer_token_is_required_on_grpc_http_and_sent_by_the_cli() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").expect("token");
    let exe = python(
        true,
        &[("SANDPOOL_AUTH_TOKEN_FILE", token_file.to_str().expect("utf-8"))],
    )
    .await;
    let with = |token: Option<&str>| {
        let mut r = tonic::Request::new(request("python", "print('ran')", ""));
        if let Some(t) = token {
            r.metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().expect("header"));
        }
        r
    };
    let mut c = exe.client();
    for bad in [None, Some("wrong"), Some("s3cret-toke")] {
        let s = c.execute(with(bad)).await.expect_err("ran without the right token");
        assert_eq!(s.code(), tonic::Code::Unauthenticated, "{bad:?}: {s:?}");
    }
    let addr = exe.http_addr.clone().expect("http");
    let body = serde_json::json!({"code": "print('ran')", "language": "python"}).to_string();
    let (a, b) = (addr.clone(), body.clone());
    let (none, wrong, ping) = tokio::task::spawn_blocking(move || {
        (
            http(&a, "POST", "/run_code", "", &b),
            http(&a, "POST", "/run_code", "Authorization: Bearer nope\r\n", &b),
            http(&a, "GET", "/v1/ping", "", ""),
        )
    })
    .await
    .expect("http");
    assert_eq!(none.0, 401, "{}", none.1);
    assert_eq!(wrong.0, 401, "{}", wrong.1);
    assert_eq!(ping.0, 200, "{}", ping.1);
    assert_eq!(exe.runs_total(), 0.0, "a refused call ran");

    // Health stays open for probes.
    let mut health = tonic_health::pb::health_client::HealthClient::new(exe.channel.clone());
    let h = health
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .expect("health without a token");
    assert_eq!(h.into_inner().status, 1);

    let r = c.execute(with(Some("s3cret-token"))).await.expect("with the token");
    assert_eq!(stdout(r.get_ref()), "ran\n");
    let (b, a) = (body, addr);
    let ok = tokio::task::spawn_blocking(move || {
        http(&a, "POST", "/run_code", "Authorization: Bearer s3cret-token\r\n", &b)
    })
    .await
    .expect("http");
    assert_eq!(ok.0, 200, "{}", ok.1);
    assert!(ok.1.contains("\"Success\""), "{}", ok.1);

    // The CLI: SANDPOOL_TOKEN works, --token-file works, nothing is refused.
    let src = dir.path().join("hello.py");
    std::fs::write(&src, "print('from the cli')\n").expect("source");
    let cli = |token_env: Option<&str>, token_file: Option<&std::path::Path>| {
        let mut cmd = std::process::Command::new(binary("sandpool"));
        cmd.arg("exec").arg("--endpoint").arg(&exe.addr).arg(&src);
        cmd.env_remove("SANDPOOL_TOKEN").env_remove("SANDPOOL_TOKEN_FILE");
        if let Some(t) = token_env {
            cmd.env("SANDPOOL_TOKEN", t);
        }
        if let Some(f) = token_file {
            cmd.arg("--token-file").arg(f);
        }
        cmd.output().expect("running sandpool")
    };
    let out = cli(Some("s3cret-token"), None);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("from the cli"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(None, Some(&token_file));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("from the cli"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(None, None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(err.contains("unauthenticated") || err.contains("token"), "{err}");
}

fn capture_text(dir: &std::path::Path) -> String {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect()
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "{what}: not within 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Item 4: requests ending with a chosen verdict land in the capture JSONL with their
/// response; the size cap holds; other verdicts, and executors without the flag, write nothing.
#[tokio::test]
async fn bad_case_capture_records_chosen_verdicts_within_its_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = dir.path().join("capture");
    let exe = python(
        false,
        &[
            ("SANDPOOL_CAPTURE_DIR", cap.to_str().expect("utf-8")),
            ("SANDPOOL_CAPTURE_VERDICTS", "runtime_error"),
            ("SANDPOOL_CAPTURE_MAX_BYTES", "65536"),
            ("SANDPOOL_CAPTURE_FILES", "2"),
        ],
    )
    .await;
    let ok = exe.run(request("python", "print('fine') # marker-ok", "")).await;
    assert_eq!(ok.verdict, pb::Verdict::Ok as i32);
    let bad = exe
        .run(request(
            "python",
            "import sys\nprint('oops')\nsys.exit(3) # marker-bad",
            "",
        ))
        .await;
    assert_eq!(bad.verdict, pb::Verdict::RuntimeError as i32, "{}", describe(&bad));
    eventually("the runtime error captured", || {
        capture_text(&cap).contains("marker-bad")
    })
    .await;
    let text = capture_text(&cap);
    assert!(!text.contains("marker-ok"), "an OK run was captured");
    let line: serde_json::Value =
        serde_json::from_str(text.lines().find(|l| l.contains("marker-bad")).expect("the line")).expect("JSON");
    assert_eq!(line["verdict"], "RUNTIME_ERROR");
    // Without auth every caller is the tenant `anonymous`, at the default priority.
    assert_eq!(
        (&line["tenant"], &line["priority"]),
        (&"anonymous".into(), &"normal".into())
    );
    assert_eq!(line["run"]["exit_code"], 3);
    assert_eq!(line["run"]["stdout"], "oops\n");
    assert!(line["response_pb"].as_str().is_some_and(|s| !s.is_empty()));

    // 40 records of about 4 KiB each against 64 KiB: rotated, the newest kept, the cap held.
    let pad = "#".repeat(4000);
    for i in 0..40 {
        let code = format!("import sys\nsys.exit(1) # n{i:02} {pad}");
        exe.run(request("python", &code, "")).await;
    }
    eventually("the last record captured", || capture_text(&cap).contains("# n39 ")).await;
    let total = dir_bytes(&cap);
    assert!(total <= 65536, "capture holds {total} bytes, cap 65536");
    assert!(!capture_text(&cap).contains("# n00 "), "the oldest record was kept");

    // Default verdicts (sandbox_error only): a runtime error writes nothing.
    let quiet = dir.path().join("quiet");
    let exe2 = python(false, &[("SANDPOOL_CAPTURE_DIR", quiet.to_str().expect("utf-8"))]).await;
    exe2.run(request("python", "import sys\nsys.exit(3)", "")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(dir_bytes(&quiet), 0, "{}", capture_text(&quiet));
    // No flag: nothing anywhere under the executor's work root.
    let exe3 = python(false, &[]).await;
    exe3.run(request("python", "import sys\nsys.exit(3)", "")).await;
    let found = std::process::Command::new("find")
        .arg(exe3.work_root.path())
        .args(["-name", "capture*"])
        .output()
        .expect("find");
    assert!(found.stdout.is_empty(), "{}", String::from_utf8_lossy(&found.stdout));
}

/// A client that keeps slots + queue requests in flight, sending the next the moment one is
/// answered, is never refused: a run's slot is free for admission once its answer goes out,
/// though its work dir may still be dissolving (docs/performance.md, "Per-run fixed cost").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_keeping_slots_plus_queue_in_flight_is_never_refused() {
    use futures::StreamExt;
    let exe = Executor::start(Options {
        slots: 2,
        queue: Some(2),
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    let client = exe.client();
    let results: Vec<_> = futures::stream::iter(0..200)
        .map(|i| {
            let mut c = client.clone();
            async move { c.execute(request("python", &format!("print({i})"), "")).await }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let refused: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        refused.is_empty(),
        "{} of 200 refused, the first: {:?}",
        refused.len(),
        refused.first()
    );
    for r in results.into_iter().flatten() {
        let r = r.into_inner();
        assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{}", describe(&r));
    }
}

/// Issue 10 item 4: on SIGTERM, queued requests get UNAVAILABLE at once (their clients
/// retry elsewhere), the running one finishes, new calls are refused, and the process
/// exits well within the drain timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_running_work_and_refuses_queued_work_at_once() {
    let mut exe = Executor::start(Options {
        slots: 1,
        queue: Some(4),
        languages: vec!["python"],
        env: env(&[("SANDPOOL_DRAIN_TIMEOUT_MS", "60000")]),
        ..Default::default()
    })
    .await;
    let t0 = Instant::now();
    let mut c = exe.client();
    let running = tokio::spawn(async move {
        let r = c
            .execute(request("python", "import time\ntime.sleep(4)\nprint('done')", ""))
            .await;
        (r, t0.elapsed())
    });
    eventually("the first run started", || exe.metric("sandpool_busy_slots") >= 1.0).await;
    let queued: Vec<_> = (0..2)
        .map(|i| {
            let mut c = exe.client();
            tokio::spawn(async move {
                let r = c.execute(request("python", &format!("print({i})"), "")).await;
                (r, t0.elapsed())
            })
        })
        .collect();
    eventually("two requests queued", || exe.metric("sandpool_queue_length") >= 2.0).await;
    exe.signal(libc::SIGTERM);
    let signalled = t0.elapsed();
    let mut queued_done = Vec::new();
    for q in queued {
        let (r, at) = q.await.expect("task");
        match &r {
            Err(s) if s.code() == tonic::Code::Unavailable => {}
            other => panic!("a queued request got {} instead of UNAVAILABLE", code_of(other)),
        }
        queued_done.push(at);
    }
    // A new call while the run is still draining: the listener is closed, so a new
    // connection is refused and the client goes elsewhere; were it accepted, the call must
    // be UNAVAILABLE. (Asked while the run is in flight: once it ends the process exits, and
    // a call racing that exit sees its connection cut, which says nothing about draining.)
    assert!(
        !running.is_finished(),
        "the 4 s run ended before the late call could be made"
    );
    match exe.fresh_client().await {
        Err(_refused) => {}
        Ok(mut c) => {
            let late = c.execute(request("python", "print(1)", "")).await;
            assert!(
                matches!(&late, Err(s) if s.code() == tonic::Code::Unavailable),
                "a new call while draining got {}",
                code_of(&late)
            );
        }
    }
    let (r, running_done) = running.await.expect("task");
    let r = r.expect("the running request").into_inner();
    assert_eq!(stdout(&r), "done\n", "{}", describe(&r));
    for at in &queued_done {
        assert!(
            *at < running_done,
            "a queued request was answered at {at:?}, after the running one finished at {running_done:?} (SIGTERM at {signalled:?})"
        );
    }
    let status = tokio::task::block_in_place(|| exe.wait_exit(Duration::from_secs(30)));
    let status = status.expect("still running 30 s after SIGTERM (drain timeout 60 s)");
    assert!(status.success(), "{status}");
}

/// Drain: once nothing runs, an idle client connection that never reads the server's GOAWAY
/// (its runtime is busy elsewhere, as a pooled connection in a stalled client is) must not
/// keep the executor alive for the whole drain timeout: a Deployment's rollout and a node
/// drain would wait on it, and the kubelet would SIGKILL the pod at its grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_connection_does_not_hold_a_drained_executor() {
    let mut exe = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        env: env(&[("SANDPOOL_DRAIN_TIMEOUT_MS", "60000")]),
        ..Default::default()
    })
    .await;
    let addr = format!("http://{}", exe.addr);
    let (connected_tx, connected_rx) = std::sync::mpsc::channel();
    // A client on a runtime of its own that makes one call, then stops polling with its
    // connection open.
    let stalled = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        let mut client = rt.block_on(async {
            let mut c = pb::executor_client::ExecutorClient::connect(addr)
                .await
                .expect("connect");
            c.execute(request("python", "print(1)", "")).await.expect("first call");
            c
        });
        connected_tx.send(()).expect("send");
        std::thread::sleep(Duration::from_secs(40));
        drop(rt.block_on(client.get_capabilities(pb::GetCapabilitiesRequest::default())));
    });
    connected_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the stalled client connected");
    exe.signal(libc::SIGTERM);
    let status = tokio::task::block_in_place(|| exe.wait_exit(Duration::from_secs(20)));
    let status = status.expect("still running 20 s after SIGTERM with no run left (drain timeout 60 s)");
    assert!(status.success(), "{status}");
    drop(stalled);
}

/// Attack round 2, item 5: request bodies were held whole before admission, across every
/// connection (ten stalled 20 MiB HTTP bodies took 200 MiB; 16 parallel 48 MiB gRPC
/// requests 760 MiB). One byte budget bounds both APIs: bodies are charged as they
/// arrive, and past the budget a call is refused at once, HTTP 503 (with Retry-After) and
/// gRPC RESOURCE_EXHAUSTED, while health checks still answer; the bytes come back when the
/// connections holding them go.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_bytes_held_at_once_are_bounded_across_connections_and_apis() {
    const MIB: usize = 1 << 20;
    let exe = python(
        true,
        &[
            ("SANDPOOL_MAX_INFLIGHT_BYTES", &(64 * MIB).to_string()),
            ("SANDPOOL_MAX_REQUEST_BYTES", &(32 * MIB).to_string()),
        ],
    )
    .await;
    exe.run(request("python", "print(1)", "")).await;
    let before = exe.status_kib("VmHWM");
    let http_addr = exe.http_addr.clone().expect("http");
    assert_eq!(exe.metric("sandpool_inflight_bytes_limit"), (64 * MIB) as f64);

    // Four clients each promise 16 MiB, send 12 and stall: room for their whole bodies is
    // taken when they say their length, and the budget is full.
    let headers = format!(
        "POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        16 * MIB
    );
    let chunk = vec![b' '; MIB];
    let mut stalled = Vec::new();
    for i in 1..=4 {
        let mut conn = TcpStream::connect(&http_addr).expect("connect");
        conn.write_all(headers.as_bytes()).expect("headers");
        for _ in 0..12 {
            conn.write_all(&chunk).expect("a body the budget has room for");
        }
        eventually("the stalled body charged", || {
            exe.metric("sandpool_inflight_bytes") >= (16 * MIB * i) as f64
        })
        .await;
        stalled.push(conn);
    }
    // A fifth is refused as soon as it says its length, before any of its body is read.
    let mut fifth = TcpStream::connect(&http_addr).expect("connect");
    fifth.write_all(headers.as_bytes()).expect("headers");
    let (closed, answer) = closed_within(&mut fifth, Duration::from_secs(10));
    assert!(closed, "a body past the budget was waited for: {answer}");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("retry-after: 1"), "{answer}");
    assert!(answer.contains("--max-inflight-bytes"), "{answer}");
    // A small gRPC call is refused as clearly while the budget is spent; health still answers.
    let refused = exe.client().execute(request("python", "print(1)", "")).await;
    match &refused {
        Err(s) if s.code() == tonic::Code::ResourceExhausted && s.message().contains("--max-inflight-bytes") => {}
        other => panic!("a call past the budget got {}", code_of(other)),
    }
    // Both refusals are counted by reason; nothing else was refused.
    assert_eq!(
        exe.metric(r#"sandpool_resource_exhausted_total{reason="inflight_bytes"}"#),
        2.0
    );
    assert_eq!(exe.metric("sandpool_resource_exhausted_total"), 2.0);
    let health = tonic_health::pb::health_client::HealthClient::new(exe.channel.clone())
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .expect("health answers while the budget is spent");
    assert_eq!(health.into_inner().status, 1, "SERVING");
    // The stalled clients go; their bytes come back.
    drop(stalled);
    eventually("the budget freed", || exe.metric("sandpool_inflight_bytes") == 0.0).await;
    exe.run(request("python", "print(1)", "")).await;

    // Sixteen parallel 24 MiB gRPC requests: what fits runs, the rest are refused at once.
    let code = "import sys\nprint(len(sys.stdin.buffer.read()))";
    let big = "x".repeat(24 * MIB);
    let calls = (0..16).map(|_| {
        let mut c = exe.client();
        let req = request("python", code, &big);
        async move { c.execute(req).await }
    });
    let results = futures::future::join_all(calls).await;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let exhausted = results
        .iter()
        .filter(|r| matches!(r, Err(s) if s.code() == tonic::Code::ResourceExhausted))
        .count();
    assert!(ok >= 1 && exhausted >= 1, "{ok} ran, {exhausted} refused of 16");
    assert_eq!(
        ok + exhausted,
        16,
        "{:?}",
        results.iter().map(code_of).collect::<Vec<_>>()
    );
    for r in results.iter().flatten() {
        assert_eq!(
            stdout(r.get_ref()),
            format!("{}\n", 24 * MIB),
            "{}",
            describe(r.get_ref())
        );
    }
    let grown_mib = exe.status_kib("VmHWM").saturating_sub(before) / 1024;
    assert!(grown_mib < 256, "the executor's peak RSS grew by {grown_mib} MiB");
}

/// Attack round 2, item 5, gRPC's side: a unary call's request that says its length and
/// then stalls is charged its whole length at once, and is cut off at the body deadline
/// (DEADLINE_EXCEEDED naming the flag), giving its bytes back; nothing else waits on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_request_that_stalls_part_way_is_cut_off_and_gives_its_bytes_back() {
    use futures::StreamExt;
    use tower::ServiceExt;
    const MIB: u32 = 1 << 20;
    let exe = python(false, &[("SANDPOOL_GRPC_BODY_TIMEOUT_MS", "2000")]).await;
    // A 5-byte gRPC prefix promising 8 MiB, 10 bytes of it, then nothing more.
    let mut start = vec![0u8];
    start.extend_from_slice(&(8 * MIB).to_be_bytes());
    start.extend_from_slice(&[0x0a, 0x06, b'p', b'y', b't', b'h', b'o', b'n', 0x12, 0x00]);
    let frames =
        futures::stream::once(async move { Ok::<_, tonic::Status>(http_body::Frame::data(bytes::Bytes::from(start))) })
            .chain(futures::stream::pending());
    let body = tonic::body::Body::new(http_body_util::StreamBody::new(frames));
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{}/sandpool.v1.Executor/Execute", exe.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .expect("request");
    let t = Instant::now();
    let call = tokio::spawn(exe.channel.clone().oneshot(req));
    eventually("the stalled request charged whole", || {
        exe.metric("sandpool_inflight_bytes") >= f64::from(8 * MIB)
    })
    .await;
    // Others are served meanwhile.
    let r = exe.run(request("python", "print('ok')", "")).await;
    assert_eq!(stdout(&r), "ok\n", "{}", describe(&r));
    let resp = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the stalled call was answered")
        .expect("join")
        .expect("a response");
    let status = tonic::Status::from_header_map(resp.headers()).expect("a trailers-only status");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("--grpc-body-timeout-ms"), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(15), "cut off after {:?}", t.elapsed());
    eventually("its bytes given back", || exe.metric("sandpool_inflight_bytes") == 0.0).await;
}

/// A budget smaller than the largest request allowed could never take that request: the
/// executor refuses to start, naming both flags, before it builds anything.
#[test]
fn a_budget_below_the_request_cap_is_refused_at_start() {
    let work = tempfile::tempdir().expect("work root");
    let out = std::process::Command::new(binary("sandpool-executor"))
        .args(["--listen", "127.0.0.1:0", "--max-request-bytes", "1048576"])
        .args(["--max-inflight-bytes", "1024", "--work-root"])
        .arg(work.path())
        .env("SANDPOOL_LOG_JSON", "false")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the executor");
    assert!(!out.status.success(), "started with a budget below the request cap");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--max-inflight-bytes") && stderr.contains("--max-request-bytes"),
        "{stderr}"
    );
}
