//! `sandpool bench` against an executor the test starts: the counts it reports
//! match what the executor ran, and refused requests are counted as unanswered.

use sandpool_tests::{Executor, Options, binary};
use serde_json::Value;
use std::process::{Command, Output};

async fn bench(addr: &str, n: usize, c: usize) -> (Output, Value) {
    let args: Vec<String> = [
        "bench",
        "--endpoint",
        addr,
        "-n",
        &n.to_string(),
        "-c",
        &c.to_string(),
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let o = tokio::task::spawn_blocking(move || {
        Command::new(binary("sandpool"))
            .args(&args)
            .output()
            .expect("running sandpool bench")
    })
    .await
    .expect("join");
    let report = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "bench output is not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o, report)
}

#[tokio::test]
async fn bench_reports_what_the_executor_ran() {
    let ex = Executor::start(Options {
        slots: 2,
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    let before = ex.runs_total();
    let (o, r) = bench(&ex.addr, 40, 4).await;
    assert!(o.status.success(), "{r}");
    assert_eq!(r["no_response"], 0, "{r}");
    assert_eq!(r["verdicts"]["OK"], 40, "{r}");
    assert_eq!(ex.runs_total() - before, 40.0, "the executor ran each request once");
    let p = |q: &str| r["latency_ms"][q].as_f64().expect("latency");
    assert!(0.0 < p("p50") && p("p50") <= p("p90") && p("p90") <= p("p99"), "{r}");
    assert!(r["throughput_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
}

#[tokio::test]
async fn bench_counts_refused_requests_as_unanswered_and_fails() {
    // One slot and one queue place for eight concurrent requests: some are refused at once.
    let ex = Executor::start(Options {
        slots: 1,
        queue: Some(1),
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    let (o, r) = bench(&ex.addr, 24, 8).await;
    assert_eq!(o.status.code(), Some(1), "{r}");
    let unanswered = r["no_response"].as_u64().expect("no_response");
    assert!(unanswered > 0, "{r}");
    assert_eq!(r["errors"]["ResourceExhausted"].as_u64(), Some(unanswered), "{r}");
    let answered: u64 = r["verdicts"]
        .as_object()
        .expect("verdicts")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(answered + unanswered, 24, "{r}");
}
