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

#[tokio::test]
async fn eval_spreads_over_executors_and_resends_what_a_killed_one_held() {
    let start = |name: &str| {
        Executor::start(Options {
            slots: 2,
            languages: vec!["python"],
            env: vec![("SANDPOOL_NAME".into(), name.into())],
            ..Default::default()
        })
    };
    let (a, b) = (start("cli-a").await, start("cli-b").await);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("slow.jsonl");
    let records: Vec<Value> = (0..30)
        .map(|i| he(&format!("T{i}"), "    import time; time.sleep(0.2)\n    return a + b\n"))
        .collect();
    write_jsonl(&data, &records);
    let out = dir.path().join("out.jsonl");
    let args = vec![
        "eval".into(),
        data.display().to_string(),
        "--endpoint".into(),
        format!("{},{}", a.addr, b.addr),
        "--concurrency".into(),
        "4".into(),
        "--streams".into(),
        "4".into(),
        "--quiet".into(),
        "--output".into(),
        out.display().to_string(),
    ];
    let before = b.runs_total();
    let run = tokio::spawn(sandpool(args));
    // Kill b once it has answered a few, while its streams hold more: no drain,
    // the connection just dies.
    let t = std::time::Instant::now();
    while b.runs_total() < before + 3.0 {
        assert!(t.elapsed().as_secs() < 60, "b never ran anything");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    sandpool_tests::signal(b.pid(), libc::SIGKILL);
    let o = run.await.expect("join");
    assert!(o.status.success(), "{}", show(&o));
    let r = results(&out);
    assert_eq!(r.len(), 30, "every record answered exactly once: {}", show(&o));
    assert!(r.iter().all(|r| r["verdict"] == "OK"), "{r:?}");
    let by = |name: &str| r.iter().filter(|r| r["executor"] == name).count();
    assert!(
        by("cli-a") > 0 && by("cli-b") > 0,
        "streams spread over both executors: {r:?}"
    );
    assert!(
        r.iter().any(|r| r["attempts"] == 2 && r["executor"] == "cli-a"),
        "what b held was resent to a: {r:?}"
    );
    drop(a);
}
