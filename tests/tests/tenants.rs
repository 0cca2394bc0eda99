//! Tenants, priorities and fair share end to end (docs/tenants.md): a real executor with a
//! tenants file, over gRPC and HTTP on loopback, real Python runs.

use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Options, http, request, stdout};
use std::time::{Duration, Instant};

const RL: &str = "rl-token-0123456789abcdef";
const SWEEPS: &str = "sweeps-token-0123456789abcdef";
const AGENTS: &str = "agents-token-0123456789abcdef";

fn tenants_file(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let sweeps_token = dir.join("sweeps.token");
    std::fs::write(&sweeps_token, format!("{SWEEPS}\n")).expect("token file");
    let f = dir.join("tenants.toml");
    std::fs::write(
        &f,
        format!(
            "[[tenant]]\nname = \"rl\"\ntoken = \"{RL}\"\nweight = 3\n\n\
             [[tenant]]\nname = \"sweeps\"\ntoken_file = \"{}\"\nmax_priority = \"batch\"\nmax_queue = 3\n\n\
             [[tenant]]\nname = \"agents\"\ntoken = \"{AGENTS}\"\nmax_sessions = 1\n{extra}",
            sweeps_token.display()
        ),
    )
    .expect("tenants file");
    f
}

async fn executor(file: &std::path::Path, slots: usize) -> Executor {
    Executor::start(Options {
        slots,
        languages: vec!["python", "bash"],
        http: true,
        env: vec![("SANDPOOL_TENANTS_FILE".into(), file.display().to_string())],
        ..Default::default()
    })
    .await
}

/// `msg` with `authorization: Bearer <token>`.
fn as_tenant<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().expect("header"));
    r
}

fn with_priority(mut r: pb::ExecuteRequest, p: pb::Priority) -> pb::ExecuteRequest {
    r.priority = p as i32;
    r
}

async fn http_async(addr: &str, path: &str, headers: String, body: String) -> (u16, String) {
    let (addr, path) = (addr.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || http(&addr, "POST", &path, &headers, &body))
        .await
        .expect("http")
}

/// The tenant a token is, its terms, the priority rules, and per-tenant refusals: each
/// visible to the caller with a status that names the tenant.
#[tokio::test]
async fn each_token_is_its_tenant_with_its_terms_and_refusals_name_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = tenants_file(dir.path(), "");
    let exe = executor(&file, 1).await;
    let mut c = exe.client();

    let caps = c
        .get_capabilities(as_tenant(pb::GetCapabilitiesRequest {}, RL))
        .await
        .expect("capabilities")
        .into_inner();
    let t = caps.tenant.expect("the caller's tenant");
    assert_eq!((t.name.as_str(), t.weight, t.max_concurrency), ("rl", 3, 1));
    let sweeps = c
        .get_capabilities(as_tenant(pb::GetCapabilitiesRequest {}, SWEEPS))
        .await
        .expect("capabilities")
        .into_inner()
        .tenant
        .expect("tenant");
    assert_eq!((sweeps.name.as_str(), sweeps.max_queue), ("sweeps", 3));
    assert_eq!(sweeps.max_priority, pb::Priority::Batch as i32);
    let s = c
        .get_capabilities(as_tenant(pb::GetCapabilitiesRequest {}, "not-a-tenant-token-at-all"))
        .await
        .expect_err("unknown token");
    assert_eq!(s.code(), tonic::Code::Unauthenticated);

    // Above its highest priority: PERMISSION_DENIED (HTTP 403) naming the tenant; nothing runs.
    let r = with_priority(request("python", "print(1)", ""), pb::Priority::Interactive);
    let s = c.execute(as_tenant(r, SWEEPS)).await.expect_err("above max_priority");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
    assert!(
        s.message().contains("\"sweeps\"") && s.message().contains("batch"),
        "{s:?}"
    );
    let mut r = request("python", "print(1)", "");
    r.priority = 42;
    let s = c.execute(as_tenant(r, RL)).await.expect_err("unknown priority");
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert!(s.message().starts_with("priority"), "{s:?}");
    let eval = pb::EvaluateRequest {
        language: "python".into(),
        completion: "print(1)".into(),
        priority: pb::Priority::Normal as i32,
        tests: Some(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
            cases: vec![pb::StdioCase {
                stdin: vec![],
                expected_stdout: b"1\n".to_vec(),
            }],
            comparison: None,
        })),
        ..Default::default()
    };
    let s = c
        .evaluate(as_tenant(eval, SWEEPS))
        .await
        .expect_err("evaluate above max_priority");
    assert_eq!(s.code(), tonic::Code::PermissionDenied);

    let http_addr = exe.http_addr.clone().expect("http");
    let body = serde_json::json!({"code": "print('hi')", "language": "python"}).to_string();
    let auth = |t: &str, p: &str| format!("Authorization: Bearer {t}\r\nX-Sandpool-Priority: {p}\r\n");
    let (code, text) = http_async(&http_addr, "/run_code", auth(SWEEPS, "interactive"), body.clone()).await;
    assert_eq!(code, 403, "{text}");
    let (code, text) = http_async(&http_addr, "/run_code", auth(RL, "urgent"), body.clone()).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("x-sandpool-priority"), "{text}");
    let (code, text) = http_async(&http_addr, "/run_code", auth(SWEEPS, "batch"), body.clone()).await;
    assert_eq!(code, 200, "{text}");
    assert_eq!(exe.runs_total(), 1.0, "only the allowed request ran");

    // A full queue is its tenant's: sweeps (max_queue 3) is refused, rl still queues.
    let sleeper = |s: f64| request("python", &format!("import time; time.sleep({s}); print('done')"), "");
    let hold = {
        let mut c = exe.client();
        let r = as_tenant(sleeper(2.0), RL);
        tokio::spawn(async move { c.execute(r).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut queued = Vec::new();
    for _ in 0..3 {
        let mut c = exe.client();
        let r = as_tenant(sleeper(0.0), SWEEPS);
        queued.push(tokio::spawn(async move { c.execute(r).await }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = c
        .execute(as_tenant(sleeper(0.0), SWEEPS))
        .await
        .expect_err("sweeps' queue is full");
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
    assert!(s.message().contains("\"sweeps\""), "{s:?}");
    let rl = {
        let mut c = exe.client();
        let r = as_tenant(sleeper(0.0), RL);
        tokio::spawn(async move { c.execute(r).await })
    };
    assert_eq!(stdout(hold.await.expect("join").expect("held run").get_ref()), "done\n");
    assert_eq!(
        stdout(rl.await.expect("join").expect("rl not refused").get_ref()),
        "done\n"
    );
    for q in queued {
        assert_eq!(
            stdout(q.await.expect("join").expect("queued sweep").get_ref()),
            "done\n"
        );
    }
    assert_eq!(exe.metric("sandpool_tenant_refused_total"), 1.0);
    assert!(exe.metric("sandpool_tenant_admitted_total") >= 6.0);
}

/// Sessions belong to their tenant and count against its max_sessions.
#[tokio::test]
async fn sessions_belong_to_their_tenant_and_count_against_its_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = tenants_file(dir.path(), "");
    // The executor's own cap (--max-sessions, 64 by default) is above agents'.
    let exe = executor(&file, 4).await;
    let mut c = exe.client();
    let create = |token: &str| {
        as_tenant(
            pb::CreateSessionRequest {
                language: "bash".into(),
                ..Default::default()
            },
            token,
        )
    };
    let s = c
        .create_session(create(AGENTS))
        .await
        .expect("first session")
        .into_inner();
    let refused = c
        .create_session(create(AGENTS))
        .await
        .expect_err("agents' max_sessions is 1");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("\"agents\""), "{refused:?}");
    let run = |token: &str| {
        as_tenant(
            pb::RunInSessionRequest {
                session_id: s.session_id.clone(),
                input: Some(pb::run_in_session_request::Input::Command("echo mine".into())),
                ..Default::default()
            },
            token,
        )
    };
    let other = c.run_in_session(run(RL)).await.expect_err("another tenant's session");
    assert_eq!(other.code(), tonic::Code::NotFound);
    let mine = c.run_in_session(run(AGENTS)).await.expect("own session").into_inner();
    assert_eq!(String::from_utf8_lossy(&mine.result.expect("result").stdout), "mine\n");
    assert_eq!(exe.metric("sandpool_tenant_sessions"), 1.0);
    c.close_session(as_tenant(
        pb::CloseSessionRequest {
            session_id: s.session_id.clone(),
        },
        AGENTS,
    ))
    .await
    .expect("close");
    c.create_session(create(AGENTS))
        .await
        .expect("room again after closing");
}

/// An interactive request overtakes a backlog of batch requests, over gRPC and HTTP, and
/// an Evaluate's every test waits as interactive too.
#[tokio::test]
async fn interactive_requests_overtake_a_batch_backlog_on_grpc_and_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A batch tenant with room to queue a backlog.
    let file = tenants_file(
        dir.path(),
        "\n[[tenant]]\nname = \"flood\"\ntoken = \"flood-token-0123456789abcdef\"\nmax_queue = 100\n",
    );
    let exe = executor(&file, 1).await;
    let backlog = 10;
    let done_order = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut flood = Vec::new();
    for i in 0..backlog {
        let mut c = exe.client();
        let r = as_tenant(
            with_priority(
                request("python", "import time; time.sleep(0.25)", ""),
                pb::Priority::Batch,
            ),
            "flood-token-0123456789abcdef",
        );
        let order = done_order.clone();
        flood.push(tokio::spawn(async move {
            c.execute(r).await.expect("batch run");
            order.lock().expect("lock").push(format!("batch{i}"));
        }));
    }
    // Until the backlog is queued behind the first batch run.
    let t = Instant::now();
    while exe.metric("sandpool_tenant_queued") < (backlog - 1) as f64 {
        assert!(t.elapsed() < Duration::from_secs(30), "backlog never queued");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // gRPC Execute, interactive.
    let mut c = exe.client();
    let r = with_priority(request("python", "print('rl')", ""), pb::Priority::Interactive);
    let resp = c.execute(as_tenant(r, RL)).await.expect("interactive run");
    assert_eq!(stdout(resp.get_ref()), "rl\n");
    done_order.lock().expect("lock").push("grpc".into());

    // HTTP /run_code, interactive by header.
    let body = serde_json::json!({"code": "print('via http')", "language": "python"}).to_string();
    let headers = format!("Authorization: Bearer {RL}\r\nX-Sandpool-Priority: interactive\r\n");
    let (code, text) = http_async(exe.http_addr.as_deref().expect("http"), "/run_code", headers, body).await;
    assert_eq!(code, 200, "{text}");
    done_order.lock().expect("lock").push("http".into());

    // An Evaluate with three tests: each test is a run that waits as interactive.
    let before = exe.metric("sandpool_tenant_admitted_total");
    let case = |n: u8| pb::StdioCase {
        stdin: vec![b'0' + n, b'\n'],
        expected_stdout: vec![b'0' + n, b'\n'],
    };
    let eval = pb::EvaluateRequest {
        language: "python".into(),
        completion: "print(input())".into(),
        priority: pb::Priority::Interactive as i32,
        tests: Some(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
            cases: vec![case(1), case(2), case(3)],
            comparison: None,
        })),
        options: Some(pb::EvaluateOptions {
            run_all_cases: true,
            ..Default::default()
        }),
        ..Default::default()
    };
    let r = c.evaluate(as_tenant(eval, RL)).await.expect("evaluate").into_inner();
    assert!(r.accepted, "{r:?}");
    done_order.lock().expect("lock").push("evaluate".into());
    assert!(exe.metric("sandpool_tenant_admitted_total") - before >= 3.0);

    for f in flood {
        f.await.expect("join");
    }
    let order = done_order.lock().expect("lock").clone();
    let pos = |l: &str| order.iter().position(|x| x == l).expect("finished");
    // All three interactive calls finished while most of the backlog still waited: each took
    // the next slot that freed (one 0.25 s batch run at most, plus the previous one).
    assert!(
        pos("evaluate") <= 6 + 3,
        "interactive calls waited behind the backlog: {order:?}"
    );
    let wait_label = "sandpool_tenant_queue_wait_seconds_count";
    assert!(exe.metric(wait_label) >= (backlog + 5) as f64);
}

/// A change of the tenants file reaches the running executor: a new tenant's token works
/// within seconds, a removed one stops working, and a broken file keeps the last good table.
#[tokio::test]
async fn a_changed_tenants_file_is_picked_up_without_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = tenants_file(dir.path(), "");
    let exe = executor(&file, 1).await;
    let mut c = exe.client();
    const LATE: &str = "late-token-0123456789abcdef";
    let caps = |t: &str| as_tenant(pb::GetCapabilitiesRequest {}, t);
    assert!(c.get_capabilities(caps(LATE)).await.is_err());
    tenants_file(
        dir.path(),
        &format!("\n[[tenant]]\nname = \"late\"\ntoken = \"{LATE}\"\n"),
    );
    let t = Instant::now();
    loop {
        if let Ok(r) = c.get_capabilities(caps(LATE)).await {
            assert_eq!(r.into_inner().tenant.expect("tenant").name, "late");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "the new tenant never became known"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Broken: the last good table stays (and the refusal is counted).
    std::fs::write(&file, "[[tenant]]\nname = \"BROKEN\"\n").expect("write");
    let t = Instant::now();
    while exe.metric("sandpool_tenants_reload_errors_total") < 1.0 {
        assert!(t.elapsed() < Duration::from_secs(15), "the broken file was never read");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.get_capabilities(caps(LATE)).await.expect("the last good table");
    // The tenant removed: its token stops working.
    tenants_file(dir.path(), "");
    let t = Instant::now();
    while c.get_capabilities(caps(LATE)).await.is_ok() {
        assert!(t.elapsed() < Duration::from_secs(15), "the removed tenant still works");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.get_capabilities(caps(RL)).await.expect("the others still do");
}

/// An E2B sandbox of the tenant `token` over HTTP: its id and access token.
fn e2b_create(addr: &str, token: &str) -> (String, String) {
    let (code, body) = http(
        addr,
        "POST",
        "/v2/sandboxes",
        &format!("X-API-KEY: {token}\r\n"),
        r#"{"templateID": "code-interpreter-v1"}"#,
    );
    assert_eq!(code, 201, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let s = |k: &str| v[k].as_str().expect(k).to_owned();
    (s("sandboxID"), s("envdAccessToken"))
}

fn data_headers(id: &str, token: &str) -> String {
    format!("E2b-Sandbox-Id: {id}\r\nE2b-Sandbox-Port: 49983\r\nX-Access-Token: {token}\r\n")
}

/// A request whose response may stream: the connection (kept open, so the stream is held),
/// the status, and what arrived with the head. Blocking.
fn open_stream(addr: &str, path: &str, headers: &str, body: &[u8]) -> (std::net::TcpStream, u16, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Content-Length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).expect("head");
    c.write_all(body).expect("body");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = c.read(&mut buf).expect("response head");
        assert!(n > 0, "closed before the head: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (c, status, text)
}

/// Reads `c` until one of `want` arrived or it closed; all it read.
fn read_until(c: &mut std::net::TcpStream, mut got: String, want: &[&str]) -> String {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    while !want.iter().any(|w| got.contains(w)) {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    got
}

/// Opens cells on sandbox `(id, token)` until one is refused (at most `most`): the held
/// streams, and the refusal (status, body).
fn cells_until_refused(
    addr: &str,
    (id, token): (&str, &str),
    most: usize,
) -> (Vec<std::net::TcpStream>, Option<(u16, String)>) {
    let h = format!("{}Content-Type: application/json\r\n", data_headers(id, token));
    let mut held = Vec::new();
    for i in 0..most {
        // The first cell sleeps; the others queue behind it, each holding its stream.
        let code = if i == 0 { "import time; time.sleep(300)" } else { "1" };
        let body = serde_json::json!({"code": code}).to_string();
        let (mut c, status, head) = open_stream(addr, "/execute", &h, body.as_bytes());
        if status != 200 {
            let all = read_until(&mut c, head, &["retry when one ends"]);
            return (held, Some((status, all)));
        }
        held.push(c);
    }
    (held, None)
}

/// E2B's output streams are divided by tenant and by sandbox (finding 5 of issue 46): a
/// tenant whose queued cells take its share of the executor's streams is refused with a
/// message naming its share, a sandbox past its cap likewise, and another tenant's cell
/// still streams.
#[tokio::test]
async fn one_tenants_queued_cells_leave_other_tenants_their_streams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = tenants_file(dir.path(), "");
    // The first cell of each sandbox holds the others' streams queued behind it until its
    // wall time: 30 s, three times the default, so that no stream ends (and frees its
    // place) while the test opens some 300 of them on a slow machine (10 s let a 52nd in).
    let exe = Executor::start(Options {
        slots: 2,
        languages: vec!["python", "bash"],
        http: true,
        env: vec![("SANDPOOL_TENANTS_FILE".into(), file.display().to_string())],
        extra_args: vec!["--default-wall-time-ms".into(), "30000".into()],
        ..Default::default()
    })
    .await;
    let addr = exe.http_addr.clone().expect("http");
    let outcome = tokio::task::spawn_blocking(move || {
        // Weights rl 3, sweeps 1, agents 1: sweeps' share is 256 * 1 / 5 = 51 streams.
        let sweeps = e2b_create(&addr, SWEEPS);
        let (held, refused) = cells_until_refused(&addr, (&sweeps.0, &sweeps.1), 300);
        let (status, body) = refused.expect("a tenant took every stream of the executor");
        assert_eq!(status, 429, "{body}");
        assert!(
            body.contains("tenant \\\"sweeps\\\"") || body.contains("tenant \"sweeps\""),
            "{body}"
        );
        assert!(body.contains("its share"), "{body}");
        assert_eq!(held.len(), 51, "sweeps' share of 256 by weight 1 of 5");
        // One sandbox of rl (share 153) stops at the per-sandbox cap, 64.
        let rl = e2b_create(&addr, RL);
        let (rl_held, refused) = cells_until_refused(&addr, (&rl.0, &rl.1), 300);
        let (status, body) = refused.expect("one sandbox took every stream of the executor");
        assert_eq!(status, 429, "{body}");
        assert!(body.contains("per-sandbox cap"), "{body}");
        assert_eq!(rl_held.len(), 64);
        // Another tenant's cell still streams, and runs.
        let agents = e2b_create(&addr, AGENTS);
        let h = format!(
            "{}Content-Type: application/json\r\nConnection: close\r\n",
            data_headers(&agents.0, &agents.1)
        );
        let (mut c, status, head) = open_stream(&addr, "/execute", &h, br#"{"code": "print(6 * 7)"}"#);
        let all = read_until(&mut c, head, &["number_of_executions"]);
        assert_eq!(status, 200, "{all}");
        assert!(all.contains("42"), "{all}");
        (held.len(), rl_held.len())
    })
    .await
    .expect("streams");
    assert_eq!(outcome, (51, 64));
}

/// Waits until the tenant of `token` is known (`true`) or unknown (`false`) to `exe`.
async fn wait_tenant(exe: &Executor, token: &str, known: bool) {
    let mut c = exe.client();
    let t = Instant::now();
    while c
        .get_capabilities(as_tenant(pb::GetCapabilitiesRequest {}, token))
        .await
        .is_ok()
        != known
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the tenants file change was never picked up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Session ownership follows the tenant's identity, not its name (finding 6 of issue 46):
/// a rotated token keeps the tenant's sandboxes; a tenant removed from the file has its
/// sandboxes ended, and a later tenant given its name owns none of them, nor can their
/// access tokens reach them.
#[tokio::test]
async fn a_tenant_given_a_removed_tenants_name_inherits_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    const LATE: &str = "late-token-0123456789abcdef";
    const ROTATED: &str = "late-rotated-0123456789abcdef";
    const IMPOSTOR: &str = "late-impostor-0123456789abcdef";
    let late = |token: &str| format!("\n[[tenant]]\nname = \"late\"\ntoken = \"{token}\"\n");
    let file = tenants_file(dir.path(), &late(LATE));
    let exe = executor(&file, 1).await;
    let addr = exe.http_addr.clone().expect("http");
    let a = addr.clone();
    let (id, access) = tokio::task::spawn_blocking(move || e2b_create(&a, LATE))
        .await
        .expect("create");
    let get = |token: &'static str| {
        let (addr, id) = (addr.clone(), id.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                http(
                    &addr,
                    "GET",
                    &format!("/sandboxes/{id}"),
                    &format!("X-API-KEY: {token}\r\n"),
                    "",
                )
            })
            .await
            .expect("get")
        }
    };
    let cell = || {
        let (addr, h) = (addr.clone(), data_headers(&id, &access));
        async move {
            tokio::task::spawn_blocking(move || http(&addr, "POST", "/execute", &h, r#"{"code": "6 * 7"}"#))
                .await
                .expect("execute")
        }
    };
    assert_eq!(get(LATE).await.0, 200);
    // The same tenant with its token rotated keeps its sandbox.
    tenants_file(dir.path(), &late(ROTATED));
    wait_tenant(&exe, ROTATED, true).await;
    assert_eq!(
        get(ROTATED).await.0,
        200,
        "a rotated token keeps the tenant's sandboxes"
    );
    assert!(cell().await.1.contains("42"));
    // Removed: its sandbox ends (its access token reaches nothing)...
    tenants_file(dir.path(), "");
    wait_tenant(&exe, ROTATED, false).await;
    let t = Instant::now();
    loop {
        let (code, body) = cell().await;
        if code == 502 && body.contains("was not found") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "a removed tenant's sandbox still runs: {code} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // ...and a new tenant given the name later owns none of it.
    tenants_file(dir.path(), &late(IMPOSTOR));
    wait_tenant(&exe, IMPOSTOR, true).await;
    assert_eq!(get(IMPOSTOR).await.0, 404);
    let a = exe.http_addr.clone().expect("http");
    let (code, list) = tokio::task::spawn_blocking(move || {
        http(&a, "GET", "/v2/sandboxes", &format!("X-API-KEY: {IMPOSTOR}\r\n"), "")
    })
    .await
    .expect("list");
    assert_eq!(code, 200, "{list}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&list).expect("json"),
        serde_json::json!([])
    );
    let (code, body) = cell().await;
    assert_eq!(code, 502, "{body}");
}

/// The CPU weight files of the executor's cgroups that hold a process whose command line
/// contains `what`: (path, value).
fn cpu_weights_of(exe: &Executor, what: &str) -> Vec<(std::path::PathBuf, u64)> {
    let name = sandpool_sandbox::cgroup_name(exe.work_root.path());
    let mut found = Vec::new();
    let mut todo = vec![(std::path::PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            if e.file_name().to_str() == Some(name.as_str()) {
                // Seats live below the sessions' parent (their memory ceiling), slots beside it.
                let children = |d: std::path::PathBuf| std::fs::read_dir(d).into_iter().flatten().flatten();
                for s in children(e.path()).chain(children(e.path().join("sessions"))) {
                    let procs = std::fs::read_to_string(s.path().join("cgroup.procs")).unwrap_or_default();
                    let holds = procs.lines().any(|pid| {
                        std::fs::read(format!("/proc/{}/cmdline", pid.trim()))
                            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(what))
                    });
                    for f in ["cpu.weight", "cpu.shares"] {
                        if let (true, Ok(v)) = (holds, std::fs::read_to_string(s.path().join(f))) {
                            found.push((s.path().join(f), v.trim().parse().expect("weight")));
                        }
                    }
                }
            } else if depth < 6 {
                todo.push((e.path(), depth + 1));
            }
        }
    }
    found
}

/// A batch tenant's background commands count against its terms (finding 5 of issue 46):
/// past the per-sandbox cap a command is refused naming it, and the seat they run in
/// weighs the batch weight on the CPU (cgroup v2 cpu.weight 25, v1 cpu.shares 256),
/// a quarter of a slot's.
#[tokio::test]
async fn a_batch_tenants_background_commands_are_capped_and_weigh_as_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = tenants_file(dir.path(), "");
    let exe = executor(&file, 1).await;
    let addr = exe.http_addr.clone().expect("http");
    let refused = tokio::task::spawn_blocking(move || {
        let (id, access) = e2b_create(&addr, SWEEPS);
        let h = format!(
            "{}Content-Type: application/connect+json\r\nConnect-Protocol-Version: 1\r\n",
            data_headers(&id, &access)
        );
        let start = |n: usize| {
            let msg = serde_json::json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", format!("exec sleep 300{n}")]}});
            let msg = msg.to_string().into_bytes();
            let mut body = vec![0u8];
            body.extend_from_slice(&(msg.len() as u32).to_be_bytes());
            body.extend_from_slice(&msg);
            let (mut c, status, head) = open_stream(&addr, "/process.Process/Start", &h, &body);
            assert_eq!(status, 200, "{head}");
            let got = read_until(&mut c, head, &["\"pid\"", "background processes"]);
            (c, got)
        };
        let mut held = Vec::new();
        for n in 0..16 {
            let (c, got) = start(n);
            assert!(got.contains("\"start\""), "command {n}: {got}");
            held.push(c);
        }
        let (_c, got) = start(16);
        drop(held);
        got
    })
    .await
    .expect("commands");
    assert!(refused.contains("resource_exhausted"), "{refused}");
    assert!(refused.contains("already runs 16 background processes"), "{refused}");
    let weights = cpu_weights_of(&exe, "sleep 300");
    assert!(!weights.is_empty(), "no CPU weight found for the seat of the commands");
    for (path, w) in weights {
        let want = if path.ends_with("cpu.weight") { 25 } else { 256 };
        assert_eq!(w, want, "{}", path.display());
    }
}
