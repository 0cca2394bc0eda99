//! Evaluate's features, each against the real executor: comparisons, special
//! judge, function calls, run_all_cases, total_timeout, extraction, errors.

mod judge_common;

use judge_common::*;
use sandpool_executor::proto as pb;
use std::time::Instant;

const LANGS: &[&str] = &["python", "cpp", "javascript"];

fn stdio(language: &str, completion: &str, cases: &[(&str, &str)]) -> pb::EvaluateRequest {
    pb::EvaluateRequest {
        id: "t".into(),
        language: language.into(),
        completion: completion.into(),
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
            run_all_cases: true,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn opts(r: &mut pb::EvaluateRequest) -> &mut pb::EvaluateOptions {
    r.options.get_or_insert_with(Default::default)
}

async fn eval(r: pb::EvaluateRequest) -> pb::EvaluateResponse {
    client(LANGS).await.evaluate(r).await.expect("Evaluate").into_inner()
}

fn verdicts(r: &pb::EvaluateResponse) -> Vec<&'static str> {
    r.tests.iter().map(|t| verdict(t.verdict)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn float_tolerance_accepts_close_answers_that_exact_comparison_rejects() {
    let code = "x = int(input())\nprint(1 / x)";
    let cases = [("3", "0.333333333"), ("7", "0.142857142857")];
    let strict = eval(stdio("python", code, &cases)).await;
    assert!(!strict.accepted);
    assert_eq!(verdict(strict.verdict), "WRONG_ANSWER");

    let mut r = stdio("python", code, &cases);
    if let Some(pb::evaluate_request::Tests::Stdio(t)) = r.tests.as_mut() {
        t.comparison = Some(pb::Comparison {
            mode: pb::comparison::Mode::Float as i32,
            abs_tol: 1e-6,
            rel_tol: 1e-6,
        });
    }
    let tolerant = eval(r.clone()).await;
    assert!(tolerant.accepted, "{tolerant:?}");

    // Outside the tolerance is still wrong.
    let far = eval(pb::EvaluateRequest {
        completion: "x = int(input())\nprint(round(1 / x, 3))".into(),
        ..r
    })
    .await;
    assert!(!far.accepted);
    assert_eq!(verdicts(&far), ["WRONG_ANSWER", "WRONG_ANSWER"]);
}

const CHECKER: &str = r#"import sys
c = int(open("stdin.txt").read().split()[0])
try:
    a, b = map(int, open("answer.txt").read().split())
except Exception:
    sys.exit(1)
sys.exit(0 if a + b == c and a > 0 and b > 0 else 1)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn special_judge_accepts_any_valid_answer_and_rejects_wrong_ones() {
    let sj = |code: &str| pb::EvaluateRequest {
        special_judge: Some(pb::SpecialJudge {
            language: "python".into(),
            code: CHECKER.into(),
        }),
        ..stdio("python", code, &[("3", "1 2"), ("7", "3 4"), ("100", "50 50")])
    };
    // Different from the expected outputs, but valid.
    let ok = eval(sj("c = int(input())\nprint(c - 1, 1)")).await;
    assert!(ok.accepted, "{ok:?}");
    let bad = eval(sj("c = int(input())\nprint(c, 1)")).await;
    assert!(!bad.accepted);
    assert_eq!(verdicts(&bad), ["WRONG_ANSWER"; 3]);
    // A checker in a compiled language works the same way.
    let cpp_checker = r#"#include <fstream>
int main() { std::ifstream i("stdin.txt"), a("answer.txt"); long c, x, y;
  if (!(i >> c) || !(a >> x >> y)) return 1; return (x + y == c && x > 0 && y > 0) ? 0 : 1; }"#;
    let mut r = sj("c = int(input())\nprint(1, c - 1)");
    r.special_judge = Some(pb::SpecialJudge {
        language: "cpp".into(),
        code: cpp_checker.into(),
    });
    let ok = eval(r.clone()).await;
    assert!(ok.accepted, "{ok:?}");
    r.completion = "print(0, 0)".into();
    assert!(!eval(r).await.accepted);
}

#[tokio::test(flavor = "multi_thread")]
async fn function_call_with_json_input_and_a_solution_class() {
    let fc = |code: &str, cases: &[(&str, &str)], json_input: bool| pb::EvaluateRequest {
        id: "fc".into(),
        language: "python".into(),
        completion: format!("```python\n{code}\n```"),
        tests: Some(pb::evaluate_request::Tests::FunctionCall(pb::FunctionCallTests {
            fn_name: "twoSum".into(),
            cases: cases
                .iter()
                .map(|(a, e)| pb::FunctionCase {
                    arguments_json: a.to_string(),
                    expected_json: e.to_string(),
                })
                .collect(),
            json_input,
        })),
        options: Some(pb::EvaluateOptions {
            run_all_cases: true,
            ..Default::default()
        }),
        ..Default::default()
    };
    let solution = "from typing import List\nclass Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        seen = {}\n        for i, n in enumerate(nums):\n            if target - n in seen:\n                return [seen[target - n], i]\n            seen[n] = i\n";
    // LiveCodeBench call-based: one JSON value per line.
    let cases = [("[2, 7, 11, 15]\n9", "[0, 1]"), ("[3, 2, 4]\n6", "[1, 2]")];
    let r = eval(fc(solution, &cases, true)).await;
    assert!(r.accepted, "{r:?}");
    assert!(
        r.tests
            .iter()
            .all(|t| t.run.as_ref().is_some_and(|run| run.stdout.is_empty()))
    );
    let wrong = eval(fc(
        &solution.replace("return [seen[target - n], i]", "return [i, seen[target - n]]"),
        &cases,
        true,
    ))
    .await;
    assert_eq!(verdicts(&wrong), ["WRONG_ANSWER", "WRONG_ANSWER"]);
    // Without json_input the arguments are one JSON array.
    let plain = eval(fc(
        "def twoSum(a, t):\n    return [0, 1] if a[0] + a[1] == t else None",
        &[("[[2, 7], 9]", "[0, 1]"), ("[[1, 1], 3]", "[0, 1]")],
        false,
    ))
    .await;
    assert_eq!(verdicts(&plain), ["OK", "WRONG_ANSWER"]);
    assert_eq!(verdict(plain.verdict), "WRONG_ANSWER");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_all_cases_false_stops_at_the_first_failure() {
    let code = "n = int(input())\nprint(n * 2 if n != 1 else 0)";
    let cases = [("1", "2"), ("2", "4"), ("3", "6"), ("4", "8")];
    let mut r = stdio("python", code, &cases);
    opts(&mut r).parallelism = 1;
    opts(&mut r).run_all_cases = false;
    let stop = eval(r.clone()).await;
    assert_eq!(verdicts(&stop), ["WRONG_ANSWER", "SKIPPED", "SKIPPED", "SKIPPED"]);
    assert_eq!(verdict(stop.verdict), "WRONG_ANSWER");
    assert!(stop.tests[1].run.is_none());

    opts(&mut r).run_all_cases = true;
    let all = eval(r).await;
    assert_eq!(verdicts(&all), ["WRONG_ANSWER", "OK", "OK", "OK"]);
    assert!(!all.accepted);
}

#[tokio::test(flavor = "multi_thread")]
async fn total_timeout_starts_no_new_test_but_lets_running_ones_finish() {
    let code = "import time\ntime.sleep(0.7)\nprint(input())";
    let cases: Vec<(&str, &str)> = (0..6).map(|_| ("x", "x")).collect();
    let mut r = stdio("python", code, &cases);
    opts(&mut r).parallelism = 1;
    opts(&mut r).total_timeout_ms = 1000;
    let t = Instant::now();
    let resp = eval(r).await;
    let v = verdicts(&resp);
    let ran = v.iter().filter(|v| **v == "OK").count();
    assert!((1..=3).contains(&ran), "{v:?}");
    assert!(v[ran..].iter().all(|v| *v == "SKIPPED"), "{v:?}");
    assert!(resp.tests[ran].message.contains("total_timeout"));
    assert!(!resp.accepted);
    assert_eq!(verdict(resp.verdict), "SKIPPED");
    assert!(t.elapsed().as_secs_f64() < 4.0, "{:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn markdown_extraction_variants() {
    let cases = [("2", "4")];
    let variants = [
        // Prose, a block in another language, then the Python block.
        "Sure!\n```bash\necho run me with python3 and nothing else\n```\nThe code:\n```python\nprint(int(input()) * 2)\n```\nDone.",
        // Only an untagged block.
        "Here:\n```\nprint(int(input()) * 2)\n```",
        // Truncated: the fence never closes.
        "```py\nprint(int(input()) * 2)\n",
        // No fence: the raw completion.
        "print(int(input()) * 2)\n",
        // Several Python blocks: the longest.
        "```python\nx = 1\n```\n```python\nn = int(input())\nprint(n * 2)\n```",
    ];
    for c in variants {
        let r = eval(stdio("python", c, &cases)).await;
        assert!(r.accepted, "{c:?}: {r:?}");
        assert!(!r.extracted_code.contains("```"), "{:?}", r.extracted_code);
    }
    // raw_code disables extraction: the fences are then a syntax error.
    let mut r = stdio("python", variants[1], &cases);
    opts(&mut r).raw_code = true;
    let raw = eval(r).await;
    assert_eq!(verdict(raw.verdict), "RUNTIME_ERROR");
    assert_eq!(raw.extracted_code, variants[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn compile_once_and_compile_errors() {
    let code =
        "```cpp\n#include <iostream>\nint main() { long n; std::cin >> n; std::cout << n * n << std::endl; }\n```";
    let r = eval(stdio("cpp", code, &[("3", "9"), ("4", "16"), ("5", "26")])).await;
    assert_eq!(verdicts(&r), ["OK", "OK", "WRONG_ANSWER"]);
    assert_eq!(verdict(r.compile.as_ref().expect("compile phase").verdict), "OK");
    let ce = eval(stdio("cpp", "int main() { return x; }", &[("", "")])).await;
    assert_eq!(verdict(ce.verdict), "COMPILE_ERROR");
    assert_eq!(verdicts(&ce), ["SKIPPED"]);
    assert!(!ce.compile.expect("compile").stderr.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn omit_test_io_leaves_inputs_out() {
    let mut r = stdio("python", "print(input())", &[("abc", "abc")]);
    let with = eval(r.clone()).await;
    assert_eq!(with.tests[0].input, b"abc");
    assert_eq!(with.tests[0].expected, b"abc");
    opts(&mut r).omit_test_io = true;
    let without = eval(r).await;
    assert!(without.accepted);
    assert!(without.tests[0].input.is_empty() && without.tests[0].expected.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_are_invalid_argument_naming_the_field() {
    let mut c = client(LANGS).await;
    let cases: Vec<(pb::EvaluateRequest, &str)> = vec![
        (stdio("cobol", "x", &[("", "")]), "language"),
        (
            pb::EvaluateRequest {
                tests: None,
                ..stdio("python", "x", &[])
            },
            "tests",
        ),
        (stdio("python", "x", &[]), "tests.stdio.cases"),
        (
            pb::EvaluateRequest {
                special_judge: Some(pb::SpecialJudge {
                    language: "python".into(),
                    code: "this is not python".into(),
                }),
                ..stdio("python", "x", &[("", "")])
            },
            "special_judge",
        ),
        (
            pb::EvaluateRequest {
                special_judge: Some(pb::SpecialJudge {
                    language: "cpp".into(),
                    code: "int main( {".into(),
                }),
                ..stdio("python", "x", &[("", "")])
            },
            "special_judge.code",
        ),
        (
            pb::EvaluateRequest {
                tests: Some(pb::evaluate_request::Tests::FunctionCall(pb::FunctionCallTests {
                    fn_name: "f()".into(),
                    cases: vec![],
                    json_input: false,
                })),
                ..stdio("python", "x", &[])
            },
            "tests.function_call.fn_name",
        ),
    ];
    for (req, field) in cases {
        if field == "special_judge" {
            // A Python checker that is not valid Python only fails when run: WRONG_ANSWER, not accepted.
            let r = c.evaluate(req).await.expect("evaluates").into_inner();
            assert!(!r.accepted);
            continue;
        }
        let e = c.evaluate(req).await.expect_err(field);
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{field}: {e:?}");
        assert!(e.message().starts_with(field), "{field}: {}", e.message());
    }
}
