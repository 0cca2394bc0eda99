//! E2B's API on the executor's HTTP port (control plane, code interpreter, sandbox daemon),
//! as a hostile caller would send it, against the real executor over loopback: bad JSON,
//! wrong types, huge, chunked and trickled bodies, unknown ids, wrong access tokens and
//! another tenant's sandbox. Each gets a 4xx naming what is wrong (or the SDK's "not found"),
//! never a run, SANDBOX_ERROR or a crash. The unmodified SDKs themselves run in
//! clients/python/tests/test_e2b.py (pause and resume: the last test here, through the SDK too).

use sandpool_tests::{Executor, Options, http};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::time::Duration;

const A: &str = "tenant-a-token-0123456789abcdef";
const B: &str = "tenant-b-token-0123456789abcdef";

async fn executor(dir: &std::path::Path, extra: &[&str]) -> Executor {
    let f = dir.join("tenants.toml");
    std::fs::write(
        &f,
        format!("[[tenant]]\nname = \"a\"\ntoken = \"{A}\"\n\n[[tenant]]\nname = \"b\"\ntoken = \"{B}\"\n"),
    )
    .expect("tenants file");
    Executor::start(Options {
        slots: 4,
        languages: vec!["python", "bash"],
        http: true,
        env: vec![("SANDPOOL_TENANTS_FILE".into(), f.display().to_string())],
        extra_args: extra.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .await
}

/// One request: status and body (parsed as JSON when it is).
async fn call(exe: &Executor, method: &str, path: &str, headers: String, body: String) -> (u16, Value) {
    let addr = exe.http_addr.clone().expect("http");
    let (method, path) = (method.to_owned(), path.to_owned());
    let (code, text) = tokio::task::spawn_blocking(move || http(&addr, &method, &path, &headers, &body))
        .await
        .expect("http");
    (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn key(k: &str) -> String {
    format!("X-API-KEY: {k}\r\n")
}

fn data(id: &str, token: &str) -> String {
    format!("E2b-Sandbox-Id: {id}\r\nE2b-Sandbox-Port: 49983\r\nX-Access-Token: {token}\r\n")
}

/// Creates a sandbox as `api_key`; its id and access token.
async fn create(exe: &Executor, api_key: &str, body: Value) -> (String, String) {
    let (code, v) = call(exe, "POST", "/v2/sandboxes", key(api_key), body.to_string()).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["envdVersion"], "0.5.7", "{v}");
    let id = v["sandboxID"].as_str().expect("sandboxID").to_owned();
    let token = v["envdAccessToken"].as_str().expect("envdAccessToken").to_owned();
    assert_eq!(token.len(), 32, "128 random bits: {v}");
    (id, token)
}

/// A body is refused with `code` and a message naming `field`.
fn assert_names(code: u16, v: &Value, want: u16, field: &str) {
    assert_eq!(code, want, "{v}");
    let msg = v["message"].as_str().or_else(|| v.as_str()).unwrap_or_default();
    assert!(msg.contains(field), "{field} not named: {v}");
}

#[tokio::test]
async fn the_control_plane_takes_the_token_and_names_what_it_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = executor(dir.path(), &["--max-sessions", "2"]).await;
    let tpl = json!({"templateID": "code-interpreter-v1"}).to_string();
    for h in [String::new(), key("wrong-token-0123456789abcdef")] {
        let (code, _) = call(&exe, "POST", "/v2/sandboxes", h, tpl.clone()).await;
        assert_eq!(code, 401, "no token, no sandbox");
    }
    for (body, want, field) in [
        ("{not json".to_owned(), 400, "request body"),
        (json!({"templateID": 7}).to_string(), 400, "templateID"),
        (json!({}).to_string(), 400, "templateID"),
        (json!({"templateID": "my-custom"}).to_string(), 400, "templateID"),
        (
            json!({"templateID": "base", "timeout": "soon"}).to_string(),
            400,
            "timeout",
        ),
        (json!({"templateID": "base", "timeout": 0}).to_string(), 400, "timeout"),
        (
            json!({"templateID": "base", "metadata": {"k": "x".repeat(70_000)}}).to_string(),
            400,
            "metadata",
        ),
        (
            json!({"templateID": "base", "metadata": {"k": 1}}).to_string(),
            400,
            "metadata",
        ),
        (
            json!({"templateID": "base", "allow_internet_access": true}).to_string(),
            400,
            "internet",
        ),
        (
            json!({"templateID": "base", "autoResume": {"enabled": true}}).to_string(),
            400,
            "autoResume",
        ),
        (
            json!({"templateID": "base", "volumeMounts": [{"name": "v"}]}).to_string(),
            400,
            "volume",
        ),
        (
            json!({"templateID": "base", "envVars": {"A-B": "1"}}).to_string(),
            400,
            "envVars",
        ),
    ] {
        let (code, v) = call(&exe, "POST", "/v2/sandboxes", key(A), body.clone()).await;
        assert_names(code, &v, want, field);
    }
    // Older SDKs send `allow_internet_access: true` and `autoResume: {enabled: false}` on every
    // create, to the v1 path: not a request for internet, so not refused.
    let (code, v) = call(
        &exe,
        "POST",
        "/sandboxes",
        key(A),
        json!({"templateID": "base", "allow_internet_access": true, "autoPause": false, "autoResume": {"enabled": false}, "secure": true})
            .to_string(),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let first = v["sandboxID"].as_str().expect("id").to_owned();
    for (method, path) in [
        ("GET", "/sandboxes/nope-vm".to_owned()),
        ("DELETE", "/sandboxes/nope-vm".to_owned()),
        ("POST", "/v2/sandboxes/nope-vm/connect".to_owned()),
    ] {
        let (code, v) = call(&exe, method, &path, key(A), "{}".into()).await;
        assert_eq!(code, 404, "{method} {path}: {v}");
    }
    // Pause, resume, snapshots and forks are served (the last tests here; the SDK's fork with
    // state in gateway.rs): a fork's count is E2B's 1 to 20, each copy a sandbox of its own.
    let fork = format!("/sandboxes/{first}/fork");
    for bad in [r#"{"count":0}"#, r#"{"count":21}"#, r#"{"timeout":0}"#, r#"{"cnt":1}"#] {
        let (code, v) = call(&exe, "POST", &fork, key(A), bad.into()).await;
        let field = if bad.contains("timeout") {
            "timeout"
        } else if bad.contains("cnt") {
            "cnt"
        } else {
            "count"
        };
        assert_names(code, &v, 400, field);
    }
    // (This executor holds two sessions: one copy.)
    let (code, v) = call(&exe, "POST", &fork, key(A), r#"{"count":1,"timeout":60}"#.into()).await;
    assert_eq!(code, 201, "{v}");
    let copies = v.as_array().expect("a list");
    assert_eq!(copies.len(), 1, "{v}");
    for c in copies {
        let id = c["sandbox"]["sandboxID"].as_str().expect("sandboxID");
        assert!(id != first && id.ends_with("-vm"), "{v}");
        assert_eq!(c["sandbox"]["envdAccessToken"].as_str().map(str::len), Some(32), "{v}");
        let (code, _) = call(&exe, "DELETE", &format!("/sandboxes/{id}"), key(A), String::new()).await;
        assert_eq!(code, 204);
    }
    // Another caller's sandbox is not there to fork.
    let (code, v) = call(&exe, "POST", &fork, key(B), "{}".into()).await;
    assert_eq!(code, 404, "{v}");
    // Listing snapshots is served (a_snapshot_starts_new_sandboxes_with_its_files_through_the_sdk);
    // one snapshot's own route is not, and says so.
    let (code, v) = call(&exe, "GET", "/snapshots/x", key(A), String::new()).await;
    assert_names(code, &v, 400, "this call");
    let (code, v) = call(&exe, "GET", "/snapshots?limit=5000", key(A), String::new()).await;
    assert_names(code, &v, 400, "limit");
    let (code, v) = call(
        &exe,
        "POST",
        &format!("/sandboxes/{first}/timeout"),
        key(A),
        json!({"timeout": "x"}).to_string(),
    )
    .await;
    assert_names(code, &v, 400, "timeout");
    // A sandbox is a session: the executor's cap is E2B's rate limit, with the reason.
    create(&exe, A, json!({"templateID": "base"})).await;
    let (code, v) = call(&exe, "POST", "/v2/sandboxes", key(A), tpl.clone()).await;
    assert_names(code, &v, 429, "--max-sessions");
    assert_eq!(exe.runs_total(), 0.0, "nothing ran");
}

#[tokio::test]
async fn a_sandbox_is_its_creators_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = executor(dir.path(), &["--max-sessions", "3"]).await;
    let (id, token) = create(
        &exe,
        A,
        json!({"templateID": "code-interpreter-v1", "metadata": {"run": "1"}}),
    )
    .await;
    let (other_id, other_token) = create(&exe, A, json!({"templateID": "base"})).await;
    let cell = json!({"code": "print(6 * 7)"}).to_string();
    // The data plane: the id alone, a wrong token, or another sandbox's token are "not found".
    for h in [
        format!("E2b-Sandbox-Id: {id}\r\n"),
        data(&id, "0123456789abcdef0123456789abcdef"),
        data(&id, &other_token),
        data(&other_id, &token),
        data("nope-vm", &token),
    ] {
        let (code, v) = call(&exe, "POST", "/execute", h.clone(), cell.clone()).await;
        assert_eq!(code, 502, "{h}: {v}");
        assert!(
            v["message"].as_str().unwrap_or_default().contains("was not found"),
            "{v}"
        );
        let (code, _) = call(&exe, "GET", "/health", h.clone(), String::new()).await;
        assert_eq!(code, 502, "{h}");
    }
    let (code, v) = call(&exe, "POST", "/execute", String::new(), cell.clone()).await;
    assert_names(code, &v, 400, "E2b-Sandbox-Id");
    assert_eq!(exe.runs_total(), 0.0, "nothing ran without the sandbox's token");
    let (code, v) = call(&exe, "POST", "/execute", data(&id, &token), cell.clone()).await;
    assert_eq!(code, 200, "{v}");
    assert!(v.as_str().unwrap_or_default().contains("\"text\":\"42\\n\""), "{v}");
    // The control plane: tenant b sees none of a's sandboxes and cannot touch them.
    let (code, v) = call(&exe, "GET", "/v2/sandboxes", key(B), String::new()).await;
    assert_eq!((code, v.clone()), (200, json!([])), "{v}");
    for (method, path, body) in [
        ("GET", format!("/sandboxes/{id}"), String::new()),
        (
            "POST",
            format!("/sandboxes/{id}/timeout"),
            json!({"timeout": 5}).to_string(),
        ),
        ("POST", format!("/v2/sandboxes/{id}/connect"), "{}".into()),
        ("DELETE", format!("/sandboxes/{id}"), String::new()),
    ] {
        let (code, v) = call(&exe, method, &path, key(B), body).await;
        assert_eq!(code, 404, "{method} {path}: {v}");
    }
    // a sees both, filtered by metadata, paged.
    let (code, v) = call(&exe, "GET", "/v2/sandboxes?metadata=run%3D1", key(A), String::new()).await;
    assert_eq!(code, 200);
    let ids: Vec<&str> = v
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|s| s["sandboxID"].as_str())
        .collect();
    assert_eq!(ids, [id.as_str()], "{v}");
    assert_eq!(v[0]["metadata"]["run"], "1", "{v}");
    let (_, page) = call(&exe, "GET", "/v2/sandboxes?limit=1", key(A), String::new()).await;
    assert_eq!(page.as_array().map(Vec::len), Some(1), "{page}");
    // set_timeout moves the end; kill ends it, and then it is gone everywhere.
    let (code, _) = call(
        &exe,
        "POST",
        &format!("/sandboxes/{id}/timeout"),
        key(A),
        json!({"timeout": 3}).to_string(),
    )
    .await;
    assert_eq!(code, 204);
    let (_, info) = call(&exe, "GET", &format!("/sandboxes/{id}"), key(A), String::new()).await;
    assert_eq!(info["templateID"], "code-interpreter-v1", "{info}");
    let (code, _) = call(&exe, "DELETE", &format!("/sandboxes/{other_id}"), key(A), String::new()).await;
    assert_eq!(code, 204);
    let (code, _) = call(&exe, "GET", "/health", data(&other_id, &other_token), String::new()).await;
    assert_eq!(code, 502, "a killed sandbox is not running");
    // The timeout of 3 s ends the first one.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (code, _) = call(&exe, "GET", &format!("/sandboxes/{id}"), key(A), String::new()).await;
    assert_eq!(code, 404, "ended at its timeout");
    let (code, _) = call(&exe, "POST", "/execute", data(&id, &token), cell).await;
    assert_eq!(code, 502);
}

/// Sends `head` then `body` in pieces, `gap` apart; the raw reply.
fn raw(addr: &str, head: &str, pieces: &[&[u8]], gap: Duration) -> String {
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    c.write_all(head.as_bytes()).expect("head");
    for p in pieces {
        std::thread::sleep(gap);
        if c.write_all(p).is_err() {
            break;
        }
    }
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn bad_data_plane_requests_name_the_field_and_odd_bodies_are_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = executor(dir.path(), &["--max-sessions", "2", "--http-body-timeout-ms", "1500"]).await;
    let (id, token) = create(&exe, A, json!({"templateID": "code-interpreter-v1"})).await;
    let h = data(&id, &token);
    let runs = exe.runs_total();
    for (path, body, want, field) in [
        ("/execute", "{not json".to_owned(), 400, "request body"),
        ("/execute", json!({"code": 5}).to_string(), 400, "request body"),
        (
            "/execute",
            json!({"code": "1", "language": "cobol"}).to_string(),
            400,
            "language",
        ),
        (
            "/execute",
            json!({"code": "1", "context_id": "other"}).to_string(),
            400,
            "context_id",
        ),
        (
            "/execute",
            json!({"code": "1", "env_vars": {"A": "1"}}).to_string(),
            400,
            "env_vars",
        ),
        ("/filesystem.Filesystem/Stat", json!({}).to_string(), 400, "path"),
        (
            "/filesystem.Filesystem/Stat",
            json!({"path": "/etc/passwd"}).to_string(),
            400,
            "path",
        ),
        (
            "/filesystem.Filesystem/Move",
            json!({"source": "a"}).to_string(),
            400,
            "destination",
        ),
        ("/filesystem.Filesystem/ListDir", "[1".to_owned(), 400, "request body"),
        (
            "/process.Process/SendSignal",
            json!({"process": {"pid": 1}, "signal": "SIGNAL_SIGHUP"}).to_string(),
            400,
            "signal",
        ),
        (
            "/process.Process/SendInput",
            json!({"process": {"pid": 1}, "input": {"stdin": "%%"}}).to_string(),
            400,
            "input.stdin",
        ),
        ("/process.Process/Update", json!({}).to_string(), 501, "Update"),
    ] {
        let (code, v) = call(&exe, "POST", path, h.clone(), body.clone()).await;
        assert_names(code, &v, want, field);
    }
    for (path, want, field) in [("/files", 400, "path"), ("/files?path=/etc/passwd", 404, "outside")] {
        let (code, v) = call(&exe, "GET", path, h.clone(), String::new()).await;
        assert_names(code, &v, want, field);
    }
    let (code, v) = call(
        &exe,
        "GET",
        "/files?path=/home/user/missing.txt",
        h.clone(),
        String::new(),
    )
    .await;
    assert_names(code, &v, 404, "missing.txt");
    assert_eq!(exe.runs_total(), runs, "bad requests ran nothing");
    // The filesystem's own errors come from inside the sandbox, as Connect codes.
    let (code, v) = call(
        &exe,
        "POST",
        "/filesystem.Filesystem/Stat",
        h.clone(),
        json!({"path": "nope"}).to_string(),
    )
    .await;
    assert_eq!((code, v["code"].clone()), (404, json!("not_found")), "{v}");
    let (code, v) = call(
        &exe,
        "POST",
        "/filesystem.Filesystem/Remove",
        h.clone(),
        json!({"path": "/home/user/.sandpool"}).to_string(),
    )
    .await;
    assert_eq!((code, v["code"].clone()), (403, json!("permission_denied")), "{v}");
    // A streaming call's bad envelope, and a cwd outside the files: errors in the stream's end.
    let addr = exe.http_addr.clone().expect("http");
    let start = |body: Vec<u8>, h: String| {
        let addr = addr.clone();
        tokio::task::spawn_blocking(move || {
            let head = format!(
                "POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\n{h}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            );
            let mut chunked = format!("{:x}\r\n", body.len()).into_bytes();
            chunked.extend_from_slice(&body);
            chunked.extend_from_slice(b"\r\n0\r\n\r\n");
            raw(&addr, &head, &[&chunked], Duration::ZERO)
        })
    };
    let envelope = |v: Value| {
        let b = v.to_string().into_bytes();
        let mut e = vec![0u8];
        e.extend_from_slice(&(b.len() as u32).to_be_bytes());
        e.extend_from_slice(&b);
        e
    };
    let reply = start(b"{}".to_vec(), h.clone()).await.expect("start");
    assert!(
        reply.contains("invalid_argument") && reply.contains("request body"),
        "{reply}"
    );
    let reply = start(envelope(json!({"process": {"cmd": "ls", "cwd": "/etc"}})), h.clone())
        .await
        .expect("start");
    assert!(
        reply.contains("invalid_argument") && reply.contains("process.cwd"),
        "{reply}"
    );
    // A chunked start runs, and its events come back framed.
    let reply = start(
        envelope(json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi; exit 4"]}})),
        h.clone(),
    )
    .await
    .expect("start");
    assert!(reply.contains("\"exitCode\":4"), "{reply}");
    assert!(reply.contains("\"stdout\":\"aGkK\""), "base64 of hi: {reply}");
    // A body trickled past the body timeout: 408 and the connection closes; one larger than
    // the executor takes: 413 before it is read.
    let (a, hh) = (addr.clone(), h.clone());
    let reply = tokio::task::spawn_blocking(move || {
        let head = format!("POST /execute HTTP/1.1\r\nHost: x\r\n{hh}Content-Length: 100\r\n\r\n");
        raw(&a, &head, &[b"{", b"\"", b"c"], Duration::from_millis(900))
    })
    .await
    .expect("trickle");
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    let (a, hh) = (addr.clone(), h.clone());
    let reply = tokio::task::spawn_blocking(move || {
        let head = format!(
            "POST /files?path=big HTTP/1.1\r\nHost: x\r\n{hh}Content-Length: {}\r\n\r\n",
            80u64 << 20
        );
        raw(&a, &head, &[b"--x"], Duration::ZERO)
    })
    .await
    .expect("huge");
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    // Processes that are not there: Connect's not_found, for a signal and for input too.
    for (path, body) in [
        (
            "/process.Process/SendSignal",
            json!({"process": {"pid": 424242}, "signal": "SIGNAL_SIGKILL"}),
        ),
        (
            "/process.Process/SendInput",
            json!({"process": {"pid": 424242}, "input": {"stdin": "eA=="}}),
        ),
    ] {
        let (code, v) = call(&exe, "POST", path, h.clone(), body.to_string()).await;
        assert_eq!((code, v["code"].clone()), (404, json!("not_found")), "{path}: {v}");
    }
    // A background process streams until the sandbox is killed under it: the stream ends
    // (no hang), and nothing of the sandbox is left running.
    let (bg_id, bg_token) = create(&exe, A, json!({"templateID": "base"})).await;
    let watch = start(
        envelope(json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo started; sleep 600"]}})),
        data(&bg_id, &bg_token),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (code, _) = call(&exe, "DELETE", &format!("/sandboxes/{bg_id}"), key(A), String::new()).await;
    assert_eq!(code, 204);
    let reply = tokio::time::timeout(Duration::from_secs(20), watch)
        .await
        .expect("the stream ended when its sandbox did")
        .expect("start");
    assert!(reply.contains("\"pid\""), "{reply}");
    assert!(
        reply.contains("c3RhcnRlZAo="),
        "base64 of started, streamed before the end: {reply}"
    );
    assert!(
        reply.contains("not_found") && !reply.contains("\"exitCode\""),
        "{reply}"
    );
    let sleepers = std::process::Command::new("pgrep")
        .args(["-f", "sleep 600"])
        .output()
        .expect("pgrep");
    assert!(
        sleepers.stdout.is_empty(),
        "the killed sandbox's process is still running"
    );
    // A streaming method that is refused ends its stream with the error (not a bare 400).
    let (a, hh) = (addr.clone(), h.clone());
    let reply = tokio::task::spawn_blocking(move || {
        let head = format!(
            "POST /filesystem.Filesystem/WatchDir HTTP/1.1\r\nHost: x\r\n{hh}Content-Type: application/connect+json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        raw(&a, &head, &[], Duration::ZERO)
    })
    .await
    .expect("watch");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("unimplemented") && reply.contains("WatchDir"), "{reply}");
    // A gzip bomb (small on the wire, larger than /work once decompressed) is refused,
    // never held whole.
    let bomb = {
        use flate2::write::GzEncoder;
        let mut z = GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..300 {
            z.write_all(&zeros).expect("gzip");
        }
        z.finish().expect("gzip")
    };
    assert!(bomb.len() < 1 << 20, "{} bytes compressed", bomb.len());
    let (a, hh) = (addr.clone(), h.clone());
    let reply = tokio::task::spawn_blocking(move || {
        let head = format!(
            "POST /files?path=bomb HTTP/1.1\r\nHost: x\r\n{hh}Content-Type: application/octet-stream\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            bomb.len()
        );
        raw(&a, &head, &[&bomb], Duration::ZERO)
    })
    .await
    .expect("bomb");
    // Whichever comes first: the byte budget (each decompressed piece is charged) or /work's size.
    let budget = reply.starts_with("HTTP/1.1 503") && reply.contains("--max-inflight-bytes");
    let too_big = reply.starts_with("HTTP/1.1 400") && reply.contains("decompressed");
    assert!(budget || too_big, "{reply}");
    // The executor is still there and the sandbox still works, also at `//execute` (a base
    // URL with a trailing slash).
    let (code, v) = call(
        &exe,
        "POST",
        "//execute",
        h.clone(),
        json!({"code": "1 + 1"}).to_string(),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert!(v.as_str().unwrap_or_default().contains("\"text\":\"2\""), "{v}");
    let metrics = {
        let mut s = std::net::TcpStream::connect(&exe.metrics_addr).expect("metrics connect");
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    assert!(
        metrics.contains("sandpool_http_requests_total{protocol=\"e2b\",code=\"200\"}"),
        "{metrics}"
    );
}

/// Sends `head` (a request whose body never comes) and leaves the connection open; reads
/// what comes back within `wait`: (whether the server closed it, what it said).
fn stalled(addr: &str, head: &str) -> std::net::TcpStream {
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.write_all(head.as_bytes()).expect("head");
    c
}

fn answer_of(c: &mut std::net::TcpStream, wait: Duration) -> (bool, String) {
    c.set_read_timeout(Some(wait)).expect("timeout");
    let mut out = Vec::new();
    let closed = c.read_to_end(&mut out).is_ok();
    (closed, String::from_utf8_lossy(&out).into_owned())
}

const MIB: usize = 1 << 20;

/// Issue 46, finding 1: the data plane checks the sandbox and its access token before it
/// reads or charges a body. Callers with no token that declare large bodies and send
/// nothing are answered at once, hold none of the byte budget, and other tenants' HTTP and
/// gRPC calls go on; an unauthenticated gRPC call is refused before its body is charged too.
#[tokio::test]
async fn unauthenticated_callers_hold_no_bytes_before_they_are_refused() {
    use futures::StreamExt;
    use tower::ServiceExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let budget = (16 * MIB).to_string();
    let cap = (8 * MIB).to_string();
    let exe = executor(
        dir.path(),
        &["--max-inflight-bytes", &budget, "--max-request-bytes", &cap],
    )
    .await;
    let (id, _token) = create(&exe, A, json!({"templateID": "code-interpreter-v1"})).await;
    let addr = exe.http_addr.clone().expect("http");
    let wrong = data(&id, "0123456789abcdef0123456789abcdef");
    let heads = [
        ("/execute", String::new()),
        ("/files?path=x", wrong.clone()),
        ("/process.Process/Start", wrong.clone()),
        ("/filesystem.Filesystem/Stat", data("no-such-sandbox", "t")),
        ("/execute", wrong.clone()),
    ];
    let mut conns: Vec<_> = heads
        .iter()
        .map(|(path, h)| {
            stalled(
                &addr,
                &format!(
                    "POST {path} HTTP/1.1\r\nHost: x\r\n{h}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    8 * MIB
                ),
            )
        })
        .collect();
    // A health check that declares a body is answered without reading it.
    conns.push(stalled(
        &addr,
        &format!(
            "GET /health HTTP/1.1\r\nHost: x\r\n{wrong}Content-Length: {}\r\n\r\n",
            8 * MIB
        ),
    ));
    // An unauthenticated gRPC call promising 8 MiB, 10 bytes of it, then nothing more.
    let mut start = vec![0u8];
    start.extend_from_slice(&(8 * MIB as u32).to_be_bytes());
    start.extend_from_slice(&[0x0a, 0x06, b'p', b'y', b't', b'h', b'o', b'n', 0x12, 0x00]);
    let frames =
        futures::stream::once(async move { Ok::<_, tonic::Status>(http_body::Frame::data(bytes::Bytes::from(start))) })
            .chain(futures::stream::pending());
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{}/sandpool.v1.Executor/Execute", exe.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::new(http_body_util::StreamBody::new(frames)))
        .expect("request");
    let grpc = tokio::time::timeout(Duration::from_secs(20), exe.channel.clone().oneshot(req))
        .await
        .expect("the unauthenticated call was answered at once")
        .expect("a response");
    let status = tonic::Status::from_header_map(grpc.headers()).expect("a trailers-only status");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");

    // Meanwhile a tenant's calls go on: nothing of the budget is held for the strangers.
    let auth = format!("Authorization: Bearer {A}\r\n");
    let (code, v) = call(
        &exe,
        "POST",
        "/run_code",
        auth,
        json!({"code": "print(6 * 7)", "language": "python"}).to_string(),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["run_result"]["stdout"], "42\n", "{v}");
    let mut req = tonic::Request::new(sandpool_tests::request("python", "print('grpc')", ""));
    req.metadata_mut()
        .insert("authorization", format!("Bearer {A}").parse().expect("metadata"));
    let r = exe
        .client()
        .execute(req)
        .await
        .expect("a tenant's gRPC call")
        .into_inner();
    assert_eq!(sandpool_tests::stdout(&r), "grpc\n", "{}", sandpool_tests::describe(&r));
    assert_eq!(
        exe.metric("sandpool_inflight_bytes"),
        0.0,
        "nothing charged for the strangers"
    );
    // Each stranger had its answer at once, and its connection closed.
    for (i, c) in conns.iter_mut().enumerate() {
        let (closed, answer) = answer_of(c, Duration::from_secs(10));
        assert!(closed, "connection {i} was left open: {answer}");
        let code: u16 = answer
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        // The SDK's "sandbox not found" is a 502 (E2B's envd convention), a missing id a 400.
        assert!(matches!(code, 400 | 502), "connection {i}: {answer}");
    }
}

/// Issue 46, finding 4: a huge create body (metadata of many small entries) and a huge
/// `SendInput` are refused before they are decoded, naming the field, without raising the
/// executor's peak by several times their size.
#[tokio::test]
async fn huge_create_and_send_input_bodies_are_refused_before_decoding() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = (48 * MIB).to_string();
    let exe = executor(dir.path(), &["--max-request-bytes", &cap]).await;
    let (id, token) = create(&exe, A, json!({"templateID": "base"})).await;
    let h = data(&id, &token);

    // A 40 MiB create body (metadata of many small entries) and a 40 MiB SendInput.
    let hwm = exe.status_kib("VmHWM");
    let mut meta = String::with_capacity(41 * MIB);
    meta.push_str("{\"templateID\": \"base\", \"metadata\": {");
    let mut i = 0u64;
    while meta.len() < 40 * MIB {
        meta.push_str(&format!("\"k{i}\": \"v\","));
        i += 1;
    }
    meta.push_str("\"end\": \"v\"}}");
    let (code, v) = call(&exe, "POST", "/v2/sandboxes", key(A), meta).await;
    assert_names(code, &v, 413, "request body");
    let stdin = "A".repeat(40 * MIB);
    let body = json!({"process": {"pid": 1}, "input": {"stdin": stdin}}).to_string();
    drop(stdin);
    let (code, v) = call(&exe, "POST", "/process.Process/SendInput", h.clone(), body).await;
    assert_names(code, &v, 400, "input.stdin");
    let grown = exe.status_kib("VmHWM").saturating_sub(hwm) / 1024;
    // Each body is read whole (charged) before it is refused: 40 MiB, and a copy at most.
    eprintln!("peak +{grown} MiB for two refused 40 MiB bodies");
    assert!(
        grown < 160,
        "the executor's peak rose {grown} MiB for two refused 40 MiB bodies"
    );
}

/// Issue 46, finding 4: a command's output stream that its client never reads holds a
/// window of the executor's memory (256 KiB), not the output: the rest waits in the
/// sandbox's files.
#[tokio::test]
async fn unread_output_streams_hold_a_window_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = executor(dir.path(), &[]).await;
    let (id, token) = create(&exe, A, json!({"templateID": "base"})).await;
    let h = data(&id, &token);
    let addr = exe.http_addr.clone().expect("http");
    // Four commands write 32 MiB each to clients that never read.
    let rss = exe.status_kib("VmRSS");
    // Each lives on after its output: a stream reads a live process's output as it grows.
    let cmd = format!(
        "head -c {} /dev/zero | tr '\\0' x; echo done > /work/done-$$; sleep 300",
        32 * MIB
    );
    let start = |cmd: String| {
        let msg = json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}}).to_string();
        let mut env = vec![0u8];
        env.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        env.extend_from_slice(msg.as_bytes());
        let head = format!(
            "POST /process.Process/Start HTTP/1.1\r\nHost: x\r\n{h}Content-Type: application/connect+json\r\nContent-Length: {}\r\n\r\n",
            env.len()
        );
        let mut c = stalled(&addr, &head);
        c.write_all(&env).expect("envelope");
        c
    };
    let unread: Vec<_> = (0..4).map(|_| start(cmd.clone())).collect();
    // All four have written their output (into the sandbox's files); the streams have read
    // what they will read.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (code, v) = call(
            &exe,
            "POST",
            "/execute",
            h.clone(),
            json!({"code": "import glob; print(len(glob.glob('/work/done-*')))"}).to_string(),
        )
        .await;
        assert_eq!(code, 200, "{v}");
        if v.as_str().unwrap_or_default().contains("\"text\":\"4\\n\"") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the commands did not finish: {v}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = exe.status_kib("VmRSS").saturating_sub(rss) / 1024;
    eprintln!("four unread 32 MiB streams: RSS +{grown} MiB");
    assert!(
        grown < 48,
        "four unread streams of 32 MiB raised the executor's memory {grown} MiB"
    );
    drop(unread);
    // A client that reads gets all of a quick command's output, then its end.
    let msg = json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", format!("head -c {} /dev/zero | tr '\\0' x", 3 * MIB)]}}).to_string();
    let mut env = vec![0u8];
    env.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    env.extend_from_slice(msg.as_bytes());
    let head = format!(
        "POST /process.Process/Start HTTP/1.1\r\nHost: x\r\n{h}Content-Type: application/connect+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        env.len()
    );
    let reply = tokio::task::spawn_blocking(move || raw(&addr, &head, &[&env], Duration::ZERO))
        .await
        .expect("start");
    use base64::Engine as _;
    let got: usize = reply
        .split("\"stdout\":\"")
        .skip(1)
        .filter_map(|p| p.split('"').next())
        .map(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b)
                .expect("base64")
                .len()
        })
        .sum();
    assert_eq!(got, 3 * MIB, "the whole output before the end");
    assert!(
        reply.contains("\"exitCode\":0"),
        "{}",
        &reply[reply.len().saturating_sub(300)..]
    );
}

/// Issue 46, finding 4: `/files` downloads are charged to the byte budget until they are
/// written: slow readers of a large file are refused past it (503, Retry-After), never
/// holding more than the budget between them.
#[tokio::test]
async fn file_downloads_are_charged_until_they_are_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (budget, cap) = ((64 * MIB).to_string(), (32 * MIB).to_string());
    let exe = executor(
        dir.path(),
        &["--max-inflight-bytes", &budget, "--max-request-bytes", &cap],
    )
    .await;
    let (id, token) = create(&exe, A, json!({"templateID": "code-interpreter-v1"})).await;
    let h = data(&id, &token);
    let (code, v) = call(
        &exe,
        "POST",
        "/execute",
        h.clone(),
        json!({"code": format!("open('/work/big', 'wb').write(b'x' * {})", 16 * MIB)}).to_string(),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    let addr = exe.http_addr.clone().expect("http");
    let head = format!("GET /files?path=big HTTP/1.1\r\nHost: x\r\n{h}\r\n");
    // Readers that never read: each holds its 16 MiB until written, so the budget takes four.
    let mut readers = Vec::new();
    let mut refused = None;
    for _ in 0..8 {
        let mut c = stalled(&addr, &head);
        c.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        let mut first = [0u8; 12];
        c.read_exact(&mut first).expect("an answer");
        let status = String::from_utf8_lossy(&first).into_owned();
        if status.contains(" 503") {
            let (_, rest) = answer_of(&mut c, Duration::from_secs(10));
            refused = Some(rest);
            break;
        }
        assert!(status.contains(" 200"), "{status}");
        readers.push(c);
    }
    let refused = refused.expect("downloads past the budget were refused");
    assert!(refused.contains("--max-inflight-bytes"), "{refused}");
    assert!(refused.to_ascii_lowercase().contains("retry-after: 1"), "{refused}");
    assert!(exe.metric("sandpool_inflight_bytes") <= (64 * MIB) as f64);
    // The readers go; their bytes come back, and a download works again.
    drop(readers);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while exe.metric("sandpool_inflight_bytes") > 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the downloads' bytes were not given back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, body) = call(&exe, "GET", "/files?path=big", h, String::new()).await;
    assert_eq!(code, 200);
    assert_eq!(body.as_str().map(str::len), Some(16 * MIB));
}

/// Attack round 3, finding 2: uploads through `POST /files` onto FIFOs a sandbox made in its
/// `/work` each blocked a blocking-pool thread for ever (530 of them took the pool, and every
/// tenant's runs with it, while `/v1/ping` said 200). Now each is refused at once, a 400
/// naming the path, and a stateless run goes on right after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_onto_fifos_a_sandbox_made_are_refused_and_block_nothing() {
    const N: usize = 24;
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = executor(dir.path(), &["--max-sessions", "2"]).await;
    let (id, token) = create(&exe, A, json!({"templateID": "code-interpreter-v1"})).await;
    let h = data(&id, &token);
    let plant = format!(
        "import os, socket\nfor i in range({N}):\n    os.mkfifo('/work/fifo%d' % i)\n\
         s = socket.socket(socket.AF_UNIX); s.bind('/work/sock')\nos.symlink('/etc/passwd', '/work/link')\nprint('planted')"
    );
    let (code, v) = call(&exe, "POST", "/execute", h.clone(), json!({"code": plant}).to_string()).await;
    assert_eq!(code, 200, "{v}");
    assert!(v.as_str().unwrap_or_default().contains("planted"), "{v}");
    let mut targets: Vec<String> = (0..N).map(|i| format!("fifo{i}")).collect();
    targets.extend(["sock".into(), "link".into()]);
    let uploads = targets.iter().map(|name| {
        let (exe_addr, h, name) = (exe.http_addr.clone().expect("http"), h.clone(), name.clone());
        async move {
            let path = format!("/files?path=/home/user/{name}");
            let got = tokio::time::timeout(
                Duration::from_secs(45),
                tokio::task::spawn_blocking(move || http(&exe_addr, "POST", &path, &h, "payload")),
            )
            .await;
            (name, got)
        }
    });
    for (name, got) in futures::future::join_all(uploads).await {
        let (code, body) = got
            .unwrap_or_else(|_| panic!("the upload onto {name} blocked"))
            .expect("http");
        assert_eq!(code, 400, "{name}: {body}");
        assert!(
            body.contains(&name) && body.contains("not a regular file"),
            "{name}: {body}"
        );
    }
    // Nothing is stuck: a stateless run answers, an ordinary upload works, ping says pong.
    let addr = exe.http_addr.clone().expect("http");
    let body = json!({"code": "print('fine')", "language": "python"}).to_string();
    let auth = format!("Authorization: Bearer {B}\r\n");
    let (code, reply) = tokio::task::spawn_blocking(move || http(&addr, "POST", "/run_code", &auth, &body))
        .await
        .expect("http");
    assert_eq!(code, 200, "{reply}");
    assert!(reply.contains("fine"), "{reply}");
    let (code, v) = call(&exe, "POST", "/files?path=/home/user/ok.txt", h.clone(), "x".into()).await;
    assert_eq!(code, 200, "{v}");
    let (code, v) = call(&exe, "GET", "/v1/ping", String::new(), String::new()).await;
    assert_eq!((code, v), (200, json!("pong")));
    assert_eq!(exe.metric("sandpool_watchdog_stuck_blocking"), 0.0);
}

/// The stdout of an `/execute` reply (NDJSON: one event a line).
fn stdout_of(v: &Value) -> String {
    let text = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "stdout")
        .filter_map(|e| e["text"].as_str().map(str::to_owned))
        .collect()
}

/// Issue 47, item 1: code written for E2B keeps its files in `/home/user`, its home and
/// working directory. A file written there through the files API was not there for the
/// sandbox's own commands and interpreter (they saw only `/work`); now `/home/user` is the
/// sandbox's `/work` a second time, commands and the interpreter start in it, and the user
/// is E2B's: `user`, with `HOME=/home/user`.
#[tokio::test]
async fn e2b_code_finds_its_files_in_home_user() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = executor(dir.path(), &[]).await;
    let (id, token) = create(&exe, A, json!({"templateID": "code-interpreter-v1"})).await;
    let h = data(&id, &token);
    let (code, v) = call(
        &exe,
        "POST",
        "/files?path=/home/user/a.txt",
        h.clone(),
        "from files".into(),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    // The interpreter: the file by its E2B path, by a relative one and by `~`; its place.
    let cell = "import os, getpass, json\n\
                print(json.dumps({'abs': open('/home/user/a.txt').read(), 'rel': open('a.txt').read(),\n\
                 'tilde': open(os.path.expanduser('~/a.txt')).read(), 'cwd': os.getcwd(),\n\
                 'home': os.environ.get('HOME'), 'user': getpass.getuser(),\n\
                 'same': os.path.samefile('/home/user', '/work')}))";
    let (code, v) = call(&exe, "POST", "/execute", h.clone(), json!({ "code": cell }).to_string()).await;
    assert_eq!(code, 200, "{v}");
    let got: Value = serde_json::from_str(stdout_of(&v).trim()).unwrap_or_else(|_| panic!("cell output: {v}"));
    assert_eq!(
        got,
        json!({"abs": "from files", "rel": "from files", "tilde": "from files", "cwd": "/home/user",
               "home": "/home/user", "user": "user", "same": true}),
        "{v}"
    );
    // A command (E2B's `commands.run`): its place, its user, the file; what it writes in the
    // home is a file of the files API.
    let cmd = "pwd; whoami; echo $HOME; cat /home/user/a.txt; echo; cat ~/a.txt; echo; echo made > /home/user/b.txt";
    let msg = json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}}).to_string();
    let mut env = vec![0u8];
    env.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    env.extend_from_slice(msg.as_bytes());
    let head = format!(
        "POST /process.Process/Start HTTP/1.1\r\nHost: x\r\n{h}Content-Type: application/connect+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        env.len()
    );
    let addr = exe.http_addr.clone().expect("http");
    let reply = tokio::task::spawn_blocking(move || raw(&addr, &head, &[&env], Duration::ZERO))
        .await
        .expect("start");
    assert_eq!(
        process_stdout(&reply),
        "/home/user\nuser\n/home/user\nfrom files\nfrom files\n",
        "{reply}"
    );
    assert!(reply.contains("\"exitCode\":0"), "{reply}");
    let (code, v) = call(&exe, "GET", "/files?path=/home/user/b.txt", h.clone(), String::new()).await;
    assert_eq!((code, v), (200, json!("made\n")));
}

/// The stdout a `process.Process/Start` stream carried (its events' base64 `stdout`).
fn process_stdout(reply: &str) -> String {
    use base64::Engine as _;
    let out: Vec<u8> = reply
        .split("\"stdout\":\"")
        .skip(1)
        .filter_map(|p| p.split('"').next())
        .flat_map(|b| base64::engine::general_purpose::STANDARD.decode(b).expect("base64"))
        .collect();
    String::from_utf8_lossy(&out).into_owned()
}

/// Issue 46, finding 3, and E2B's commands: a command runs between its sandbox's calls, so it
/// must not be held to the idle share (`--session-idle-bytes`) a session falls back to after
/// a call. A command that takes 150 MiB succeeds; the grown share it runs in is a loan, and
/// another sandbox started while it is out still starts and grows in a call past the idle
/// share (the loan is taken back, as far as the call needs).
#[tokio::test]
async fn a_command_may_grow_past_the_idle_share_and_its_loan_is_taken_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mib = |n: u64| (n << 20).to_string();
    let exe = executor(
        dir.path(),
        &[
            "--max-sessions",
            "2",
            "--session-idle-bytes",
            &mib(48),
            "--session-memory-bytes",
            &mib(320),
        ],
    )
    .await;
    let (id, token) = create(&exe, A, json!({"templateID": "base"})).await;
    let h = data(&id, &token);
    let command = |cmd: &str| {
        let msg = json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}}).to_string();
        let mut env = vec![0u8];
        env.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        env.extend_from_slice(msg.as_bytes());
        let head = format!(
            "POST /process.Process/Start HTTP/1.1\r\nHost: x\r\n{h}Content-Type: application/connect+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            env.len()
        );
        let addr = exe.http_addr.clone().expect("http");
        tokio::task::spawn_blocking(move || raw(&addr, &head, &[&env], Duration::ZERO))
    };
    let reply =
        command("sleep 1; python3 -c \"x = bytearray(150 << 20); x[::4096] = b'x' * len(x[::4096]); print('held')\"")
            .await
            .expect("start");
    assert_eq!(process_stdout(&reply), "held\n", "{reply}");
    assert!(reply.contains("\"exitCode\":0"), "{reply}");
    // The first sandbox's share is on loan; a second sandbox still starts and runs a cell.
    let (id2, token2) = create(&exe, B, json!({"templateID": "code-interpreter-v1"})).await;
    let (code, v) = call(
        &exe,
        "POST",
        "/execute",
        data(&id2, &token2),
        json!({"code": "print(6 * 7)"}).to_string(),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert!(v.as_str().unwrap_or_default().contains("\"text\":\"42\\n\""), "{v}");
    // A call is owed all the room a loan holds, not only the floor, and a loan taken back
    // leaves its session its idle share, not only what it holds: with the first's loan out
    // again, a command of the first that will take 24 MiB in a moment (within its 48 MiB idle
    // share), then a cell of the second that takes 120 MiB (past the idle share). Both run.
    // (On the real node a fork's restored interpreter, loading its names next to a source
    // that had run a command, died at the floor; then the source's interpreter, its loan taken
    // back to what it held plus 2 MiB, died at its next touch.)
    let reply = command("echo again").await.expect("start");
    assert!(reply.contains("\"exitCode\":0"), "{reply}");
    let later =
        command("sleep 1.5; python3 -c \"x = bytearray(24 << 20); x[::4096] = b'x' * len(x[::4096]); print('later')\"");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (code, v) = call(
        &exe,
        "POST",
        "/execute",
        data(&id2, &token2),
        json!({"code": "x = bytearray(120 << 20); x[::4096] = b'x' * len(x[::4096]); print('grown', len(x) >> 20)"})
            .to_string(),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert!(v.as_str().unwrap_or_default().contains("grown 120"), "{v}");
    let reply = later.await.expect("start");
    assert_eq!(process_stdout(&reply), "later\n", "{reply}");
    // And the first one's interpreter lived through it all.
    let (code, v) = call(
        &exe,
        "POST",
        "/execute",
        h,
        json!({"code": "print('alive')"}).to_string(),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert!(v.as_str().unwrap_or_default().contains("alive"), "{v}");
}

/// The Python with E2B's SDK (the repository's `.venv`, as clients/python's tests use, or
/// `SANDPOOL_E2B_PYTHON`); a test that needs it fails without it, never skips.
fn e2b_python() -> String {
    let py = std::env::var("SANDPOOL_E2B_PYTHON")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../.venv/bin/python").to_owned());
    let ok = std::process::Command::new(&py)
        .args(["-c", "import e2b"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{py} cannot import e2b: make the venv (scripts/test.sh) or set SANDPOOL_E2B_PYTHON"
    );
    py
}

/// Pause and resume on connect, raw and through the unmodified E2B SDK: `/home/user` is kept
/// (files, links as links), the resumed sandbox runs commands again under a fresh access
/// token (the store keeps only hashes of the old ones, which still work), and E2B's answers
/// hold (204, 404, 409, 201).
#[tokio::test]
async fn a_paused_sandbox_resumes_on_connect_with_its_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).expect("store dir");
    let exe = executor(dir.path(), &["--session-store-dir", &store.display().to_string()]).await;
    let (id, token) = create(&exe, A, json!({"templateID": "base"})).await;
    let put = "/files?path=/home/user/kept.txt";
    let (code, v) = call(&exe, "POST", put, data(&id, &token), "kept".into()).await;
    assert!(code < 300, "{code} {v}");
    for (k, want) in [(B, 404), (A, 204), (A, 409)] {
        let (code, v) = call(&exe, "POST", &format!("/sandboxes/{id}/pause"), key(k), "{}".into()).await;
        assert_eq!(code, want, "pause as {k}: {v}");
    }
    let (code, v) = call(&exe, "POST", "/sandboxes/nope-vm/pause", key(A), String::new()).await;
    assert_eq!(code, 404, "{v}");
    let (code, v) = call(&exe, "POST", "/v2/sandboxes/nope-vm/connect", key(A), "{}".into()).await;
    assert_eq!(code, 404, "{v}");
    let (code, v) = call(
        &exe,
        "POST",
        &format!("/v2/sandboxes/{id}/connect"),
        key(B),
        "{}".into(),
    )
    .await;
    assert_eq!(code, 404, "another tenant's paused sandbox: {v}");

    let (code, v) = call(
        &exe,
        "POST",
        &format!("/v2/sandboxes/{id}/connect"),
        key(A),
        r#"{"timeout":60}"#.into(),
    )
    .await;
    assert_eq!(code, 201, "resumed: {v}");
    let fresh = v["envdAccessToken"].as_str().expect("envdAccessToken").to_owned();
    assert_eq!(fresh.len(), 32, "{v}");
    assert_ne!(fresh, token, "a fresh token");
    let get = "/files?path=/home/user/kept.txt";
    let (code, v) = call(&exe, "GET", get, data(&id, &fresh), String::new()).await;
    assert_eq!((code, v), (200, Value::String("kept".into())));
    let (code, v) = call(&exe, "GET", get, data(&id, &token), String::new()).await;
    assert_eq!(
        (code, v),
        (200, Value::String("kept".into())),
        "the token given before the pause still opens it"
    );
    let (code, _) = call(&exe, "GET", get, data(&id, &fresh[..31]), String::new()).await;
    assert_ne!(code, 200, "a wrong token does not");
    let (code, v) = call(
        &exe,
        "POST",
        &format!("/v2/sandboxes/{id}/connect"),
        key(A),
        "{}".into(),
    )
    .await;
    assert_eq!(
        (code, v["envdAccessToken"].as_str()),
        (200, Some(fresh.as_str())),
        "running: as it is"
    );
    let (code, v) = call(&exe, "POST", &format!("/sandboxes/{id}/resume"), key(A), "{}".into()).await;
    assert_eq!(code, 409, "resume of a running sandbox: {v}");

    // The SDK, unmodified: pause(), Sandbox.connect(id), and the sandbox's files and commands
    // after it; pause(mode="full") keeps run_code's variables too.
    let base = format!("http://{}", exe.http_addr.clone().expect("http"));
    let script = r#"
import sys
from e2b import Sandbox, SandboxException
from e2b_code_interpreter import Sandbox as CodeSandbox
sbx = Sandbox.create()
sbx.files.write("/home/user/notes/a.txt", "written before the pause")
r = sbx.commands.run("ln -s notes/a.txt /home/user/link && chmod 600 /home/user/notes/a.txt")
assert r.exit_code == 0, r
code = CodeSandbox.create()
ex = code.run_code("import json as j\nx = 41\ndef inc(v): return v + 1\nf = open('/home/user/o.txt', 'w')")
assert ex.error is None, ex.error
assert code.pause(mode="full") is True
code = CodeSandbox.connect(code.sandbox_id, timeout=120)
ex = code.run_code("j.dumps([inc(x), 'f' in globals()])")
assert ex.error is None and ex.text == "'[42, false]'", (ex.error, ex.text)
code.kill()
assert sbx.pause() is True
assert sbx.pause() is False, "already paused"
again = Sandbox.connect(sbx.sandbox_id, timeout=120)
assert again.sandbox_id == sbx.sandbox_id
assert again.files.read("/home/user/notes/a.txt") == "written before the pause"
r = again.commands.run("cat link; echo; readlink link; stat -c %a notes/a.txt; pwd")
assert (r.exit_code, r.stdout) == (0, "written before the pause\nnotes/a.txt\n600\n/home/user\n"), r
assert again.is_running()
# A handle kept across a pause: sbx.connect() resumes, its token from before still serves.
assert again.pause() is True
again.connect()
assert again.commands.run("cat notes/a.txt").stdout == "written before the pause"
assert sbx.files.read("/home/user/notes/a.txt") == "written before the pause"
again.kill()
print("sdk-ok")
"#;
    let py = e2b_python();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("timeout")
            .args(["180", &py, "-c", script])
            .env("E2B_API_URL", &base)
            .env("E2B_SANDBOX_URL", &base)
            .env("E2B_API_KEY", A)
            .env_remove("E2B_DEBUG")
            .env_remove("E2B_DOMAIN")
            .env_remove("E2B_ACCESS_TOKEN")
            .output()
            .expect("running python")
    })
    .await
    .expect("python");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success() && stdout.contains("sdk-ok"), "{stdout}\n{stderr}");
}

/// Snapshots through the unmodified E2B SDK: `create_snapshot()` on a running sandbox (which
/// goes on), `Sandbox.create(snapshot_id)` starting a new sandbox with its files, another
/// tenant refused (404 raw), and `delete_snapshot`.
#[tokio::test]
async fn a_snapshot_starts_new_sandboxes_with_its_files_through_the_sdk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).expect("store dir");
    let exe = executor(dir.path(), &["--session-store-dir", &store.display().to_string()]).await;
    let (id, _) = create(&exe, A, json!({"templateID": "base"})).await;
    let (code, v) = call(&exe, "POST", &format!("/sandboxes/{id}/snapshots"), key(B), "{}".into()).await;
    assert_eq!(code, 404, "another tenant's sandbox: {v}");
    let (code, v) = call(&exe, "POST", &format!("/sandboxes/{id}/snapshots"), key(A), "{}".into()).await;
    assert_eq!(code, 201, "{v}");
    let snap = v["snapshotID"].as_str().expect("snapshotID").to_owned();
    let (code, v) = call(
        &exe,
        "POST",
        "/sandboxes",
        key(B),
        json!({"templateID": snap}).to_string(),
    )
    .await;
    assert_eq!(code, 404, "another tenant's snapshot: {v}");

    // Listed for its owner only (`GET /snapshots`), by the sandbox it was taken of, paged by
    // id; a bad limit is named.
    let (code, v) = call(&exe, "POST", &format!("/sandboxes/{id}/snapshots"), key(A), "{}".into()).await;
    assert_eq!(code, 201, "{v}");
    let snap2 = v["snapshotID"].as_str().expect("snapshotID").to_owned();
    let (other, _) = create(&exe, A, json!({"templateID": "base"})).await;
    let (code, v) = call(
        &exe,
        "POST",
        &format!("/sandboxes/{other}/snapshots"),
        key(A),
        "{}".into(),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let snap3 = v["snapshotID"].as_str().expect("snapshotID").to_owned();
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s["snapshotID"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut all = vec![snap.clone(), snap2.clone(), snap3.clone()];
    all.sort();
    let (code, v) = call(&exe, "GET", "/snapshots", key(A), String::new()).await;
    assert_eq!((code, ids(&v)), (200, all.clone()), "{v}");
    let mut of_id = vec![snap.clone(), snap2.clone()];
    of_id.sort();
    let (code, v) = call(
        &exe,
        "GET",
        &format!("/snapshots?sandboxID={id}"),
        key(A),
        String::new(),
    )
    .await;
    assert_eq!((code, ids(&v)), (200, of_id), "{v}");
    let (code, v) = call(&exe, "GET", &format!("/snapshots?name={snap3}"), key(A), String::new()).await;
    assert_eq!((code, ids(&v)), (200, vec![snap3.clone()]), "{v}");
    let (code, v) = call(&exe, "GET", "/snapshots", key(B), String::new()).await;
    assert_eq!((code, v), (200, json!([])), "another tenant's");
    let (code, v) = call(&exe, "GET", "/snapshots?limit=0", key(A), String::new()).await;
    assert_eq!(code, 400, "{v}");
    assert!(v.to_string().contains("limit"), "{v}");
    let addr = exe.http_addr.clone().expect("http");
    let page = |after: &str| {
        let head = format!(
            "GET /snapshots?limit=2{after} HTTP/1.1\r\nHost: x\r\n{}Connection: close\r\n\r\n",
            key(A)
        );
        raw(&addr, &head, &[], Duration::ZERO)
    };
    let first = page("");
    let next = first
        .lines()
        .find_map(|l| l.strip_prefix("x-next-token: "))
        .map(|t| t.trim().to_owned());
    assert_eq!(next.as_deref(), Some(all[1].as_str()), "{first}");
    let second = page(&format!("&nextToken={}", all[1]));
    assert!(second.contains(&all[2]) && !second.contains(&all[0]), "{second}");
    assert!(!second.contains("x-next-token"), "{second}");
    for s in [&snap2, &snap3] {
        let (code, v) = call(&exe, "DELETE", &format!("/templates/{s}"), key(A), String::new()).await;
        assert_eq!(code, 204, "{v}");
    }

    let base = format!("http://{}", exe.http_addr.clone().expect("http"));
    let script = r#"
from e2b import Sandbox
sbx = Sandbox.create()
sbx.files.write("/home/user/notes/a.txt", "before the snapshot")
info = sbx.create_snapshot()
assert info.snapshot_id, info
assert [s.snapshot_id for s in sbx.list_snapshots().next_items()] == [info.snapshot_id]
# The sandbox goes on.
sbx.files.write("/home/user/notes/b.txt", "after")
assert sbx.commands.run("cat notes/a.txt").stdout == "before the snapshot"
copy = Sandbox.create(info.snapshot_id)
assert copy.sandbox_id != sbx.sandbox_id
r = copy.commands.run("cat notes/a.txt; ls notes; pwd")
assert (r.exit_code, r.stdout) == (0, "before the snapshota.txt\n/home/user\n"), r
copy.files.write("/home/user/notes/a.txt", "changed in the copy")
assert sbx.files.read("/home/user/notes/a.txt") == "before the snapshot"
assert Sandbox.delete_snapshot(info.snapshot_id) is True
try:
    Sandbox.create(info.snapshot_id)
    raise AssertionError("a deleted snapshot started a sandbox")
except Exception as e:
    assert "not found" in str(e).lower(), e
copy.kill()
sbx.kill()
print("sdk-ok")
"#;
    let py = e2b_python();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("timeout")
            .args(["180", &py, "-c", script])
            .env("E2B_API_URL", &base)
            .env("E2B_SANDBOX_URL", &base)
            .env("E2B_API_KEY", A)
            .env_remove("E2B_DEBUG")
            .env_remove("E2B_DOMAIN")
            .env_remove("E2B_ACCESS_TOKEN")
            .output()
            .expect("running python")
    })
    .await
    .expect("python");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success() && stdout.contains("sdk-ok"), "{stdout}\n{stderr}");
}

/// E2B's lifecycle through the unmodified SDK: a sandbox created with `on_timeout: pause`
/// is paused (not killed) when its timeout passes, listed as paused (with its metadata
/// filter, never to another tenant), `get_info` says paused, its next call resumes it
/// (`auto_resume`) or `connect` does, with its files; without a lifecycle it is killed as
/// before; combinations E2B refuses get a 400 naming the field.
#[tokio::test]
async fn a_sandbox_with_lifecycle_pause_is_paused_at_its_timeout_and_resumed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).expect("store dir");
    let exe = executor(dir.path(), &["--session-store-dir", &store.display().to_string()]).await;
    for (body, field) in [
        (
            json!({"templateID": "base", "autoPause": true, "autoPauseMemory": false, "autoResume": {"enabled": true}}),
            "autoResume",
        ),
        (
            json!({"templateID": "base", "autoPause": false, "autoResume": {"enabled": true}}),
            "autoResume",
        ),
        (
            json!({"templateID": "base", "autoPause": true, "autoResume": {"enabled": "yes"}}),
            "autoResume.enabled",
        ),
    ] {
        let (code, v) = call(&exe, "POST", "/v2/sandboxes", key(A), body.to_string()).await;
        assert_names(code, &v, 400, field);
    }
    let base = format!("http://{}", exe.http_addr.clone().expect("http"));
    let script = r#"
import sys, time
from e2b import Sandbox, SandboxQuery, SandboxState
from e2b_code_interpreter import Sandbox as CodeSandbox

def wait_state(sid, want, within=60):
    deadline = time.time() + within
    while time.time() < deadline:
        if Sandbox.get_info(sid).state == want:
            return
        time.sleep(0.5)
    raise AssertionError(f"{sid} not {want} in {within}s: {Sandbox.get_info(sid)}")

def listed(state, meta):
    q = SandboxQuery(state=[state], metadata=meta)
    return [s.sandbox_id for s in Sandbox.list(query=q).next_items()]

# Paused at its timeout; the next call resumes it (auto_resume), files kept.
sbx = CodeSandbox.create(timeout=5, metadata={"run": "auto"},
                         lifecycle={"on_timeout": "pause", "auto_resume": True})
sbx.files.write("/home/user/kept.txt", "kept across the timeout")
wait_state(sbx.sandbox_id, SandboxState.PAUSED)
assert listed(SandboxState.PAUSED, {"run": "auto"}) == [sbx.sandbox_id]
assert listed(SandboxState.PAUSED, {"run": "other"}) == []
assert sbx.sandbox_id not in listed(SandboxState.RUNNING, {"run": "auto"})
assert sbx.sandbox_id in [s.sandbox_id for s in Sandbox.list().next_items()]
ex = sbx.run_code("print(open('/home/user/kept.txt').read())")
assert ex.logs.stdout == ["kept across the timeout\n"], ex
r = sbx.commands.run("cat /home/user/kept.txt")
assert r.stdout == "kept across the timeout", r
sbx.kill()

# Paused at its timeout, filesystem mode: connect resumes it.
fs = Sandbox.create(timeout=3, lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}})
fs.files.write("/home/user/f.txt", "fs")
wait_state(fs.sandbox_id, SandboxState.PAUSED)
print("paused-id", fs.sandbox_id, flush=True)
again = Sandbox.connect(fs.sandbox_id, timeout=120)
assert again.commands.run("cat /home/user/f.txt").stdout == "fs"
again.kill()

# Without a lifecycle: killed at its timeout, as before.
gone = Sandbox.create(timeout=3)
deadline = time.time() + 60
while gone.is_running() and time.time() < deadline:
    time.sleep(0.5)
assert not gone.is_running()
assert gone.sandbox_id not in [s.sandbox_id for s in Sandbox.list().next_items()]

# One left paused, for the other tenant to look for.
left = Sandbox.create(timeout=3, metadata={"run": "left"}, lifecycle={"on_timeout": "pause"})
wait_state(left.sandbox_id, SandboxState.PAUSED)
print("left-id", left.sandbox_id, flush=True)
print("sdk-ok")
"#;
    let py = e2b_python();
    let run = |key: &'static str, script: String| {
        let (py, base) = (py.clone(), base.clone());
        tokio::task::spawn_blocking(move || {
            std::process::Command::new("timeout")
                .args(["240", &py, "-c", &script])
                .env("E2B_API_URL", &base)
                .env("E2B_SANDBOX_URL", &base)
                .env("E2B_API_KEY", key)
                .env_remove("E2B_DEBUG")
                .env_remove("E2B_DOMAIN")
                .env_remove("E2B_ACCESS_TOKEN")
                .output()
                .expect("running python")
        })
    };
    let out = run(A, script.to_owned()).await.expect("python");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success() && stdout.contains("sdk-ok"), "{stdout}\n{stderr}");
    let left = stdout
        .lines()
        .find_map(|l| l.strip_prefix("left-id "))
        .expect("left-id")
        .to_owned();
    // Another tenant sees none of it, listed, described or connected.
    let other = format!(
        r#"
from e2b import Sandbox, SandboxQuery, SandboxState, NotFoundException
assert Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items() == []
assert Sandbox.list().next_items() == []
for f in (Sandbox.get_info, Sandbox.connect):
    try:
        f("{left}")
        raise AssertionError(f"{{f}} reached another tenant's paused sandbox")
    except NotFoundException:
        pass
print("other-ok")
"#
    );
    let out = run(B, other).await.expect("python");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("other-ok"),
        "{stdout}\n{stderr}"
    );
    let (code, v) = call(&exe, "GET", "/v2/sandboxes?state=paused", key(A), String::new()).await;
    assert_eq!(code, 200, "{v}");
    let ids: Vec<&str> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["sandboxID"].as_str())
        .collect();
    assert_eq!(ids, [left.as_str()], "{v}");
    assert_eq!(v[0]["state"], "paused", "{v}");
}

/// A storm of data-plane calls for sandboxes no one holds (made-up ids; a data-plane call
/// names no tenant, so each well-formed id costs a store read per tenant served) does
/// bounded store work: ids no executor makes cost none, the rest share a token bucket
/// (`session::lookups`), past which the call is told to retry (503), never "not found" for
/// a sandbox that may be paused. A real paused sandbox still resumes after the storm.
#[tokio::test]
async fn a_storm_of_made_up_sandbox_ids_does_bounded_store_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).expect("store dir");
    let exe = executor(dir.path(), &["--session-store-dir", &store.display().to_string()]).await;
    let lookups = || exe.metric("sandpool_session_store_lookups_total");
    let token = "0123456789abcdef0123456789abcdef";
    // Ids no executor makes: no store read at all.
    for id in [
        "nope",
        "../../etc/passwd",
        "0123456789abcdef0123456789abcdef-",
        &"f".repeat(300),
    ] {
        let (code, _) = call(&exe, "GET", "/health", data(id, token), String::new()).await;
        assert_eq!(code, 502, "{id:.40}");
    }
    assert_eq!(lookups(), 0.0, "malformed ids were looked up");

    // Well-formed made-up ids, 16 callers at once.
    const CALLS: usize = 400;
    const TENANTS: f64 = 2.0;
    let started = std::time::Instant::now();
    let addr = exe.http_addr.clone().expect("http");
    let workers: Vec<_> = (0..16)
        .map(|w| {
            let addr = addr.clone();
            tokio::task::spawn_blocking(move || {
                let mut codes = Vec::new();
                for i in 0..CALLS / 16 {
                    let id = format!("{:032x}-storm", (w * 1000 + i) as u128 * 7919 + 1);
                    codes.push(http(&addr, "GET", "/health", &data(&id, token), "").0);
                }
                codes
            })
        })
        .collect();
    let mut codes = Vec::new();
    for w in workers {
        codes.extend(w.await.expect("worker"));
    }
    let secs = started.elapsed().as_secs_f64();
    assert!(codes.iter().all(|c| *c == 502 || *c == 503), "{codes:?}");
    let reads = lookups();
    // The bucket: 20 at once, 10 a second after; a read per tenant each.
    let bound = TENANTS * (20.0 + 10.0 * secs + 1.0);
    assert!(
        reads <= bound,
        "{CALLS} calls for made-up ids in {secs:.1}s made {reads} store reads (bound {bound:.0})"
    );
    assert!(codes.contains(&503), "the bucket ran dry, so some were told to retry");

    // A real sandbox paused with auto-resume still resumes on its data-plane call once the
    // bucket has refilled.
    let (id, tok) = create(
        &exe,
        A,
        json!({"templateID": "base", "autoPause": true, "autoResume": {"enabled": true}}),
    )
    .await;
    let (code, v) = call(&exe, "POST", &format!("/sandboxes/{id}/pause"), key(A), String::new()).await;
    assert_eq!(code, 204, "{v}");
    let mut resumed = 0;
    for _ in 0..40 {
        let (code, _) = call(&exe, "GET", "/health", data(&id, &tok), String::new()).await;
        if code < 300 {
            resumed = code;
            break;
        }
        assert_eq!(code, 503, "never 'not found' for a paused sandbox");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(resumed > 0, "the paused sandbox resumed on its data-plane call");
}

/// Many fresh sandboxes' first cells, streamed at once, each answer. A streamed cell reads
/// its live output every 30 ms while its call runs; that read once waited for the session's
/// `/work` to be made, which the call itself was making, and the call is not polled while
/// the read waits: a first cell whose `/work` took longer than 30 ms hung for good (seen on
/// the real node as a sandbox whose setup cell timed out twice, with no interpreter and no
/// log line, its session then holding up its executor's drain).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_sandboxes_first_cells_streamed_at_once_all_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Room for 40 interpreters (one holds about 38 MiB here): this is about the hang.
    let exe = std::sync::Arc::new(
        executor(
            dir.path(),
            &[
                "--max-sessions",
                "48",
                "--session-idle-bytes",
                &(64u64 << 20).to_string(),
            ],
        )
        .await,
    );
    // Each cell right after its create, before the interpreter's own start (50 ms after),
    // so the call makes /work itself, 40 at once.
    let cells = (0..40).map(|i| {
        let exe = exe.clone();
        tokio::spawn(async move {
            let (id, token) = create(&exe, A, json!({"templateID": "code-interpreter-v1"})).await;
            let addr = exe.http_addr.clone().expect("http");
            let body = json!({"code": format!("x = {i}\nopen('f.txt', 'w').write('y')\nprint(x)")}).to_string();
            let head = format!(
                "POST /execute HTTP/1.1\r\nHost: x\r\n{}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                data(&id, &token),
                body.len()
            );
            let reply = tokio::task::spawn_blocking(move || raw(&addr, &head, &[body.as_bytes()], Duration::ZERO))
                .await
                .expect("cell");
            (i, reply)
        })
    });
    // Each is answered whole (a hung one sent its headers only, then nothing for good). A
    // burst like this one may still see a cell's interpreter killed at its memory share
    // (docs/sessions.md: calls started together compete for the room above the idle
    // bytes); that, too, is an answer.
    for c in futures::future::join_all(cells).await {
        let (i, reply) = c.expect("cell");
        assert!(
            reply.contains("number_of_executions")
                && (reply.contains(&format!("\"text\":\"{i}\\n\"")) || reply.contains("MEMORY_LIMIT_EXCEEDED")),
            "cell {i}: {reply}"
        );
    }
}
