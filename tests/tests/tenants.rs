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
