//! Piston v2 on the executor's HTTP port (`/api/v2/runtimes`, `/api/v2/execute`), as
//! Piston's clients send it, against the real executor over loopback. The unmodified
//! clients themselves (piston-rspy, aiopyston, npm piston-client) run in
//! clients/python/tests/test_piston.py.

use sandpool_tests::{Executor, Options, http};
use serde_json::{Value, json};
use std::io::{Read, Write};

async fn executor(env: &[(&str, &str)]) -> Executor {
    Executor::start(Options {
        slots: 2,
        languages: vec!["python", "cpp"],
        http: true,
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    })
    .await
}

/// One request off the runtime: status and parsed JSON body.
async fn call(exe: &Executor, method: &str, path: &str, headers: &str, body: String) -> (u16, Value) {
    let addr = exe.http_addr.clone().expect("http");
    let (method, path, headers) = (method.to_owned(), path.to_owned(), headers.to_owned());
    let (code, text) = tokio::task::spawn_blocking(move || http(&addr, &method, &path, &headers, &body))
        .await
        .expect("http");
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (code, v)
}

async fn execute(exe: &Executor, body: Value) -> Value {
    let (code, v) = call(exe, "POST", "/api/v2/execute", "", body.to_string()).await;
    assert_eq!(code, 200, "{v}");
    v
}

/// Asserts a 400 whose `message` names `field`.
async fn assert_bad(exe: &Executor, body: String, field: &str) {
    let (code, v) = call(exe, "POST", "/api/v2/execute", "", body.clone()).await;
    assert_eq!(code, 400, "{body} -> {v}");
    let msg = v["message"].as_str().unwrap_or_else(|| panic!("no message: {v}"));
    assert!(msg.contains(field), "{field} not named for {body}: {msg}");
}

#[tokio::test]
async fn runtimes_list_what_runs_here_with_pistons_names() {
    let exe = executor(&[]).await;
    for path in ["/api/v2/runtimes", "/api/v2/runtimes/"] {
        let (code, v) = call(&exe, "GET", path, "", String::new()).await;
        assert_eq!(code, 200, "{v}");
        let list = v.as_array().expect("a list");
        let find = |l: &str| {
            list.iter()
                .find(|r| r["language"] == l)
                .unwrap_or_else(|| panic!("{l}: {v}"))
        };
        let py = find("python");
        assert!(
            py["aliases"].as_array().expect("aliases").contains(&json!("py3")),
            "{py}"
        );
        let cpp = find("c++");
        assert!(
            cpp["aliases"].as_array().expect("aliases").contains(&json!("cpp")),
            "{cpp}"
        );
        for r in list {
            let version = r["version"].as_str().expect("version");
            assert_eq!(version.split('.').count(), 3, "semver-like: {r}");
            assert_ne!(version, "0.0.0", "{r}");
        }
        assert_eq!(list.len(), 2, "only the enabled languages, no harnesses: {v}");
    }
}

#[tokio::test]
async fn programs_run_and_answer_as_piston_does() {
    let exe = executor(&[]).await;
    // Python: stdin, args, a second file (base64) it imports; any version, a prefix, trailing slash.
    let helper = base64_of("def twice(x):\n    return 2 * x\n");
    for (version, path) in [("*", "/api/v2/execute"), ("3", "/api/v2/execute/")] {
        let body = json!({
            "language": "py3", "version": version,
            "files": [
                {"name": "main.py", "content": "import sys, helper\nprint(helper.twice(int(input())), sys.argv[1:])"},
                {"name": "helper.py", "content": helper, "encoding": "base64"}
            ],
            "stdin": "21", "args": ["a", "b"], "run_timeout": 5000, "run_memory_limit": -1
        });
        let (code, v) = call(&exe, "POST", path, "", body.to_string()).await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["language"], "python");
        assert_eq!(v["run"]["stdout"], "42 ['a', 'b']\n", "{v}");
        assert_eq!(v["run"]["output"], v["run"]["stdout"]);
        assert_eq!(v["run"]["code"], 0);
        assert_eq!(v["run"]["signal"], Value::Null);
        assert!(
            v.get("compile").is_none(),
            "an interpreted language has no compile stage: {v}"
        );
    }
    // Exit codes, stderr.
    let v = execute(
        &exe,
        json!({"language": "python", "files": [{"content": "import sys\nprint('e', file=sys.stderr)\nsys.exit(3)"}]}),
    )
    .await;
    assert_eq!(
        (v["run"]["code"].clone(), v["run"]["stderr"].clone()),
        (json!(3), json!("e\n")),
        "{v}"
    );
    // A time limit is SIGKILL with no exit code.
    let v = execute(
        &exe,
        json!({"language": "python", "files": [{"content": "while True: pass"}], "run_timeout": 300}),
    )
    .await;
    assert_eq!(v["run"]["signal"], "SIGKILL", "{v}");
    assert_eq!(v["run"]["code"], Value::Null, "{v}");
    assert_eq!(v["run"]["status"], "TO", "{v}");
    // C++: a compile stage, then the run.
    let v = execute(
        &exe,
        json!({"language": "c++", "version": "*", "files": [{"name": "a.cpp", "content": "#include <cstdio>\nint main(){int n; scanf(\"%d\",&n); printf(\"%d\\n\", n*3);}"}], "stdin": "5"}),
    )
    .await;
    assert_eq!(v["compile"]["code"], 0, "{v}");
    assert_eq!(v["run"]["stdout"], "15\n", "{v}");
    // A compile error: the compiler's message, and a run stage that did not run.
    let v = execute(&exe, json!({"language": "cpp", "files": [{"content": "int main( {"}]})).await;
    assert_ne!(v["compile"]["code"], 0, "{v}");
    assert!(!v["compile"]["stderr"].as_str().unwrap_or("").is_empty(), "{v}");
    assert_eq!(v["run"]["code"], Value::Null, "{v}");
    // npm's piston-client posts its JSON as text/plain.
    let addr = exe.http_addr.clone().expect("http");
    let text = tokio::task::spawn_blocking(move || {
        let body = json!({"language": "python", "version": "*", "files": [{"content": "print(7)"}]}).to_string();
        let mut c = std::net::TcpStream::connect(&addr).expect("connect");
        write!(
            c,
            "POST /api/v2/execute HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain;charset=UTF-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("write");
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out
    })
    .await
    .expect("text/plain");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"stdout\":\"7\\n\""), "{text}");
    let metrics = metrics(&exe);
    assert!(
        metrics.contains("sandpool_http_requests_total{protocol=\"piston\",code=\"200\"}"),
        "requests counted by protocol: {metrics}"
    );
}

#[tokio::test]
async fn bad_requests_get_400_naming_the_field_never_a_run() {
    let exe = executor(&[]).await;
    let prog = |extra: Value| {
        let mut b = json!({"language": "python", "files": [{"content": "print(1)"}]});
        for (k, v) in extra.as_object().expect("object") {
            b[k] = v.clone();
        }
        b.to_string()
    };
    assert_bad(&exe, "{not json".into(), "").await;
    assert_bad(&exe, prog(json!({"run_timeout": "soon"})), "run_timeout").await;
    assert_bad(&exe, prog(json!({"run_timeout": 0})), "run_timeout").await;
    assert_bad(&exe, prog(json!({"run_timeout": 99_999_999})), "run_timeout").await;
    assert_bad(&exe, prog(json!({"compile_timeout": -7})), "compile_timeout").await;
    assert_bad(&exe, prog(json!({"run_memory_limit": 1024})), "run_memory_limit").await;
    assert_bad(&exe, prog(json!({"files": []})), "files").await;
    assert_bad(&exe, prog(json!({"files": "main.py"})), "files").await;
    assert_bad(&exe, prog(json!({"args": [1, 2]})), "args").await;
    assert_bad(
        &exe,
        prog(json!({"files": [{"content": "%%", "encoding": "base64"}]})),
        "files[0].content",
    )
    .await;
    assert_bad(
        &exe,
        prog(json!({"files": [{"content": "x", "encoding": "rot13"}]})),
        "files[0].encoding",
    )
    .await;
    assert_bad(&exe, prog(json!({"language": "cobol"})), "cobol-* runtime is unknown").await;
    assert_bad(&exe, prog(json!({"version": "2.7"})), "python-2.7 runtime is unknown").await;
    assert_bad(&exe, json!({"files": [{"content": "x"}]}).to_string(), "language").await;
    // Larger than the executor takes: 413 before the body is read.
    let addr = exe.http_addr.clone().expect("http");
    let reply = tokio::task::spawn_blocking(move || {
        let mut c = std::net::TcpStream::connect(&addr).expect("connect");
        write!(
            c,
            "POST /api/v2/execute HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{{",
            80u64 << 20
        )
        .expect("write");
        let mut out = vec![0u8; 4096];
        let n = c.read(&mut out).unwrap_or(0);
        String::from_utf8_lossy(&out[..n]).into_owned()
    })
    .await
    .expect("huge");
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert_eq!(exe.runs_total(), 0.0, "a bad request ran");
}

#[tokio::test]
async fn keys_may_come_raw_as_pistons_clients_send_them_or_as_bearer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "piston-key-0123456789\n").expect("token");
    let exe = executor(&[("SANDPOOL_AUTH_TOKEN_FILE", token_file.to_str().expect("utf-8"))]).await;
    let body = json!({"language": "python", "files": [{"content": "print('ran')"}]}).to_string();
    for (headers, want) in [
        ("", 401),
        ("Authorization: wrong-key-0123456789\r\n", 401),
        ("Authorization: Bearer wrong-key-0123456789\r\n", 401),
        ("Authorization: piston-key-0123456789\r\n", 200),
        ("Authorization: Bearer piston-key-0123456789\r\n", 200),
    ] {
        let (code, v) = call(&exe, "POST", "/api/v2/execute", headers, body.clone()).await;
        assert_eq!(code, want, "{headers:?}: {v}");
    }
    // Only Piston's paths take a raw key: SandboxFusion's keep the bearer scheme.
    let run_code = json!({"code": "print(1)", "language": "python"}).to_string();
    let (code, _) = call(
        &exe,
        "POST",
        "/run_code",
        "Authorization: piston-key-0123456789\r\n",
        run_code,
    )
    .await;
    assert_eq!(code, 401);
    assert_eq!(exe.runs_total(), 2.0, "only the two authenticated calls ran");
}

fn base64_of(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn metrics(exe: &Executor) -> String {
    let mut s = std::net::TcpStream::connect(&exe.metrics_addr).expect("metrics connect");
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").expect("metrics request");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}
