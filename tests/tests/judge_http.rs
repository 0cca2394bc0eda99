//! The SandboxFusion/ScaleBox-compatible HTTP API, with the examples of
//! ScaleBox's documentation (request bodies as documented).

mod judge_common;

use judge_common::*;
use serde_json::{Value, json};

const LANGS: &[&str] = &["python", "cpp"];

fn post(path: &str, body: Value) -> Value {
    let (status, reply) = post_json(LANGS, path, &body);
    assert_eq!(status, 200, "{reply}");
    reply
}

fn check_shape(r: &Value) {
    for k in [
        "id",
        "accepted",
        "extracted_code",
        "full_code",
        "test_code",
        "tests",
        "extracted_type",
        "extra",
    ] {
        assert!(r.get(k).is_some(), "missing {k} in {r}");
    }
    for t in r["tests"].as_array().expect("tests") {
        let e = &t["exec_info"];
        for k in [
            "status",
            "message",
            "compile_result",
            "run_result",
            "executor_pod_name",
            "files",
        ] {
            assert!(e.get(k).is_some(), "missing exec_info.{k} in {t}");
        }
        if let Some(run) = e["run_result"].as_object() {
            for k in ["status", "execution_time", "return_code", "stdout", "stderr"] {
                assert!(run.contains_key(k), "missing run_result.{k}");
            }
            assert!(run["execution_time"].as_f64().expect("seconds") < 30.0);
        }
    }
}

#[test]
fn ping() {
    let (status, body) = request(LANGS, "GET", "/v1/ping", None);
    assert_eq!(status, 200);
    assert_eq!(body, json!("pong"));
}

#[test]
fn stdio_example() {
    let r = post(
        "/common_evaluate_batch",
        json!({
            "completion": "```python\na, b = map(int, input().split())\nprint(a + b)\n```",
            "config": {
                "language": "python",
                "run_timeout": 10,
                "provided_data": {"test_cases": {"type": "stdin_stdout", "input": ["1 2", "3 4"], "output": ["3", "7"], "fn_name": null}},
                "extra": {"run_all_cases": true}
            }
        }),
    );
    check_shape(&r);
    assert_eq!(r["accepted"], json!(true));
    assert_eq!(
        r["extracted_code"],
        json!("a, b = map(int, input().split())\nprint(a + b)")
    );
    assert_eq!(r["full_code"], Value::Null);
    let t = &r["tests"];
    assert_eq!(t[0]["exec_info"]["status"], json!("Success"));
    assert_eq!(t[0]["exec_info"]["run_result"]["status"], json!("Finished"));
    assert_eq!(t[0]["exec_info"]["run_result"]["stdout"], json!("3\n"));
    assert_eq!(t[1]["exec_info"]["run_result"]["stdout"], json!("7\n"));
    assert_eq!(
        t[1]["test_info"],
        json!({"input": {"stdin": "3 4"}, "output": {"stdout": "7"}})
    );

    // A wrong program: the run succeeded, the test did not pass.
    let r = post(
        "/common_evaluate_batch",
        json!({
            "completion": "```python\nprint(0)\n```",
            "config": {"language": "python",
                "provided_data": {"test_cases": {"type": "stdin_stdout", "input": ["1 2", "3 4"], "output": ["3", "7"]}},
                "extra": {"run_all_cases": true}}
        }),
    );
    assert_eq!(r["accepted"], json!(false));
    assert_eq!(r["tests"][0]["passed"], json!(false));
    assert_eq!(r["tests"][0]["exec_info"]["status"], json!("Success"));
}

#[test]
fn function_call_example() {
    let r = post(
        "/common_evaluate_batch",
        json!({
            "completion": "```python\ndef add(a, b):\n    return a + b\n```",
            "config": {
                "language": "python",
                "provided_data": {"test_cases": {"type": "function_call", "input": [[1, 2], [3, 4]], "output": [[3], [7]], "fn_name": "add", "json_input": false}},
                "extra": {"run_all_cases": true, "total_timeout": 1}
            }
        }),
    );
    check_shape(&r);
    assert_eq!(r["accepted"], json!(true), "{r}");
    assert_eq!(r["extracted_code"], json!("def add(a, b):\n    return a + b"));
    assert_eq!(
        r["tests"][1]["test_info"],
        json!({"type": "function_call", "fn_name": "add", "input": [3, 4], "output": [7]})
    );
    assert_eq!(r["tests"][0]["exec_info"]["run_result"]["stdout"], json!(""));
}

#[test]
fn special_judge_example() {
    let checker = "import sys\n\ndef read_file(filepath):\n    \"\"\"Read file content and return lines.\"\"\"\n    with open(filepath, 'r') as f:\n        return f.read().strip().split('\\n')\n\n\ndef validate_solution(stdin_path, stdout_path, answer_path):\n    \"\"\"Validate the participant's solution.\"\"\"\n    \n    stdin_lines = read_file(stdin_path)\n    stdout_lines = read_file(stdout_path)\n    participant_output = read_file(answer_path)\n\n    a, b = map(int, participant_output[0].split())\n    c = a + b\n    expected_output = int(stdin_lines[0])\n    return c == expected_output\n\n    \nstdin_path = \"stdin.txt\"\nstdout_path = \"stdout.txt\"\nanswer_path = \"answer.txt\"\n\nis_valid = validate_solution(stdin_path, stdout_path, answer_path)\n\nif is_valid:\n    sys.exit(0)\nelse:\n    sys.exit(1)";
    let body = |completion: &str| {
        json!({
            "completion": completion,
            "config": {
                "language": "python",
                "run_timeout": 10,
                "provided_data": {"test_cases": {"type": "stdin_stdout", "output": ["1 2", "3 4"], "input": ["3", "7"], "fn_name": null}},
                "extra": {"run_all_cases": true, "special_judge_program": checker, "special_judge_language": "python"}
            }
        })
    };
    let r = post(
        "/common_evaluate_batch",
        body("```python\nc = int(input())\nprint(c-1, 1)\n```"),
    );
    check_shape(&r);
    assert_eq!(r["accepted"], json!(true), "{r}");
    assert_eq!(r["tests"][0]["exec_info"]["run_result"]["stdout"], json!("2 1\n"));
    assert_eq!(r["tests"][1]["exec_info"]["run_result"]["stdout"], json!("6 1\n"));
    let r = post(
        "/common_evaluate_batch",
        body("```python\nc = int(input())\nprint(c, 1)\n```"),
    );
    assert_eq!(r["accepted"], json!(false));
}

#[test]
fn multipl_e_cpp_assert_example() {
    let completion = "```cpp\n#include <bits/stdc++.h>\nusing namespace std;\n\n// Write a cpp function to identify non-prime numbers.\nbool is_not_prime(long n) {\n    // Handle corner cases\n    if (n <= 1) return true;\n    if (n <= 3) return false;\n\n    // This is checked so that we can skip \n    // middle five numbers in below loop\n    if (n % 2 == 0 || n % 3 == 0) return true;\n\n    for (long i = 5; i * i <= n; i += 6)\n        if (n % i == 0 || n % (i + 2) == 0)\n            return true;\n\n    return false;\n}";
    let body = |completion: &str| {
        json!({
            "completion": completion,
            "config": {
                "language": "cpp",
                "provided_data": {"test_cases": {
                    "type": "assert",
                    "tests": "}\nint main() {\n    auto candidate = is_not_prime;\n    assert(candidate((2)) == (false));\n    assert(candidate((10)) == (true));\n    assert(candidate((35)) == (true));\n    assert(candidate((37)) == (false));\n}\n",
                    "stop_tokens": ["\n}"]}},
                "extra": {"run_all_cases": true, "total_timeout": 1}
            }
        })
    };
    let r = post("/common_evaluate_batch", body(completion));
    check_shape(&r);
    assert_eq!(r["accepted"], json!(true), "{r}");
    assert!(r["extracted_code"].as_str().expect("code").ends_with("return false;"));
    assert_eq!(
        r["tests"][0]["exec_info"]["compile_result"]["status"],
        json!("Finished")
    );
    assert_eq!(r["tests"][0]["test_info"], Value::Null);
    let wrong = post(
        "/common_evaluate_batch",
        body(&completion.replace("return false;\n}", "return true;\n}")),
    );
    assert_eq!(wrong["accepted"], json!(false));
    assert_eq!(wrong["tests"][0]["exec_info"]["status"], json!("Failed"));
}

#[test]
fn humaneval_assert_example() {
    let completion = "```python\ndef is_prime(n):\n    \"\"\"Return true if a given number is prime, and false otherwise.\n    \"\"\"\n    if n <= 1:\n        return False\n    if n == 2:\n        return True\n    if n % 2 == 0:\n        return False\n    for i in range(3, int(n**0.5) + 1, 2):\n        if n % i == 0:\n            return False\n    return True\n```";
    let body = |c: &str| {
        json!({
            "completion": c,
            "config": {
                "language": "python",
                "provided_data": {"test_cases": {
                    "type": "assert",
                    "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate(6) == False\n    assert candidate(101) == True\n    assert candidate(11) == True\n    assert candidate(13441) == True\n    assert candidate(61) == True\n    assert candidate(4) == False\n    assert candidate(1) == False\n    assert candidate(5) == True\n    assert candidate(11) == True\n    assert candidate(17) == True\n    assert candidate(5 * 17) == False\n    assert candidate(11 * 7) == False\n    assert candidate(13441 * 19) == False\n\n",
                    "entry_point": "is_prime"}}
            }
        })
    };
    let r = post("/common_evaluate_batch", body(completion));
    check_shape(&r);
    assert_eq!(r["accepted"], json!(true), "{r}");
    let full = r["full_code"].as_str().expect("full_code");
    // The prelude keeps only what the program names: is_prime names none of it.
    assert!(full.starts_with("def is_prime(n):"), "{full}");
    assert!(full.contains("check(is_prime)"));
    let r = post(
        "/common_evaluate_batch",
        body(&completion.replace("return True\n```", "return n == 7\n```")),
    );
    assert_eq!(r["accepted"], json!(false));
}

#[test]
fn total_timeout_marks_unstarted_tests_as_scalebox_does() {
    let r = post(
        "/common_evaluate_batch",
        json!({
            "completion": "import time\ntime.sleep(0.6)\nprint(input())",
            "config": {"language": "python",
                "provided_data": {"test_cases": {"type": "stdin_stdout", "input": ["a", "b", "c", "d", "e", "f"], "output": ["a", "b", "c", "d", "e", "f"]}},
                "extra": {"run_all_cases": true, "total_timeout": 0.5}}
        }),
    );
    assert_eq!(r["accepted"], json!(false));
    let tests = r["tests"].as_array().expect("tests");
    assert_eq!(tests.len(), 6);
    let timed_out: Vec<_> = tests
        .iter()
        .filter(|t| t["exec_info"]["message"] == json!("Total Timeout"))
        .collect();
    assert!(!timed_out.is_empty(), "{r}");
    assert!(
        timed_out
            .iter()
            .all(|t| t["exec_info"]["status"] == json!("SandboxError") && t["test_info"].is_null())
    );
}

#[test]
fn run_code_like_sandboxfusion() {
    let r = post(
        "/run_code",
        json!({"code": "import sys\nprint(open('data.txt').read() + sys.stdin.read())\nopen('out.txt', 'w').write('hi')", "language": "python",
               "stdin": "there", "files": {"data.txt": "aGVsbG8g"}, "fetch_files": ["out.txt"], "run_timeout": 5}),
    );
    assert_eq!(r["status"], json!("Success"), "{r}");
    assert_eq!(r["run_result"]["status"], json!("Finished"));
    assert_eq!(r["run_result"]["stdout"], json!("hello there\n"));
    assert_eq!(r["run_result"]["return_code"], json!(0));
    assert_eq!(r["files"]["out.txt"], json!("aGk="));
    let r = post(
        "/run_code",
        json!({"code": "import sys\nsys.exit(3)", "language": "python"}),
    );
    assert_eq!(r["status"], json!("Failed"));
    assert_eq!(r["run_result"]["return_code"], json!(3));
    let r = post(
        "/run_code",
        json!({"code": "while True: pass", "language": "python", "run_timeout": 0.5}),
    );
    assert_eq!(r["run_result"]["status"], json!("TimeLimitExceeded"), "{r}");
    let r = post(
        "/run_code",
        json!({"code": "int main() { return x; }", "language": "cpp"}),
    );
    assert_eq!(r["status"], json!("Failed"));
    assert_ne!(r["compile_result"]["return_code"], json!(0));
    assert_eq!(r["run_result"], Value::Null);
    let (status, body) = post_json(LANGS, "/run_code", &json!({"code": "x", "language": "cobol"}));
    assert_eq!(status, 400);
    assert!(
        body["detail"].as_str().expect("detail").starts_with("language"),
        "{body}"
    );
    // A body that is not the request's shape gets the same 400 with a detail naming the field.
    for (path, bad, field) in [
        ("/run_code", json!({"language": "python"}), "`code`"),
        ("/common_evaluate_batch", json!({}), "missing field"),
    ] {
        let (status, body) = post_json(LANGS, path, &bad);
        assert_eq!(status, 400, "{path}: {body}");
        let detail = body["detail"].as_str().expect("detail");
        assert!(detail.contains(field), "{path}: {detail}");
    }
}

/// Both response shapes say what ran the code (isolation, toolchain), beside SandboxFusion's fields.
#[test]
fn responses_say_what_ran_them() {
    let r = post("/run_code", json!({"code": "print(1)", "language": "python"}));
    assert_eq!(r["status"], json!("Success"), "{r}");
    assert_eq!(r["executor_isolation"], json!("namespaces"), "{r}");
    let toolchain = r["executor_toolchain"].as_str().expect("executor_toolchain");
    assert!(toolchain.starts_with("Python 3"), "{r}");
    let r = post(
        "/common_evaluate_batch",
        json!({
            "completion": "```cpp\n#include <iostream>\nint main() { int a, b; std::cin >> a >> b; std::cout << a + b; }\n```",
            "config": {
                "language": "cpp",
                "provided_data": {"test_cases": {"type": "stdin_stdout", "input": ["1 2"], "output": ["3"], "fn_name": null}},
            }
        }),
    );
    assert_eq!(r["accepted"], json!(true), "{r}");
    let e = &r["tests"][0]["exec_info"];
    assert_eq!(e["executor_isolation"], json!("namespaces"), "{e}");
    let toolchain = e["executor_toolchain"].as_str().expect("executor_toolchain");
    assert!(toolchain.contains("g++") || toolchain.contains("GCC"), "{e}");
}
