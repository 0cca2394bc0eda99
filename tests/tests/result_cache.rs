//! The result cache (`--result-cache-entries`): identical requests answered
//! without running, over real gRPC on loopback.
//!
//! "Not run" is proven three ways: the response says `cached`, a program that
//! prints random bytes prints the same ones again (a second run could not), and
//! the executor's run counter does not move.

use futures::StreamExt;
use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Options, describe, request, stdout, verdict};

/// Prints 16 random bytes: two runs never print the same.
const RANDOM: &str = "import os\nprint(os.urandom(16).hex(), input())";

async fn start(entries: usize, extra: &[&str]) -> Executor {
    let mut extra_args = vec!["--result-cache-entries".to_owned(), entries.to_string()];
    extra_args.extend(extra.iter().map(|s| s.to_string()));
    Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        extra_args,
        ..Default::default()
    })
    .await
}

fn with_limits(mut r: pb::ExecuteRequest, wall_ms: u64, cpu_ms: u64) -> pb::ExecuteRequest {
    r.limits = Some(pb::Limits {
        wall_time_ms: wall_ms,
        cpu_time_ms: cpu_ms,
        ..Default::default()
    });
    r
}

fn hits(exe: &Executor) -> f64 {
    exe.metric("sandpool_result_cache_hits_total")
}

#[tokio::test]
async fn identical_executes_are_answered_from_the_cache_and_different_ones_run() {
    let exe = start(64, &[]).await;
    let first = exe.run(request("python", RANDOM, "a")).await;
    assert_eq!(verdict(first.verdict), "OK", "{}", describe(&first));
    assert!(!first.cached, "a first request cannot be cached");
    let runs = exe.runs_total();

    let mut again = request("python", RANDOM, "a");
    again.request_id = "another caller".into();
    let second = exe.run(again).await;
    assert!(
        second.cached,
        "identical request not answered from the cache: {}",
        describe(&second)
    );
    assert_eq!(stdout(&second), stdout(&first), "the random bytes differ: it ran again");
    assert_eq!(
        second.run.as_ref().map(|p| p.wall_time_us),
        first.run.as_ref().map(|p| p.wall_time_us)
    );
    assert_eq!(exe.runs_total(), runs, "a cached answer counted as a run");
    assert_eq!(hits(&exe), 1.0);

    // Limits left at the default and the defaults spelled out are the same request.
    let caps = exe.client().get_capabilities(pb::GetCapabilitiesRequest {}).await;
    let defaults = caps
        .expect("capabilities")
        .into_inner()
        .default_limits
        .expect("defaults");
    let mut spelled = request("python", RANDOM, "a");
    spelled.limits = Some(defaults);
    assert!(
        exe.run(spelled).await.cached,
        "the defaults spelled out missed the cache"
    );

    // Anything that can change the result misses.
    let misses = [
        ("stdin", request("python", RANDOM, "b")),
        ("code", request("python", &format!("{RANDOM}\n"), "a")),
        ("limits", with_limits(request("python", RANDOM, "a"), 5_000, 5_000)),
        ("args", {
            let mut r = request("python", RANDOM, "a");
            r.args = vec!["x".into()];
            r
        }),
        ("files", {
            let mut r = request("python", RANDOM, "a");
            r.files = vec![pb::File {
                path: "data.txt".into(),
                content: b"1".to_vec(),
                executable: false,
            }];
            r
        }),
    ];
    for (what, req) in misses {
        let r = exe.run(req).await;
        assert_eq!(verdict(r.verdict), "OK", "{what}: {}", describe(&r));
        assert!(!r.cached, "a request with another {what} was answered from the cache");
        assert_ne!(stdout(&r), stdout(&first), "{what}: same random bytes");
    }

    // Opting out runs again, and does not replace what is stored.
    let mut bypass = request("python", RANDOM, "a");
    bypass.cache = pb::CachePolicy::Bypass as i32;
    let b = exe.run(bypass).await;
    assert!(!b.cached);
    assert_ne!(
        stdout(&b),
        stdout(&first),
        "CACHE_POLICY_BYPASS was answered from the cache"
    );
    let c = exe.run(request("python", RANDOM, "a")).await;
    assert!(c.cached);
    assert_eq!(stdout(&c), stdout(&first));

    // An unknown policy is the request's error, named.
    let mut bad = request("python", RANDOM, "a");
    bad.cache = 77;
    let err = exe
        .client()
        .execute(bad)
        .await
        .expect_err("unknown cache policy accepted");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("cache"), "{}", err.message());
}

#[tokio::test]
async fn time_limits_are_cached_only_when_asked() {
    let exe = start(64, &[]).await;
    let spin = || with_limits(request("python", "while True: pass", ""), 2_000, 200);
    for _ in 0..2 {
        let r = exe.run(spin()).await;
        assert_eq!(verdict(r.verdict), "TIME_LIMIT_EXCEEDED", "{}", describe(&r));
        assert!(!r.cached, "a TIME_LIMIT_EXCEEDED was answered from the cache");
    }
    let wall = || with_limits(request("python", "import time\ntime.sleep(5)", ""), 150, 150);
    for _ in 0..2 {
        let r = exe.run(wall()).await;
        assert_eq!(verdict(r.verdict), "WALL_TIME_LIMIT_EXCEEDED", "{}", describe(&r));
        assert!(!r.cached, "a WALL_TIME_LIMIT_EXCEEDED was answered from the cache");
    }
    let asks = || {
        let mut r = spin();
        r.cache = pb::CachePolicy::IncludeLimits as i32;
        r
    };
    assert!(!exe.run(asks()).await.cached);
    let r = exe.run(asks()).await;
    assert_eq!(verdict(r.verdict), "TIME_LIMIT_EXCEEDED");
    assert!(r.cached, "CACHE_POLICY_INCLUDE_LIMITS did not cache the TLE");
    // A request that did not ask is not answered with the stored TLE.
    assert!(!exe.run(spin()).await.cached);
}

#[tokio::test]
async fn limit_verdicts_flag_caches_them_for_every_request() {
    let exe = start(64, &["--result-cache-limit-verdicts"]).await;
    let spin = || with_limits(request("python", "while True: pass", ""), 2_000, 200);
    assert!(!exe.run(spin()).await.cached);
    let r = exe.run(spin()).await;
    assert_eq!(verdict(r.verdict), "TIME_LIMIT_EXCEEDED");
    assert!(r.cached, "--result-cache-limit-verdicts did not cache the TLE");
}

#[tokio::test]
async fn sandbox_errors_are_not_cached() {
    let exe = start(64, &[]).await;
    exe.run(request("python", "print(1)", "")).await;
    // Too few descriptors for a run's pipes: the executor fails, not the program. (The limit
    // cannot be raised again without CAP_SYS_RESOURCE: the repeat runs under it too, and
    // would come back cached if the failure had been stored.)
    exe.limit_fds(exe.open_fds() as u64 + 2);
    for attempt in 0..2 {
        let r = exe.run(request("python", RANDOM, "z")).await;
        assert_eq!(
            verdict(r.verdict),
            "SANDBOX_ERROR",
            "attempt {attempt}: {}",
            describe(&r)
        );
        assert!(!r.cached, "a SANDBOX_ERROR was answered from the cache");
    }
}

#[tokio::test]
async fn the_cache_is_bounded_least_recently_used_first() {
    let exe = start(3, &[]).await;
    let req = |i: usize| request("python", RANDOM, &i.to_string());
    for i in 0..3 {
        exe.run(req(i)).await;
    }
    // Touch 0: 1 is now the least recently used.
    assert!(exe.run(req(0)).await.cached);
    exe.run(req(3)).await;
    assert!(exe.metric("sandpool_result_cache_evictions_total") >= 1.0);
    assert_eq!(exe.metric("sandpool_result_cache_entries"), 3.0);
    assert!(
        !exe.run(req(1)).await.cached,
        "the least recently used entry was kept past the bound"
    );
    assert!(exe.run(req(3)).await.cached);
    assert!(exe.run(req(0)).await.cached);
}

#[tokio::test]
async fn off_by_default() {
    let exe = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    let a = exe.run(request("python", RANDOM, "a")).await;
    let b = exe.run(request("python", RANDOM, "a")).await;
    assert!(!b.cached);
    assert_ne!(stdout(&a), stdout(&b));
    // The policy is checked with the cache off too.
    let mut bad = request("python", RANDOM, "a");
    bad.cache = 77;
    let err = exe
        .client()
        .execute(bad)
        .await
        .expect_err("unknown cache policy accepted");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let mut bad = evaluate_request("x");
    bad.cache = -1;
    let err = exe
        .client()
        .evaluate(bad)
        .await
        .expect_err("unknown cache policy accepted");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("cache"), "{}", err.message());
}

fn evaluate_request(id: &str) -> pb::EvaluateRequest {
    pb::EvaluateRequest {
        id: id.into(),
        language: "python".into(),
        completion:
            "import os\nn = int(input())\nprint(n * 2)\nimport sys\nprint(os.urandom(8).hex(), file=sys.stderr)".into(),
        tests: Some(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
            cases: vec![
                pb::StdioCase {
                    stdin: b"2".to_vec(),
                    expected_stdout: b"4".to_vec(),
                },
                pb::StdioCase {
                    stdin: b"5".to_vec(),
                    expected_stdout: b"10".to_vec(),
                },
            ],
            comparison: None,
        })),
        ..Default::default()
    }
}

fn stderrs(r: &pb::EvaluateResponse) -> Vec<Vec<u8>> {
    r.tests
        .iter()
        .map(|t| t.run.as_ref().map(|p| p.stderr.clone()).unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn evaluate_and_stream_items_are_answered_from_the_cache() {
    let exe = start(64, &[]).await;
    let mut client = exe.client();
    let first = client
        .evaluate(evaluate_request("one"))
        .await
        .expect("evaluate")
        .into_inner();
    assert!(first.accepted, "{first:?}");
    assert!(!first.cached);
    let runs = exe.runs_total();

    let second = client
        .evaluate(evaluate_request("two"))
        .await
        .expect("evaluate")
        .into_inner();
    assert!(second.cached, "identical Evaluate not answered from the cache");
    assert_eq!(second.id, "two", "a cached answer must carry the new request's id");
    assert_eq!(stderrs(&second), stderrs(&first), "the tests ran again");
    assert_eq!(exe.runs_total(), runs);

    // Other tests miss.
    let mut other = evaluate_request("three");
    if let Some(pb::evaluate_request::Tests::Stdio(s)) = &mut other.tests {
        s.cases[1].expected_stdout = b"11".to_vec();
    }
    let o = client.evaluate(other).await.expect("evaluate").into_inner();
    assert!(!o.cached);
    assert_eq!(verdict(o.verdict), "WRONG_ANSWER");

    // Other options miss.
    let mut opts = evaluate_request("four");
    opts.options = Some(pb::EvaluateOptions {
        run_all_cases: true,
        ..Default::default()
    });
    assert!(!client.evaluate(opts).await.expect("evaluate").into_inner().cached);

    // Stream items go through the same cache, each with its own id.
    let items = vec![evaluate_request("s1"), evaluate_request("s2")];
    let mut out = client
        .evaluate_stream(futures::stream::iter(items))
        .await
        .expect("stream")
        .into_inner();
    let mut seen = Vec::new();
    while let Some(r) = out.next().await {
        let r = r.expect("stream item");
        assert!(r.cached, "stream item {} not answered from the cache", r.id);
        assert_eq!(stderrs(&r), stderrs(&first));
        seen.push(r.id);
    }
    seen.sort();
    assert_eq!(seen, ["s1", "s2"]);
    assert_eq!(exe.runs_total(), runs + 2.0, "only the two missing requests ran");
}

/// POSTs `body` to the executor's HTTP API; the reply's JSON.
fn post(exe: &Executor, path: &str, body: &serde_json::Value) -> serde_json::Value {
    use std::io::{Read, Write};
    let addr = exe.http_addr.as_deref().expect("http");
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    let payload = body.to_string();
    write!(
        conn,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    )
    .expect("write");
    let mut raw = String::new();
    conn.read_to_string(&mut raw).expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    serde_json::from_str(body).expect("JSON reply")
}

#[tokio::test]
async fn the_http_api_goes_through_the_cache_and_says_so() {
    let exe = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        extra_args: vec!["--result-cache-entries".into(), "8".into()],
        http: true,
        ..Default::default()
    })
    .await;
    let body = serde_json::json!({"language": "python", "code": RANDOM, "stdin": "h"});
    let first = post(&exe, "/run_code", &body);
    assert_eq!(first["executor_cached"], false, "{first}");
    let second = post(&exe, "/run_code", &body);
    assert_eq!(second["executor_cached"], true, "{second}");
    assert_eq!(second["run_result"]["stdout"], first["run_result"]["stdout"]);
}

#[tokio::test]
async fn identical_requests_in_flight_together_run_once() {
    let exe = start(64, &[]).await;
    exe.run(request("python", "print(1)", "")).await;
    let runs = exe.runs_total();
    let slow = "import os, time\ntime.sleep(0.5)\nprint(os.urandom(16).hex())";
    let calls = (0..4).map(|_| {
        let mut c = exe.client();
        async move { c.execute(request("python", slow, "")).await }
    });
    let rs: Vec<pb::ExecuteResponse> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.expect("execute").into_inner())
        .collect();
    assert_eq!(rs.iter().filter(|r| !r.cached).count(), 1, "more than one ran");
    assert!(
        rs.iter().all(|r| stdout(r) == stdout(&rs[0])),
        "different outputs: they ran apart"
    );
    assert_eq!(exe.runs_total(), runs + 1.0);
}

/// Attack round 2, item 10: with auth off the cache was shared across callers that
/// sessions keep apart, so one caller learned that another had run exactly this program
/// (a `cached` answer, another's random bytes). Answers are scoped by the caller's
/// `authorization` value, on Execute, Evaluate and streams alike.
#[tokio::test]
async fn one_callers_cached_answers_are_not_anothers() {
    let exe = start(64, &[]).await;
    let as_caller = |who: &str, r: pb::ExecuteRequest| {
        let mut req = tonic::Request::new(r);
        if !who.is_empty() {
            req.metadata_mut()
                .insert("authorization", who.parse().expect("metadata value"));
        }
        req
    };
    let mut c = exe.client();
    let alice = c
        .execute(as_caller("Bearer alice", request("python", RANDOM, "x")))
        .await
        .expect("alice")
        .into_inner();
    assert!(!alice.cached);
    for who in ["Bearer bob", ""] {
        let other = c
            .execute(as_caller(who, request("python", RANDOM, "x")))
            .await
            .expect("another caller")
            .into_inner();
        assert!(!other.cached, "{who:?} was answered from alice's entry");
        assert_ne!(stdout(&other), stdout(&alice), "{who:?} saw alice's random bytes");
    }
    // Alice herself, however she spells the scheme, still hits her own entry.
    let again = c
        .execute(as_caller("bearer  alice", request("python", RANDOM, "x")))
        .await
        .expect("alice again")
        .into_inner();
    assert!(again.cached, "{}", describe(&again));
    assert_eq!(stdout(&again), stdout(&alice));

    let eval_as = |who: &str, id: &str| {
        let mut req = tonic::Request::new(evaluate_request(id));
        req.metadata_mut()
            .insert("authorization", who.parse().expect("metadata value"));
        req
    };
    assert!(
        !c.evaluate(eval_as("Bearer alice", "e1"))
            .await
            .expect("evaluate")
            .into_inner()
            .cached
    );
    assert!(
        !c.evaluate(eval_as("Bearer bob", "e2"))
            .await
            .expect("evaluate")
            .into_inner()
            .cached
    );
    assert!(
        c.evaluate(eval_as("Bearer bob", "e3"))
            .await
            .expect("evaluate")
            .into_inner()
            .cached
    );
}
