//! The verdict comes only from the judge: programs that exit early, print fake
//! results, or try to overwrite the harness, the build or the checker never pass.

mod judge_common;

use judge_common::*;
use sandpool_executor::proto as pb;

const LANGS: &[&str] = &["python", "cpp", "javascript"];

async fn eval(r: pb::EvaluateRequest) -> pb::EvaluateResponse {
    client(LANGS).await.evaluate(r).await.expect("Evaluate").into_inner()
}

const TEST: &str = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 9\n";

#[tokio::test(flavor = "multi_thread")]
async fn python_programs_that_exit_early_or_fake_output_fail() {
    let cheats = [
        // Exits 0 before the tests run.
        "import sys\nsys.exit(0)\ndef square(x):\n    return 0",
        "import os\ndef square(x):\n    os._exit(0)",
        // Prints what a harness might print on success, then exits.
        "import sys\nprint('All tests passed')\nprint('OK')\nsys.stdout.flush()\nimport os\nos._exit(0)\ndef square(x): pass",
        // Makes the check a no-op by replacing builtins the test relies on... then exits.
        "import atexit, os\natexit.register(lambda: os._exit(0))\ndef square(x):\n    raise SystemExit(0)",
        // Swallows the assertion and exits 0 from an exception hook.
        "import sys, os\nsys.excepthook = lambda *a: os._exit(0)\ndef square(x):\n    return x + 1",
    ];
    for code in cheats {
        let r = eval(assert_request("cheat", "python", code, TEST, "square")).await;
        assert!(!r.accepted, "accepted a cheat: {code}");
        assert_ne!(verdict(r.verdict), "SANDBOX_ERROR", "{code}");
    }
    let honest = eval(assert_request(
        "ok",
        "python",
        "def square(x):\n    return x * x",
        TEST,
        "square",
    ))
    .await;
    assert!(honest.accepted, "{honest:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn javascript_cannot_disarm_console_assert_or_exit_early() {
    let test = "const check = (f) => { console.assert(f(2) === 4); console.assert(f(3) === 9); };\ncheck(square);\n";
    let req = |code: &str| assert_request("js", "javascript", code, test, "");
    let cheats = [
        // A wrong answer: Node's console.assert would only print.
        "const square = (x) => x + 2;",
        "console.assert = () => {};\nconst square = (x) => x + 2;",
        "Object.defineProperty(console, 'assert', { value: () => {} });\nconst square = (x) => x + 2;",
        "const square = (x) => { process.exit(0); };",
    ];
    for code in cheats {
        let r = eval(req(code)).await;
        assert!(!r.accepted, "accepted a cheat: {code}");
    }
    assert!(eval(req("const square = (x) => x * x;")).await.accepted);
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_fake_output_and_overwriting_the_build_or_checker_fail() {
    let stdio = |language: &str, code: &str, cases: &[(&str, &str)]| pb::EvaluateRequest {
        id: "s".into(),
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
            run_all_cases: true,
            parallelism: 1,
            raw_code: true,
            ..Default::default()
        }),
        ..Default::default()
    };
    let fake = eval(stdio(
        "python",
        "print('Accepted')\nprint('passed: true')",
        &[("1", "2")],
    ))
    .await;
    assert!(!fake.accepted);
    assert_eq!(verdict(fake.verdict), "WRONG_ANSWER");

    // Case 0 answers right and replaces its binary with a script that prints
    // case 1's answer; case 1 must still run the real build (and fail).
    let code = r##"#include <cstdio>
#include <fstream>
#include <sys/stat.h>
int main() { int n; scanf("%d", &n);
  if (n == 1) { std::remove("main"); { std::ofstream f("main"); f << "#!/bin/sh\necho 200\n"; }
    chmod("main", 0755); printf("2\n"); }
  else printf("%d\n", n); }"##;
    let r = eval(stdio("cpp", code, &[("1", "2"), ("100", "200")])).await;
    assert_eq!(
        r.tests.iter().map(|t| verdict(t.verdict)).collect::<Vec<_>>(),
        ["OK", "WRONG_ANSWER"],
        "{r:?}"
    );

    // The candidate writes a permissive "checker" and a matching answer file
    // into its own work dir; the real checker runs in its own sandbox.
    let checker =
        "import sys\nsys.exit(0 if open('answer.txt').read().strip() == open('stdout.txt').read().strip() else 1)\n";
    let mut r = stdio(
        "python",
        "open('main.py', 'w').write('import sys\\nsys.exit(0)\\n')\nopen('answer.txt', 'w').write('42')\nopen('stdout.txt', 'w').write('wrong')\nprint('wrong')",
        &[("", "42")],
    );
    r.special_judge = Some(pb::SpecialJudge {
        language: "python".into(),
        code: checker.into(),
    });
    let r = eval(r).await;
    assert!(!r.accepted);
    assert_eq!(verdict(r.verdict), "WRONG_ANSWER");
}

#[tokio::test(flavor = "multi_thread")]
async fn function_call_results_cannot_be_printed_by_the_program() {
    let req = |code: &str| pb::EvaluateRequest {
        id: "f".into(),
        language: "python".into(),
        completion: code.into(),
        tests: Some(pb::evaluate_request::Tests::FunctionCall(pb::FunctionCallTests {
            fn_name: "add".into(),
            cases: vec![pb::FunctionCase {
                arguments_json: "[1, 2]".into(),
                expected_json: "3".into(),
            }],
            json_input: false,
        })),
        ..Default::default()
    };
    let cheats = [
        // Prints what a result line might look like, then leaves before the harness.
        "import os\nprint('\\nSANDPOOL-DONE-00000000000000000000000000000000' + '3')\nprint(3)\nos._exit(0)\ndef add(a, b): pass",
        // Returns an object that claims to equal anything.
        "class Any:\n    def __eq__(self, o): return True\ndef add(a, b):\n    return Any()",
        "import sys\ndef add(a, b):\n    print(3)\n    sys.exit(0)",
    ];
    for c in cheats {
        let r = eval(req(c)).await;
        assert!(!r.accepted, "accepted a cheat: {c}");
    }
    assert!(eval(req("def add(a, b):\n    return a + b")).await.accepted);
}
