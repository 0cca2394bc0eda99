//! The judge against a scripted runner ([`crate::fake_runner`]): its logic
//! (stopping, timeouts, special judges, compiling once, warm-ups, errors and the
//! overall verdict) without root, compilers or sandboxes.

use super::Judge;
use super::evaluate::SKIPPED_AT_TOTAL_TIMEOUT;
use crate::error::ExecError;
use crate::fake_runner::{Call, Calls, FakeRunner, Reply, engine, engine_with};
use sandpool_proto::v1 as pb;
use sandpool_sandbox::{RunOutcome, Termination};
use std::time::Duration;

async fn judge(slots: usize, script: impl Fn(&Call) -> Reply + Send + Sync + 'static) -> (Judge, Calls) {
    let (runner, calls) = FakeRunner::new(slots, script);
    (Judge::new(engine(runner).await), calls)
}

fn stdio(language: &str, code: &str, cases: &[(&str, &str)]) -> pb::EvaluateRequest {
    pb::EvaluateRequest {
        id: "r".into(),
        language: language.into(),
        completion: code.into(),
        tests: Some(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
            cases: cases
                .iter()
                .map(|(i, o)| pb::StdioCase {
                    stdin: i.as_bytes().to_vec(),
                    expected_stdout: o.as_bytes().to_vec(),
                })
                .collect(),
            comparison: None,
        })),
        options: Some(pb::EvaluateOptions {
            raw_code: true,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn options(mut r: pb::EvaluateRequest, f: impl FnOnce(&mut pb::EvaluateOptions)) -> pb::EvaluateRequest {
    f(r.options.get_or_insert_with(Default::default));
    r
}

fn verdicts(r: &pb::EvaluateResponse) -> Vec<&'static str> {
    r.tests
        .iter()
        .map(|t| pb::Verdict::try_from(t.verdict).map_or("?", |v| v.as_str_name()))
        .collect()
}

fn verdict(r: &pb::EvaluateResponse) -> &'static str {
    pb::Verdict::try_from(r.verdict).map_or("?", |v| v.as_str_name())
}

/// The program "double": prints twice its input number; "2" gets a wrong answer.
fn doubler(c: &Call) -> Reply {
    let n: i64 = c.stdin_text().trim().parse().unwrap_or(-1);
    if n == 2 {
        Reply::ok("wrong")
    } else {
        Reply::ok((2 * n).to_string())
    }
}

fn doubling_cases() -> Vec<(&'static str, &'static str)> {
    vec![("0", "0"), ("1", "2"), ("2", "4"), ("3", "6"), ("4", "8")]
}

#[tokio::test]
async fn the_first_failure_stops_the_tests_after_it() {
    let (j, calls) = judge(1, doubler).await;
    let r = j
        .evaluate(stdio("fake", "double", &doubling_cases()), None)
        .await
        .expect("judged");
    assert_eq!(verdicts(&r), ["OK", "OK", "WRONG_ANSWER", "SKIPPED", "SKIPPED"]);
    assert!(
        r.tests[3].message.contains("earlier test failed"),
        "{}",
        r.tests[3].message
    );
    assert!(r.tests[3].run.is_none(), "a skipped test has no run");
    let ran: Vec<String> = calls.of("fake-run").iter().map(Call::stdin_text).collect();
    assert_eq!(ran, ["0", "1", "2"], "tests after the failure were run");
    assert!(!r.accepted);
    assert_eq!(verdict(&r), "WRONG_ANSWER");
    assert_eq!(r.message, "test 2: WRONG_ANSWER");

    let all = options(stdio("fake", "double", &doubling_cases()), |o| o.run_all_cases = true);
    let r = j.evaluate(all, None).await.expect("judged");
    assert_eq!(verdicts(&r), ["OK", "OK", "WRONG_ANSWER", "OK", "OK"]);
    assert_eq!(calls.of("fake-run").len(), 3 + 5);
}

#[tokio::test(start_paused = true)]
async fn total_timeout_skips_the_tests_not_started_in_time() {
    // Each run takes 100 ms of (paused, auto-advancing) tokio time; one at a time.
    let (j, calls) = judge(1, |c| doubler(c).after(Duration::from_millis(100))).await;
    let cases = [("0", "0"), ("1", "2"), ("3", "6"), ("4", "8"), ("5", "10")];
    let req = options(stdio("fake", "double", &cases), |o| o.total_timeout_ms = 250);
    let r = j.evaluate(req, None).await.expect("judged");
    // Tests start at 0, 100 and 200 ms; at 300 ms the 250 ms budget is spent.
    assert_eq!(verdicts(&r), ["OK", "OK", "OK", "SKIPPED", "SKIPPED"]);
    assert_eq!(r.tests[3].message, SKIPPED_AT_TOTAL_TIMEOUT);
    let limited: Vec<bool> = r.tests.iter().map(|t| t.limit_ended).collect();
    assert_eq!(
        limited,
        [false, false, false, true, true],
        "the skips say a limit decided them"
    );
    assert_eq!(calls.of("fake-run").len(), 3);
    assert_eq!(verdict(&r), "SKIPPED", "a request cut short is not accepted");
    assert!(!r.accepted);
}

/// The checker "check": passes answers equal to the expected output but for case;
/// "slow" runs out of CPU time, "boom" breaks the sandbox.
fn with_checker(c: &Call) -> Reply {
    match c.program().as_str() {
        "check" => {
            let (answer, expected) = (c.file("answer.txt"), c.file("stdout.txt"));
            if c.file("stdin.txt") != answer {
                return Reply::exit(2, "", "stdin.txt is not the test's input");
            }
            match answer.as_str() {
                "slow" => Reply::killed(Termination::CpuTime),
                "boom" => Reply::sandbox_error("checker sandbox broke"),
                _ if answer.eq_ignore_ascii_case(&expected) => Reply::ok(""),
                _ => Reply::exit(1, "", "mismatch"),
            }
        }
        // The program under test echoes its input.
        _ => Reply::ok(c.stdin.clone()),
    }
}

#[tokio::test]
async fn special_judges_decide_each_stdio_test() {
    let (j, calls) = judge(2, with_checker).await;
    let cases = [("hello", "HELLO"), ("abc", "xyz"), ("slow", "slow"), ("boom", "boom")];
    let mut req = options(stdio("fake", "echo", &cases), |o| o.run_all_cases = true);
    req.special_judge = Some(pb::SpecialJudge {
        language: "fake".into(),
        code: "check".into(),
    });
    let r = j.evaluate(req, None).await.expect("judged");
    assert_eq!(
        verdicts(&r),
        ["OK", "WRONG_ANSWER", "WRONG_ANSWER", "SANDBOX_ERROR"],
        "{:?}",
        r.tests.iter().map(|t| &t.message).collect::<Vec<_>>()
    );
    assert_eq!(
        r.tests[1].message,
        "special judge rejected the answer (exit 1): mismatch"
    );
    assert!(
        r.tests[2]
            .message
            .starts_with("special judge ended with TIME_LIMIT_EXCEEDED"),
        "{}",
        r.tests[2].message
    );
    assert!(
        r.tests[2].limit_ended && !r.tests[1].limit_ended,
        "only the checker at its limit is limit-ended"
    );
    assert!(
        r.tests[3].message.contains("checker sandbox broke"),
        "{}",
        r.tests[3].message
    );
    assert_eq!(
        verdict(&r),
        "WRONG_ANSWER",
        "a definite failure wins over the executor's"
    );
    // The checker ran once per test whose program exited 0, in a work dir of its own.
    let checks = calls.all().into_iter().filter(|c| c.program() == "check").count();
    assert_eq!(checks, 4);
}

#[tokio::test]
async fn special_judges_that_cannot_apply_are_the_requests_error() {
    let (j, _) = judge(1, |c| {
        if c.argv[0] == "fake-cc" {
            Reply::exit(1, "", "checker: syntax error")
        } else {
            Reply::ok("")
        }
    })
    .await;
    let mut fc = stdio("fake", "x", &[("1", "1")]);
    fc.tests = Some(pb::evaluate_request::Tests::FunctionCall(pb::FunctionCallTests {
        fn_name: "f".into(),
        cases: vec![pb::FunctionCase {
            arguments_json: "[1]".into(),
            expected_json: "1".into(),
        }],
        json_input: false,
    }));
    fc.special_judge = Some(pb::SpecialJudge {
        language: "fake".into(),
        code: "check".into(),
    });
    match j.evaluate(fc, None).await {
        Err(ExecError::InvalidArgument { field, .. }) => assert_eq!(field, "special_judge"),
        other => panic!("special judge on function_call tests: {other:?}"),
    }
    let mut bad = stdio("fake", "x", &[("1", "1")]);
    bad.special_judge = Some(pb::SpecialJudge {
        language: "fakec".into(),
        code: "does not compile".into(),
    });
    match j.evaluate(bad, None).await {
        Err(ExecError::InvalidArgument { field, message }) => {
            assert_eq!(field, "special_judge.code");
            assert!(message.contains("checker: syntax error"), "{message}");
        }
        other => panic!("a checker that does not compile: {other:?}"),
    }
}

/// `fake-cc` "compiles" main.fc into a.out; "syntax" fails, "ccboom" breaks the sandbox;
/// a.out echoes its input when it is a build of the source.
fn compiler(c: &Call) -> Reply {
    match c.argv[0].as_str() {
        "fake-cc" => match c.file("main.fc").as_str() {
            "syntax" => Reply::exit(1, "", "syntax error"),
            "ccboom" => Reply::sandbox_error("compiler sandbox broke"),
            src => Reply::ok("").writing("a.out", format!("BIN:{src}")),
        },
        "./a.out" if c.program().starts_with("BIN:") => Reply::ok(c.stdin.clone()),
        _ => Reply::exit(127, "", "no a.out"),
    }
}

#[tokio::test]
async fn compiled_languages_compile_once_per_evaluate() {
    let (j, calls) = judge(2, compiler).await;
    let cases = [("a", "a"), ("b", "b"), ("c", "c"), ("d", "d")];
    let r = j.evaluate(stdio("fakec", "prog", &cases), None).await.expect("judged");
    assert!(r.accepted, "{r:?}");
    assert_eq!(calls.of("fake-cc").len(), 1, "compiled more than once for one request");
    let runs = calls.of("./a.out");
    assert_eq!(runs.len(), 4);
    assert!(
        runs.iter().all(|c| c.file("a.out") == "BIN:prog"),
        "a test ran without the build"
    );
    assert_eq!(r.compile.as_ref().map(|p| p.verdict), Some(pb::Verdict::Ok as i32));
    // Builds are per request: another Evaluate compiles again.
    j.evaluate(stdio("fakec", "prog", &cases), None).await.expect("judged");
    assert_eq!(calls.of("fake-cc").len(), 2);
}

#[tokio::test]
async fn a_compile_error_skips_every_test_and_a_broken_compile_is_a_sandbox_error() {
    let (j, calls) = judge(2, compiler).await;
    let cases = [("a", "a"), ("b", "b")];
    let r = j
        .evaluate(stdio("fakec", "syntax", &cases), None)
        .await
        .expect("judged");
    assert_eq!(verdict(&r), "COMPILE_ERROR");
    assert_eq!(verdicts(&r), ["SKIPPED", "SKIPPED"]);
    assert_eq!(r.tests[0].message, "not run: compilation failed");
    let compile = r.compile.as_ref().expect("compile phase");
    assert_eq!(compile.verdict, pb::Verdict::CompileError as i32);
    assert_eq!(compile.stderr, b"syntax error");
    assert!(calls.of("./a.out").is_empty());

    // The executor failing to compile is not the program's fault: SANDBOX_ERROR, in the response.
    let r = j
        .evaluate(stdio("fakec", "ccboom", &cases), None)
        .await
        .expect("judged");
    assert_eq!(verdict(&r), "SANDBOX_ERROR");
    assert!(r.message.contains("compiler sandbox broke"), "{}", r.message);
    assert_eq!(verdicts(&r), ["SKIPPED", "SKIPPED"]);
}

#[tokio::test]
async fn the_warm_up_runs_once_and_seeds_every_test() {
    let (j, calls) = judge(2, |c| match c.program().as_str() {
        "WARMUP" => Reply::ok("").writing("cache.bin", "warm"),
        _ if c.files.contains_key("cache.bin") => Reply::ok("warm"),
        _ => Reply::ok("cold"),
    })
    .await;
    for _ in 0..2 {
        let r = j
            .evaluate(stdio("fakewarm", "p", &[("", "warm"), ("", "warm")]), None)
            .await
            .expect("judged");
        assert!(r.accepted, "a test did not start from the warm-up's work dir: {r:?}");
    }
    let warm_ups = calls.all().into_iter().filter(|c| c.program() == "WARMUP").count();
    assert_eq!(warm_ups, 1, "the warm-up ran more than once");
}

#[tokio::test]
async fn a_failed_warm_up_leaves_tests_cold_and_is_not_retried() {
    let (j, calls) = judge(1, |c| match c.program().as_str() {
        "WARMUP" => Reply::exit(1, "", "warm-up broke"),
        _ if c.files.contains_key("cache.bin") => Reply::ok("warm"),
        _ => Reply::ok("cold"),
    })
    .await;
    for _ in 0..2 {
        let r = j
            .evaluate(stdio("fakewarm", "p", &[("", "cold")]), None)
            .await
            .expect("judged");
        assert!(r.accepted, "{r:?}");
    }
    let warm_ups = calls.all().into_iter().filter(|c| c.program() == "WARMUP").count();
    assert_eq!(warm_ups, 1);
}

#[tokio::test]
async fn a_test_the_executor_failed_is_a_sandbox_error_in_the_response() {
    let (j, _) = judge(2, |c| match c.stdin_text().as_str() {
        "1" => Reply::sandbox_error("run sandbox broke"),
        "w" => Reply::ok("nope"),
        s => Reply::ok(s.to_owned()),
    })
    .await;
    let req = options(stdio("fake", "echo", &[("0", "0"), ("1", "1"), ("2", "2")]), |o| {
        o.run_all_cases = true
    });
    let r = j
        .evaluate(req, None)
        .await
        .expect("an executor failure is not the request's error");
    assert_eq!(verdicts(&r), ["OK", "SANDBOX_ERROR", "OK"]);
    assert_eq!(verdict(&r), "SANDBOX_ERROR");
    assert!(r.message.contains("run sandbox broke"), "{}", r.message);
    assert!(!r.accepted);
    assert_eq!(
        r.tests[1].run.as_ref().map(|p| p.verdict),
        Some(pb::Verdict::SandboxError as i32)
    );

    // A definite failure anywhere wins over the executor's failure.
    let req = options(stdio("fake", "echo", &[("1", "1"), ("w", "w")]), |o| {
        o.run_all_cases = true
    });
    let r = j.evaluate(req, None).await.expect("judged");
    assert_eq!(verdict(&r), "WRONG_ANSWER");
}

#[tokio::test]
async fn bad_requests_are_errors_naming_the_field_not_verdicts() {
    let (j, calls) = judge(1, |_| Reply::ok("")).await;
    let field = |r: Result<pb::EvaluateResponse, ExecError>| match r {
        Err(ExecError::InvalidArgument { field, .. }) => field,
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    };
    assert_eq!(
        field(j.evaluate(stdio("cobol", "x", &[("", "")]), None).await),
        "language"
    );
    let mut none = stdio("fake", "x", &[("", "")]);
    none.tests = None;
    assert_eq!(field(j.evaluate(none, None).await), "tests");
    assert_eq!(
        field(j.evaluate(stdio("fake", "x", &[]), None).await),
        "tests.stdio.cases"
    );
    let too_long = options(stdio("fake", "x", &[("", "")]), |o| {
        o.run_limits = Some(pb::Limits {
            wall_time_ms: 3_600_000,
            ..Default::default()
        })
    });
    assert!(field(j.evaluate(too_long, None).await).starts_with("options.run_limits"));
    assert!(calls.all().is_empty(), "a rejected request ran something");
}

#[tokio::test]
async fn the_overall_verdict_is_the_first_definite_failure() {
    let (j, _) = judge(1, |c| {
        let o = |f: fn(&mut RunOutcome)| {
            let mut r = Reply::ok(c.stdin.clone());
            if let Ok(out) = r.outcome.as_mut() {
                f(out);
            }
            r
        };
        match c.stdin_text().as_str() {
            "re" => Reply::exit(3, "", "Traceback"),
            "tle" => Reply::killed(Termination::CpuTime),
            "wall" => Reply::killed(Termination::WallTime),
            "mle" => o(|r| {
                r.oom_killed = true;
                r.signal = 9;
            }),
            "ole" => o(|r| r.stdout_truncated = true),
            _ => Reply::ok(c.stdin.clone()),
        }
    })
    .await;
    let cases = [
        ("ok", "ok"),
        ("re", "re"),
        ("tle", "tle"),
        ("wall", "wall"),
        ("mle", "mle"),
        ("ole", "ole"),
    ];
    let req = options(stdio("fake", "p", &cases), |o| o.run_all_cases = true);
    let r = j.evaluate(req, None).await.expect("judged");
    assert_eq!(
        verdicts(&r),
        [
            "OK",
            "RUNTIME_ERROR",
            "TIME_LIMIT_EXCEEDED",
            "WALL_TIME_LIMIT_EXCEEDED",
            "MEMORY_LIMIT_EXCEEDED",
            "OUTPUT_LIMIT_EXCEEDED"
        ]
    );
    assert_eq!(verdict(&r), "RUNTIME_ERROR");
    assert_eq!(r.message, "test 1: RUNTIME_ERROR");
    assert_eq!(r.tests[1].run.as_ref().map(|p| p.exit_code), Some(3));

    let r = j
        .evaluate(stdio("fake", "p", &[("ok", "ok"), ("x", "x")]), None)
        .await
        .expect("judged");
    assert!(r.accepted);
    assert_eq!(verdict(&r), "OK");
    assert!(r.tests.iter().all(|t| t.passed));
    assert_eq!(r.id, "r", "the response carries the request's id");
}

#[tokio::test]
async fn the_result_cache_answers_a_repeated_evaluate_without_running() {
    let (runner, calls) = FakeRunner::new(1, |c| match c.stdin_text().as_str() {
        "boom" => Reply::sandbox_error("broke"),
        s => Reply::ok(s.to_owned()),
    });
    let cfg = crate::result_cache::CacheConfig {
        entries: 8,
        bytes: 1 << 20,
        limit_verdicts: false,
    };
    let j = Judge::new(engine_with(runner, Some(cfg)).await);
    let req = || stdio("fake", "p", &[("a", "a"), ("b", "b")]);
    let first = j.evaluate(req(), None).await.expect("judged");
    assert!(!first.cached);
    let mut again = req();
    again.id = "second".into();
    let second = j.evaluate(again, None).await.expect("judged");
    assert!(second.cached);
    assert_eq!(second.id, "second");
    assert_eq!(calls.of("fake-run").len(), 2, "a cached request ran");

    // A response with a test the executor failed is never stored.
    let broken = || stdio("fake", "p", &[("boom", "boom")]);
    for _ in 0..2 {
        let r = j.evaluate(broken(), None).await.expect("judged");
        assert_eq!(verdict(&r), "SANDBOX_ERROR");
        assert!(!r.cached);
    }
    assert_eq!(calls.of("fake-run").len(), 4);
}

#[tokio::test(start_paused = true)]
async fn identical_evaluates_in_flight_together_run_once() {
    let (runner, calls) = FakeRunner::new(2, |c| Reply::ok(c.stdin.clone()).after(Duration::from_millis(100)));
    let cfg = crate::result_cache::CacheConfig {
        entries: 8,
        bytes: 1 << 20,
        limit_verdicts: false,
    };
    let j = Judge::new(engine_with(runner, Some(cfg)).await);
    let req = |id: usize| pb::EvaluateRequest {
        id: id.to_string(),
        ..stdio("fake", "p", &[("a", "a"), ("b", "b")])
    };
    let rs = futures::future::join_all((0..5).map(|i| j.evaluate(req(i), None))).await;
    let rs: Vec<pb::EvaluateResponse> = rs.into_iter().map(|r| r.expect("judged")).collect();
    assert_eq!(
        calls.of("fake-run").len(),
        2,
        "identical requests in flight together each ran"
    );
    assert_eq!(rs.iter().filter(|r| !r.cached).count(), 1);
    assert!(rs.iter().all(|r| r.accepted));
    let ids: Vec<&str> = rs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["0", "1", "2", "3", "4"]);
}
