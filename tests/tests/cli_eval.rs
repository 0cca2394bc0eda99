//! `sandpool eval`: every record shape, pass@k, the results JSONL, against an
//! executor the test starts and against the CLI's embedded executor.

use sandpool_tests::{Executor, Options, binary};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

const ADD_TEST: &str = "def check(c):\n    assert c(1, 2) == 3\n    assert c(-1, 1) == 0\n";

fn he(task: &str, completion: &str) -> Value {
    json!({"task_id": task, "prompt": "def add(a, b):\n", "completion": completion, "test": ADD_TEST, "entry_point": "add"})
}

fn write_jsonl(path: &Path, records: &[Value]) {
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).expect("writing dataset");
}

async fn sandpool(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(binary("sandpool"))
            .args(&args)
            .env_remove("SANDPOOL_ENDPOINT")
            .output()
            .expect("running sandpool")
    })
    .await
    .expect("join")
}

fn results(path: &Path) -> Vec<Value> {
    let mut v: Vec<Value> = std::fs::read_to_string(path)
        .expect("results file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("results line is JSON"))
        .collect();
    v.sort_by_key(|r| r["line"].as_u64());
    v
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test]
async fn eval_judges_every_record_shape_and_reports_pass_at_k() {
    let ex = Executor::start(Options {
        slots: 2,
        languages: vec!["python"],
        env: vec![("SANDPOOL_NAME".into(), "cli-eval".into())],
        ..Default::default()
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("mixed.jsonl");
    write_jsonl(
        &data,
        &[
            he("A", "    return a + b\n"),
            he("A", "    return a - b\n"),
            he("B", "    return b + a\n"),
            he("B", "    return sum((a, b))\n"),
            json!({"task_id": "S", "code": "print(int(input()) * 2)", "inputs": ["2\n", "3\n"], "outputs": ["4\n", "7\n"]}),
            json!({"task_id": 11, "code": "def sq(x):\n    return x * x\n", "test_list": ["assert sq(3) == 9", "assert sq(-2) == 4"]}),
        ],
    );
    let out = dir.path().join("out.jsonl");
    let o = sandpool(vec![
        "eval".into(),
        data.display().to_string(),
        "--endpoint".into(),
        ex.addr.clone(),
        "--concurrency".into(),
        "3".into(),
        "--k".into(),
        "1,2".into(),
        "--output".into(),
        out.display().to_string(),
    ])
    .await;
    assert!(o.status.success(), "{}", show(&o));
    let r = results(&out);
    let verdicts: Vec<&str> = r.iter().map(|r| r["verdict"].as_str().unwrap_or("?")).collect();
    assert_eq!(
        verdicts,
        ["OK", "RUNTIME_ERROR", "OK", "OK", "WRONG_ANSWER", "OK"],
        "{}",
        show(&o)
    );
    assert!(r.iter().all(|r| r["executor"] == "cli-eval"), "{r:?}");
    // Verdicts about the code are final: nothing was sent twice.
    assert!(r.iter().all(|r| r["attempts"] == 1), "{r:?}");
    assert_eq!(r[5]["task_id"], "11");
    assert_eq!(r[4]["tests"][1]["passed"], false);
    let stdout = String::from_utf8_lossy(&o.stdout);
    // A: 1 of 2, B: 2 of 2, S: 0 of 1, 11: 1 of 1 -> pass@1 = (0.5 + 1 + 0 + 1) / 4; pass@2 over A and B.
    assert!(stdout.contains("pass@1: 0.6250 over 4 tasks"), "{stdout}");
    assert!(stdout.contains("pass@2: 1.0000 over 2 tasks"), "{stdout}");
    let row = stdout.lines().find(|l| l.starts_with("python")).expect("python row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[1..3], ["6", "66.7%"], "{stdout}");
}

#[tokio::test]
async fn eval_joins_a_samples_file_to_gzipped_problems_on_the_embedded_executor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let problems = dir.path().join("problems.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&problems).expect("create"),
        flate2::Compression::default(),
    );
    for t in ["P/0", "P/1"] {
        let mut p = he(t, "");
        p.as_object_mut().expect("object").remove("completion");
        writeln!(gz, "{p}").expect("write");
    }
    gz.finish().expect("gzip");
    let samples = dir.path().join("samples.jsonl");
    write_jsonl(
        &samples,
        &[
            json!({"task_id": "P/0", "completion": "    return a + b\n"}),
            json!({"task_id": "P/1", "completion": "    while True: pass\n"}),
        ],
    );
    let work_root = tempfile::tempdir().expect("tempdir");
    let uid_base = 69000 + (std::process::id() % 10) * 100;
    let o = sandpool(vec![
        "eval".into(),
        samples.display().to_string(),
        "--problems".into(),
        problems.display().to_string(),
        "--wall-time-ms".into(),
        "1000".into(),
        "--work-root".into(),
        work_root.path().display().to_string(),
        "--uid-base".into(),
        uid_base.to_string(),
        "--slots".into(),
        "2".into(),
        "--enable-languages".into(),
        "python".into(),
    ])
    .await;
    assert!(o.status.success(), "{}", show(&o));
    // Default output: next to the dataset.
    let r = results(&dir.path().join("samples.results.jsonl"));
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["verdict"], "OK", "{r:?}");
    let slow = r[1]["verdict"].as_str().unwrap_or("?");
    assert!(
        slow == "TIME_LIMIT_EXCEEDED" || slow == "WALL_TIME_LIMIT_EXCEEDED",
        "{r:?}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("pass@1: 0.5000 over 2 tasks"));
}

#[tokio::test]
async fn eval_reports_bad_records_and_rejected_requests() {
    let ex = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("bad.jsonl");
    write_jsonl(&data, &[json!({"task_id": "x", "inputs": ["1"], "outputs": ["1"]})]);
    let o = sandpool(vec![
        "eval".into(),
        data.display().to_string(),
        "--endpoint".into(),
        ex.addr.clone(),
    ])
    .await;
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("record 1 (x): completion"), "{}", show(&o));

    std::fs::write(&data, "\n").expect("empty dataset");
    let o = sandpool(vec![
        "eval".into(),
        data.display().to_string(),
        "--endpoint".into(),
        ex.addr.clone(),
    ])
    .await;
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no records"),
        "{}",
        show(&o)
    );

    write_jsonl(
        &data,
        &[
            json!({"task_id": "ok", "code": "print(1)", "tests": [{"input": "", "output": "1"}]}),
            json!({"task_id": "bad", "language": "klingon", "code": "x", "tests": [{"input": "", "output": "1"}]}),
        ],
    );
    let out = dir.path().join("out.jsonl");
    let o = sandpool(vec![
        "eval".into(),
        data.display().to_string(),
        "--endpoint".into(),
        ex.addr.clone(),
        "-o".into(),
        out.display().to_string(),
    ])
    .await;
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let r = results(&out);
    assert_eq!(r[0]["verdict"], "OK");
    assert_eq!(r[1]["verdict"], "ERROR");
    assert_eq!(r[1]["error"]["code"], 3, "{r:?}");
    assert!(r[1]["error"]["message"].as_str().unwrap_or("").contains("language"));
}

/// What `sandpool eval` answered (the results, by line) when executor b of two got `signal`
/// after running `after` requests; every record must be answered once. Each sleeps `sleep` s.
async fn eval_losing_b(
    names: (&str, &str),
    records: usize,
    sleep: f64,
    concurrency: usize,
    after: f64,
    signal: i32,
) -> Vec<Value> {
    let start = |name: &str| {
        Executor::start(Options {
            slots: 2,
            languages: vec!["python"],
            env: vec![("SANDPOOL_NAME".into(), name.into())],
            ..Default::default()
        })
    };
    let (a, b) = (start(names.0).await, start(names.1).await);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("slow.jsonl");
    let body = format!("    import time; time.sleep({sleep})\n    return a + b\n");
    let records: Vec<Value> = (0..records).map(|i| he(&format!("T{i}"), &body)).collect();
    write_jsonl(&data, &records);
    let out = dir.path().join("out.jsonl");
    let args = vec![
        "eval".into(),
        data.display().to_string(),
        "--endpoint".into(),
        format!("{},{}", a.addr, b.addr),
        "--concurrency".into(),
        concurrency.to_string(),
        "--streams".into(),
        "4".into(),
        "--quiet".into(),
        "--output".into(),
        out.display().to_string(),
    ];
    let before = b.runs_total();
    let run = tokio::spawn(sandpool(args));
    let t = std::time::Instant::now();
    while b.runs_total() < before + after {
        assert!(t.elapsed().as_secs() < 60, "b never ran anything");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    sandpool_tests::signal(b.pid(), signal);
    let o = run.await.expect("join");
    assert!(o.status.success(), "{}", show(&o));
    let r = results(&out);
    assert_eq!(
        r.len(),
        records.len(),
        "every record answered exactly once: {}",
        show(&o)
    );
    drop(a);
    r
}

#[tokio::test]
async fn eval_spreads_over_executors_and_resends_what_a_killed_one_held() {
    // Killed once it has answered a few, while its streams hold more: no drain, the
    // connection just dies.
    let r = eval_losing_b(("cli-a", "cli-b"), 30, 0.2, 4, 3.0, libc::SIGKILL).await;
    assert!(r.iter().all(|r| r["verdict"] == "OK"), "{r:?}");
    let by = |name: &str| r.iter().filter(|r| r["executor"] == name).count();
    assert!(
        by("cli-a") > 0 && by("cli-b") > 0,
        "streams spread over both executors: {r:?}"
    );
    assert!(
        // Not exactly 2: a resend can meet b's dying connection once more before it reaches
        // a (stop 38 saw 3), and what matters is that it reached a and was answered once.
        r.iter()
            .any(|r| r["attempts"].as_u64() > Some(1) && r["executor"] == "cli-a"),
        "what b held was resent to a: {r:?}"
    );
}

#[tokio::test]
async fn eval_resends_what_a_draining_executor_refused_and_loses_nothing() {
    // Two streams of eight on each executor of two slots: b holds queued requests when it
    // gets SIGTERM, finishes what runs and answers what is queued UNAVAILABLE ("draining").
    let r = eval_losing_b(("drain-a", "drain-b"), 40, 0.3, 16, 2.0, libc::SIGTERM).await;
    assert!(
        r.iter().all(|r| r["verdict"] == "OK"),
        "a draining executor's refusals are resent, not reported: {r:?}"
    );
    assert!(
        r.iter()
            .any(|r| r["attempts"].as_u64() > Some(1) && r["executor"] == "drain-a"),
        "what b refused was resent to a: {r:?}"
    );
}

/// Fewer `--streams` than executors still reaches every executor: a stream goes to one executor,
/// so eval opens at least one per executor (before, `--streams 1` over three used one).
#[tokio::test]
async fn eval_opens_a_stream_per_executor_whatever_streams_says() {
    let mut execs = Vec::new();
    for name in ["each-a", "each-b", "each-c"] {
        execs.push(
            Executor::start(Options {
                slots: 1,
                languages: vec!["python"],
                env: vec![("SANDPOOL_NAME".into(), name.into())],
                ..Default::default()
            })
            .await,
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("d.jsonl");
    let body = "    import time; time.sleep(0.1)\n    return a + b\n";
    let records: Vec<Value> = (0..18).map(|i| he(&format!("T{i}"), body)).collect();
    write_jsonl(&data, &records);
    let out = dir.path().join("out.jsonl");
    let endpoint: Vec<String> = execs.iter().map(|e| e.addr.to_string()).collect();
    let o = sandpool(vec![
        "eval".into(),
        data.display().to_string(),
        "--endpoint".into(),
        endpoint.join(","),
        "--concurrency".into(),
        "6".into(),
        "--streams".into(),
        "1".into(),
        "--quiet".into(),
        "--output".into(),
        out.display().to_string(),
    ])
    .await;
    assert!(o.status.success(), "{}", show(&o));
    let r = results(&out);
    assert_eq!(r.len(), records.len(), "{}", show(&o));
    assert!(r.iter().all(|r| r["verdict"] == "OK"), "{r:?}");
    for name in ["each-a", "each-b", "each-c"] {
        assert!(r.iter().any(|r| r["executor"] == name), "{name} judged nothing: {r:?}");
    }
}

/// A client started before its executor (a Job beside a pool still starting, or a pod whose
/// address the NetworkPolicy lets through a moment after it starts) waits for it, briefly.
#[tokio::test]
async fn exec_waits_for_an_executor_that_is_still_starting() {
    let port = sandpool_tests::free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("six_sevens.py");
    std::fs::write(&file, "print(6 * 7)\n").expect("writing the program");
    let run = tokio::spawn(sandpool(vec![
        "exec".into(),
        file.display().to_string(),
        "--endpoint".into(),
        format!("127.0.0.1:{port}"),
    ]));
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let exe = Executor::start(Options {
        port: Some(port),
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    let o = run.await.expect("join");
    assert!(o.status.success(), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("42"), "{}", show(&o));
    drop(exe);
}

/// One row per shape and language, canonical then stub: (row, stub completion).
fn benchmark_rows() -> Vec<(Value, &'static str)> {
    let lcb_private = "eJxrYJlqywABPZbR1UqZeQWlJUpWCkqmMXlKOgpK+aUlUAFDA4hISWpxSUllQSpIrLgkJTNPqTZ2ih4ApoQUew==";
    vec![
        // HumanEval: the harness adds check(entry_point).
        (
            json!({"task_id": "HumanEval/0", "prompt": "def add(a, b):\n", "canonical_solution": "    return a + b\n", "test": ADD_TEST, "entry_point": "add"}),
            "    return 0\n",
        ),
        // MBXP (mxeval): Python needs check(entry_point); Java and JavaScript tests are programs.
        (
            json!({"task_id": "MBPP/1", "language": "python", "prompt": "def add(a, b):\n", "canonical_solution": "    return a + b\n",
                "test": "\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n", "entry_point": "add"}),
            "    return 0\n",
        ),
        (
            json!({"task_id": "MBJP/1", "language": "java", "entry_point": "add",
                "prompt": "import java.util.*;\n\nclass Add {\n    public static int add(int a, int b) {\n",
                "canonical_solution": "        return a + b;\n    }\n}\n",
                "test": "\nclass Main {\n    public static void main(String[] args) throws Exception {\n        int x = Add.add(1, 2);\n        if (x != 3) {\n            throw new java.lang.Exception(\"test case 0 did not pass, x = \" + x);\n        }\n    }\n}\n"}),
            "        return 0;\n    }\n}\n",
        ),
        (
            json!({"task_id": "MBJSP/1", "language": "javascript", "entry_point": "add", "prompt": "function add(a, b) {\n",
                "canonical_solution": "  return a + b;\n}\n", "test": "\nvar x = add(1, 2);\nif (x !== 3) { throw 'Error at test 1: ' + x; }\n"}),
            "  return 0;\n}\n",
        ),
        // HumanEval-X: tests call check or own main; Rust programs are assembled (Go too, but its
        // cold `go test` build is too slow for this test: see the unit tests of eval::records).
        (
            json!({"task_id": "Python/0", "prompt": "def add(a, b):\n", "declaration": "def add(a, b):\n", "canonical_solution": "    return a + b\n",
                "test": "\n\ndef check(add):\n    assert add(1, 2) == 3\n\ncheck(add)\n"}),
            "    return 0\n",
        ),
        (
            json!({"task_id": "CPP/0", "prompt": "#include<stdio.h>\nint add(int a, int b){\n", "declaration": "int add(int a, int b){\n",
                "canonical_solution": "    return a + b;\n}\n", "test": "#undef NDEBUG\n#include<assert.h>\nint main(){\n    assert (add(1, 2) == 3);\n}\n"}),
            "    return 0;\n}\n",
        ),
        (
            json!({"task_id": "Rust/0", "prompt": "\n/* add */\n", "declaration": "\nuse std::cmp::max;\nuse rand::Rng;\nfn add(a: i32, b: i32) -> i32 {\n",
                "canonical_solution": "    max(a + b, a + b)\n}\n",
                "test": "\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn test_add() {\n        assert_eq!(add(1, 2), 3);\n    }\n}\n"}),
            "    0\n}\n",
        ),
        // MultiPL-E: the prompt holds a stop token ("\ndef"), which must not cut it; the completion is cut.
        (
            json!({"name": "HumanEval_0_add", "language": "py", "prompt": "from typing import List\n\ndef add(a: int, b: int) -> int:\n",
                "tests": "def check(candidate):\n    assert candidate(1, 2) == 3\n\ndef test_check():\n    check(add)\n\ntest_check()\n",
                "stop_tokens": ["\ndef", "\n#", "\nif", "\nclass"], "completion": "    return a + b\n\ndef add(a, b):\n    return 0\n"}),
            "    return 0\n",
        ),
        (
            json!({"name": "HumanEval_0_add", "language": "js", "prompt": "function add(a, b){\n",
                "tests": "const assert = require('node:assert');\n\n\nfunction test() {\n  let candidate = add;\n  assert.deepEqual(candidate(1, 2),3);\n}\n\ntest();",
                "stop_tokens": ["\nfunction ", "\n/*", "\n//", "\nconsole.log"], "completion": "  return a + b;\n}\n\nfunction add(a, b) { return 0; }\n"}),
            "  return 0;\n}\n",
        ),
        // LiveCodeBench: stdin (public and compressed private cases) and functional.
        (
            json!({"question_id": "abc001_a", "platform": "atcoder", "public_test_cases": "[{\"input\": \"2\\n\", \"output\": \"4\\n\", \"testtype\": \"stdin\"}]",
                "private_test_cases": lcb_private, "metadata": "{}", "completion": "print(int(input()) * 2)"}),
            "print(4)",
        ),
        (
            json!({"question_id": "2000", "platform": "leetcode", "starter_code": "class Solution:\n    def addTwo(self, a: int, b: int) -> int:\n        ",
                "public_test_cases": "[{\"input\": \"1\\n2\", \"output\": \"3\", \"testtype\": \"functional\"}]", "private_test_cases": "[]",
                "metadata": "{\"func_name\": \"addTwo\"}", "completion": "```python\nclass Solution:\n    def addTwo(self, a, b):\n        return a + b\n```"}),
            "class Solution:\n    def addTwo(self, a, b):\n        return 0\n",
        ),
        // MBPP and stdio.
        (
            json!({"task_id": 11, "code": "def sq(x):\n    return x * x\n", "test_list": ["assert sq(3) == 9"]}),
            "def sq(x):\n    return 0\n",
        ),
        (
            json!({"task_id": "S", "code": "print(int(input()) * 2)", "inputs": ["2\n"], "outputs": ["4\n"]}),
            "print(0)",
        ),
    ]
}

#[tokio::test]
async fn eval_runs_every_benchmark_shape_in_several_languages() {
    let ex = Executor::start(Options {
        slots: 2,
        languages: vec!["python", "java", "javascript", "cpp", "rust_test"],
        ..Default::default()
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("benchmarks.jsonl");
    let rows = benchmark_rows();
    let records: Vec<Value> = rows
        .iter()
        .flat_map(|(row, stub)| {
            let mut s = row.clone();
            s["completion"] = json!(stub);
            [row.clone(), s]
        })
        .collect();
    write_jsonl(&data, &records);
    let out = dir.path().join("out.jsonl");
    let o = sandpool(vec![
        "eval".into(),
        data.display().to_string(),
        "--endpoint".into(),
        ex.addr.clone(),
        "--quiet".into(),
        "--wall-time-ms".into(),
        "30000".into(),
        "--output".into(),
        out.display().to_string(),
    ])
    .await;
    assert!(o.status.success(), "{}", show(&o));
    let r = results(&out);
    assert_eq!(r.len(), records.len(), "{}", show(&o));
    let mut wrong = vec![];
    for (n, res) in r.iter().enumerate() {
        let canonical = n % 2 == 0;
        let what = format!(
            "{} {} {}",
            res["task_id"],
            res["language"],
            if canonical { "canonical" } else { "stub" }
        );
        if canonical && res["verdict"] != "OK" {
            wrong.push(format!("{what}: {res}"));
        }
        if !canonical && (res["accepted"] == true || res["verdict"] == "ERROR") {
            wrong.push(format!("{what}: {res}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let langs: std::collections::BTreeSet<&str> = r.iter().filter_map(|r| r["language"].as_str()).collect();
    assert_eq!(
        langs.into_iter().collect::<Vec<_>>(),
        ["cpp", "java", "javascript", "js", "py", "python", "rust_test"]
    );
}

#[tokio::test]
async fn eval_ends_its_streams_so_the_executor_sees_no_broken_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("executor.log");
    let work_root = tempfile::Builder::new()
        .prefix("sandpool-test-")
        .tempdir()
        .expect("tempdir");
    let port = sandpool_tests::free_port();
    let mut child = Command::new(binary("sandpool-executor"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--metrics-listen",
            &format!("127.0.0.1:{}", sandpool_tests::free_port()),
        ])
        .arg("--work-root")
        .arg(work_root.path())
        .args(["--uid-base", &(67000 + (std::process::id() % 50) * 20).to_string()])
        .args(["--slots", "1", "--enable-languages", "python"])
        .env("RUST_LOG", "info,sandpool_executor::service=debug")
        .stdin(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawning sandpool-executor");
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed().as_secs() < 60, "executor never listened");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let data = dir.path().join("one.jsonl");
    write_jsonl(&data, &[he("A", "    return a + b\n")]);
    // Four streams for one record: three never carry a request, and all must end cleanly.
    let o = sandpool(vec![
        "eval".into(),
        data.display().to_string(),
        "--endpoint".into(),
        format!("127.0.0.1:{port}"),
        "--streams".into(),
        "4".into(),
        "--quiet".into(),
    ])
    .await;
    assert!(o.status.success(), "{}", show(&o));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("serving gRPC"), "{text}");
    assert!(!text.contains("EvaluateStream input ended by an error"), "{text}");
}
