//! EvaluateStream: many mixed requests on one stream, each answered exactly
//! once, as it finishes.

mod judge_common;

use futures::StreamExt;
use judge_common::*;
use sandpool_executor::proto as pb;
use std::collections::HashMap;

const LANGS: &[&str] = &["python", "cpp"];

fn stdio(id: String, language: &str, code: &str, stdin: &str, expected: &str) -> pb::EvaluateRequest {
    pb::EvaluateRequest {
        id,
        language: language.into(),
        completion: code.into(),
        tests: Some(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
            cases: vec![pb::StdioCase {
                stdin: stdin.as_bytes().to_vec(),
                expected_stdout: expected.as_bytes().to_vec(),
            }],
            comparison: None,
        })),
        ..Default::default()
    }
}

/// The request for item `i` and the verdict (or error code) expected for it.
fn item(i: usize) -> (pb::EvaluateRequest, &'static str) {
    let id = format!("req-{i}");
    match i % 10 {
        0 if i.is_multiple_of(100) => (
            stdio(
                id,
                "python",
                "import time\ntime.sleep(3)\nprint(input())",
                "slow",
                "slow",
            ),
            "OK",
        ),
        0..=3 => (
            stdio(
                id,
                "python",
                "print(int(input()) + 1)",
                &i.to_string(),
                &(i + 1).to_string(),
            ),
            "OK",
        ),
        4 => (stdio(id, "python", "print(0)", "1", "2"), "WRONG_ANSWER"),
        5 => (
            assert_request(
                &id,
                "python",
                "def inc(x):\n    return x + 1",
                "def check(c):\n    assert c(1) == 2\n",
                "inc",
            ),
            "OK",
        ),
        6 => (
            pb::EvaluateRequest {
                id,
                language: "python".into(),
                completion: "def add(a, b):\n    return a - b".into(),
                tests: Some(pb::evaluate_request::Tests::FunctionCall(pb::FunctionCallTests {
                    fn_name: "add".into(),
                    cases: vec![pb::FunctionCase {
                        arguments_json: "[1, 2]".into(),
                        expected_json: "3".into(),
                    }],
                    json_input: false,
                })),
                ..Default::default()
            },
            "WRONG_ANSWER",
        ),
        7 => (stdio(id, "cobol", "x", "", ""), "error:3"),
        8 if i % 100 == 58 => (
            stdio(
                id,
                "cpp",
                "#include <cstdio>\nint main(){int n; scanf(\"%d\",&n); printf(\"%d\\n\", n*3);}",
                "5",
                "15",
            ),
            "OK",
        ),
        _ => (stdio(id, "python", "raise SystemExit(2)", "", ""), "RUNTIME_ERROR"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn five_hundred_mixed_requests_each_answered_once() {
    let mut c = client(LANGS).await;
    let n = 500;
    let expected: HashMap<String, &str> = (0..n).map(|i| (format!("req-{i}"), item(i).1)).collect();
    let input = futures::stream::iter((0..n).map(|i| item(i).0));
    let mut out = c.evaluate_stream(input).await.expect("EvaluateStream").into_inner();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut order = Vec::new();
    while let Some(resp) = out.next().await {
        let resp = resp.expect("stream item");
        let got = match &resp.error {
            Some(e) => format!("error:{}", e.code),
            None => verdict(resp.verdict).to_owned(),
        };
        let want = expected
            .get(&resp.id)
            .unwrap_or_else(|| panic!("unknown id {:?}", resp.id));
        assert_eq!(&got, want, "{}: {resp:?}", resp.id);
        *seen.entry(resp.id.clone()).or_default() += 1;
        order.push(resp.id);
    }
    assert_eq!(seen.len(), n, "ids answered");
    assert!(seen.values().all(|c| *c == 1), "every id exactly once");
    // req-0 sleeps 3 s and was sent first: answers that overtake it show the stream is not
    // answered in order. A few suffice: the other tests of this binary share the executor's
    // slots (two on a 2-core CI machine), and a C++ compile (the first one builds the shared
    // headers in its request's slot) is kept out of the first 50 so it cannot take the other.
    let slow_at = order.iter().position(|id| id == "req-0").expect("req-0");
    assert!(
        slow_at >= 3,
        "req-0 answered at position {slow_at}: {:?}",
        &order[..slow_at]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_stops_reading_stops_the_stream_being_read() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut c = client(LANGS).await;
    let n = 300;
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = pulled.clone();
    // 64 KiB each, so the HTTP/2 windows (1 MiB each way) buffer only a few dozen.
    let padding = format!("# {}\n", "x".repeat(64 << 10));
    let input = futures::stream::iter(0..n).map(move |i| {
        counter.fetch_add(1, Ordering::SeqCst);
        stdio(format!("fc-{i}"), "python", &format!("{padding}print(1)"), "", "1")
    });
    let mut out = c.evaluate_stream(input).await.expect("EvaluateStream").into_inner();
    // Not reading: the server may hold only a bounded number of requests.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let held = pulled.load(Ordering::SeqCst);
    println!("requests taken while the client did not read: {held} of {n}");
    assert!(
        held < n / 2,
        "the client could make the server take {held} of {n} requests"
    );
    let mut answered = 0;
    while let Some(r) = out.next().await {
        assert_eq!(verdict(r.expect("item").verdict), "OK");
        answered += 1;
    }
    assert_eq!(answered, n);
}

#[tokio::test(flavor = "multi_thread")]
async fn closing_the_stream_cancels_its_runs() {
    let mut c = client(LANGS).await;
    let slow = (0..4).map(|i| stdio(format!("slow-{i}"), "python", "import time\ntime.sleep(20)", "", ""));
    let out = c
        .evaluate_stream(futures::stream::iter(slow))
        .await
        .expect("EvaluateStream");
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    drop(out);
    // Were the sleepers still holding the slots, this would wait ~20 s.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let t = std::time::Instant::now();
    let r = c
        .evaluate(stdio("quick".into(), "python", "print(1)", "", "1"))
        .await
        .expect("Evaluate")
        .into_inner();
    assert!(r.accepted);
    assert!(t.elapsed().as_secs() < 10, "took {:?}", t.elapsed());
}
