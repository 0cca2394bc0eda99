//! Multi-test stdio problems (the generated ones `--bench multitest` measures) against the
//! real executor: early stop skips the tests after the first failure, run-all returns
//! every test's own verdict, a C++ program is compiled once for all its tests and every
//! Python test forks from the slot's zygote.

mod judge_common;
#[path = "../../executor/benches/multitest/problems.rs"]
#[allow(dead_code)]
mod problems;

use judge_common::*;
use problems::{CppHeaders, Lang, Problem, Variant};
use sandpool_executor::proto as pb;

const LANGS: &[&str] = &["python", "cpp"];

/// One test of this file at a time: one of them counts the executor's compiles.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Tests per problem: 6 and 16 are the ones wrong and TLE solutions fail.
const TESTS: usize = 20;

/// Problems 0 (correct), 13 (wrong) and 15 (TLE) of the benchmark's set, in `lang`.
fn three(lang: Lang) -> Vec<Problem> {
    [0, 13, 15]
        .into_iter()
        .map(|p| problems::problem(p, TESTS, lang, CppHeaders::Individual))
        .collect()
}

fn request(p: &Problem, run_all: bool, parallelism: u32) -> pb::EvaluateRequest {
    pb::EvaluateRequest {
        id: p.id.clone(),
        language: p.lang.name().into(),
        completion: p.code.clone(),
        tests: Some(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
            cases: p
                .tests
                .iter()
                .map(|(i, o)| pb::StdioCase {
                    stdin: i.clone(),
                    expected_stdout: o.clone(),
                })
                .collect(),
            comparison: None,
        })),
        options: Some(pb::EvaluateOptions {
            raw_code: true,
            run_all_cases: run_all,
            parallelism,
            omit_test_io: true,
            run_limits: Some(pb::Limits {
                cpu_time_ms: 500,
                wall_time_ms: 5000,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn eval(r: pb::EvaluateRequest) -> pb::EvaluateResponse {
    client(LANGS).await.evaluate(r).await.expect("Evaluate").into_inner()
}

/// The verdict a failing test of `p` gets.
fn failure(p: &Problem) -> &'static str {
    match p.variant {
        Variant::Correct => "OK",
        Variant::Wrong => "WRONG_ANSWER",
        Variant::Tle => "TIME_LIMIT_EXCEEDED",
    }
}

fn verdicts(r: &pb::EvaluateResponse) -> Vec<&'static str> {
    r.tests.iter().map(|t| verdict(t.verdict)).collect()
}

async fn early_stop_and_run_all(lang: Lang) {
    let _serial = SERIAL.lock().await;
    for p in three(lang) {
        let fail = failure(&p);
        // One test at a time: exactly the tests up to the first failure run.
        let r = eval(request(&p, false, 1)).await;
        assert_eq!(verdict(r.verdict), fail, "{}: {}", p.id, r.message);
        assert_eq!(r.accepted, p.variant == Variant::Correct, "{}", p.id);
        let want: Vec<&str> = (0..TESTS)
            .map(|i| match p.first_failure() {
                Some(f) if i == f => fail,
                Some(f) if i > f => "SKIPPED",
                _ => "OK",
            })
            .collect();
        assert_eq!(verdicts(&r), want, "{}: early stop", p.id);
        assert!(
            r.tests
                .iter()
                .filter(|t| verdict(t.verdict) == "SKIPPED")
                .all(|t| t.run.is_none()),
            "{}: a skipped test ran",
            p.id
        );

        // Run-all: every test's own verdict, whatever failed before it.
        let r = eval(request(&p, true, 0)).await;
        assert_eq!(verdict(r.verdict), fail, "{}: {}", p.id, r.message);
        let want: Vec<&str> = (0..TESTS).map(|i| if p.failing(i) { fail } else { "OK" }).collect();
        assert_eq!(verdicts(&r), want, "{}: run-all", p.id);
        assert!(
            r.tests.iter().all(|t| t.run.is_some()),
            "{}: a test without its run",
            p.id
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cpp_problems_stop_at_the_first_failure_or_run_every_test() {
    early_stop_and_run_all(Lang::Cpp).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_problems_stop_at_the_first_failure_or_run_every_test() {
    early_stop_and_run_all(Lang::Python).await;
}

/// Early stop with tests in parallel: test 6 fails at once while every other test takes
/// half a second, so when it fails only the tests already beside it (at most `slots - 1`)
/// have started; every test queued behind them is skipped.
#[tokio::test(flavor = "multi_thread")]
async fn early_stop_in_parallel_skips_the_queued_tests() {
    let _serial = SERIAL.lock().await;
    let slots = client(LANGS)
        .await
        .get_capabilities(pb::GetCapabilitiesRequest::default())
        .await
        .expect("capabilities")
        .into_inner()
        .slots as usize;
    let code = "import time\nn = int(input())\nif n == 6:\n    print(-1)\nelse:\n    time.sleep(0.5)\n    print(n)";
    let cases: Vec<(Vec<u8>, Vec<u8>)> = (0..TESTS)
        .map(|n| (format!("{n}\n").into_bytes(), format!("{n}\n").into_bytes()))
        .collect();
    let p = Problem {
        id: "parallel".into(),
        kind: "echo",
        lang: Lang::Python,
        variant: Variant::Wrong,
        code: code.into(),
        tests: cases,
    };
    let r = eval(request(&p, false, 0)).await;
    assert_eq!(verdict(r.verdict), "WRONG_ANSWER", "{}", r.message);
    let v = verdicts(&r);
    assert!(v[..6].iter().all(|v| *v == "OK"), "{v:?}");
    assert_eq!(v[6], "WRONG_ANSWER", "{v:?}");
    let ran_after = v[7..].iter().filter(|v| **v != "SKIPPED").count();
    assert!(
        ran_after < slots,
        "{ran_after} tests ran after the failure with {slots} slots: {v:?}"
    );
    assert!(v[7..].iter().all(|v| matches!(*v, "OK" | "SKIPPED")), "{v:?}");
}

/// A compiled program is compiled once per request, however many tests it has; each test
/// runs a copy of that build. Python tests each fork from the slot's zygote (namespaces mode).
#[tokio::test(flavor = "multi_thread")]
async fn each_test_runs_the_one_build_or_a_warm_fork() {
    let _serial = SERIAL.lock().await;
    let p = problems::problem(0, 40, Lang::Cpp, CppHeaders::Individual);
    let before = compiles(LANGS);
    let r = eval(request(&p, true, 0)).await;
    let after = compiles(LANGS);
    assert!(r.accepted, "{}", r.message);
    assert_eq!(r.tests.len(), 40);
    let compile = r.compile.as_ref().expect("the compile phase");
    assert_eq!(verdict(compile.verdict), "OK");
    assert_eq!(after - before, 1, "compiles for one request of 40 tests");

    let p = problems::problem(0, 40, Lang::Python, CppHeaders::Individual);
    let r = eval(request(&p, true, 0)).await;
    assert!(r.accepted, "{}", r.message);
    let isolation = r.executor.as_ref().map(|e| e.isolation.as_str()).unwrap_or_default();
    if isolation == "namespaces" {
        let cold: Vec<u32> = r
            .tests
            .iter()
            .filter(|t| !t.run.as_ref().is_some_and(|r| r.warm))
            .map(|t| t.index)
            .collect();
        assert!(cold.is_empty(), "tests {cold:?} did not fork from the zygote");
    }
}

/// The zygote a test forks from is chosen as for `Execute`: a request file that names numpy
/// (a helper module the program imports) gets the one that imported it.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_file_naming_numpy_picks_the_numpy_zygote() {
    let _serial = SERIAL.lock().await;
    let r = eval(pb::EvaluateRequest {
        id: "helper".into(),
        language: "python".into(),
        completion: "import helper\nhelper.show()".into(),
        tests: Some(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
            cases: vec![pb::StdioCase {
                stdin: vec![],
                expected_stdout: b"True\n".to_vec(),
            }],
            comparison: None,
        })),
        options: Some(pb::EvaluateOptions {
            raw_code: true,
            files: vec![pb::File {
                path: "helper.py".into(),
                content: b"import sys\ndef show():\n    print('numpy' in sys.modules)\n# import numpy later\n".to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;
    let warm = r.tests[0].run.as_ref().is_some_and(|r| r.warm);
    if warm {
        assert!(r.accepted, "forked from the zygote without numpy: {r:?}");
    }
}
