//! Dataset records to `EvaluateRequest`s, by shape (`--format`, or recognised per record).
//! The same rules as the Python client's `sandpool.datasets`; docs/benchmarks.md says what each
//! shape becomes.

use anyhow::{Context, anyhow, bail};
use base64::Engine as _;
use sandpool_proto::v1 as pb;
use serde_json::Value;
use std::io::Read;

/// A dataset's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Recognise each record's shape by its fields.
    Auto,
    /// HumanEval and MBXP/mxeval rows: `prompt`, `test`, `entry_point`, any `language`.
    #[value(alias = "mbxp")]
    Humaneval,
    /// HumanEval-X (CodeGeeX): `Python/0`, `CPP/0`, ... with `declaration` (Go and Rust assembled).
    HumanevalX,
    /// MBPP: `test_list` of assert lines.
    Mbpp,
    /// MultiPL-E: `prompt`, `tests`, `stop_tokens`, `language`.
    #[value(name = "multipl-e", alias = "multiple")]
    MultiplE,
    /// LiveCodeBench: `public_test_cases` / `private_test_cases`, stdin or functional.
    Livecodebench,
    /// Stdin/stdout pairs: `inputs` + `outputs`, or `tests: [{input, output}]`.
    Stdio,
}

fn text<'a>(r: &'a Value, key: &str) -> Option<&'a str> {
    r.get(key).and_then(Value::as_str)
}

/// Strings of a JSON array field (absent: none); errors name the field.
pub fn strings(r: &Value, key: &str, at: &str) -> anyhow::Result<Vec<String>> {
    let Some(v) = r.get(key) else { return Ok(vec![]) };
    let arr = v.as_array().ok_or_else(|| anyhow!("{at}: {key}: not an array"))?;
    arr.iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("{at}: {key}[{i}]: not a string"))
        })
        .collect()
}

/// HumanEval-X's task_id prefixes and the executor languages their tests are written for.
const HUMANEVAL_X: &[(&str, &str)] = &[
    ("Python", "python"),
    ("CPP", "cpp"),
    ("Java", "java"),
    ("JavaScript", "javascript"),
    ("Go", "go_test"),
    ("Rust", "rust_test"),
];

/// The shape of `r` (a record joined with its problem).
pub fn detect(r: &Value) -> Option<Format> {
    let has = |k: &str| r.get(k).is_some();
    let task = text(r, "task_id").unwrap_or("");
    Some(if has("public_test_cases") || has("private_test_cases") {
        Format::Livecodebench
    } else if has("stop_tokens") && text(r, "tests").is_some() && has("prompt") {
        Format::MultiplE
    } else if has("test") && has("declaration") && humaneval_x_language(task).is_some() {
        Format::HumanevalX
    } else if has("test") && has("prompt") {
        Format::Humaneval
    } else if has("test_list") {
        Format::Mbpp
    } else if has("inputs") || r.get("tests").is_some_and(Value::is_array) {
        Format::Stdio
    } else {
        return None;
    })
}

fn humaneval_x_language(task_id: &str) -> Option<&'static str> {
    let prefix = task_id.split('/').next()?;
    HUMANEVAL_X.iter().find(|(p, _)| *p == prefix).map(|(_, l)| *l)
}

/// Dataset language names that mean another entry of the executor's table for their tests:
/// Go benchmarks' tests are `go test` functions.
fn test_language(lang: &str) -> String {
    match lang.to_ascii_lowercase().as_str() {
        "go" | "golang" => "go_test".into(),
        _ => lang.to_owned(),
    }
}

fn is_python(lang: &str) -> bool {
    ["python", "python3", "py"].contains(&lang.to_ascii_lowercase().as_str())
}

/// True when Python `test` defines `check` and never calls it: HumanEval's shape, where the
/// harness adds `check(entry_point)`. (HumanEval-X and MultiPL-E tests call it themselves.)
/// The judge's own rule, with the python entry's `check_function` (the CLI may not have the
/// executor's table at hand: it can talk to remote executors).
pub fn python_check_uncalled(test: &str) -> bool {
    let check = sandpool_executor::languages::CheckFunction {
        define: "def check(".into(),
        call: "check(".into(),
        comment: "#".into(),
    };
    sandpool_executor::judge::program::defines_but_never_calls(test, &check)
}

/// The completions of a record: `completion`, else each of `completions` / `code_list`
/// (several samples), else `canonical_solution`, else `code`.
pub fn completions(r: &Value, at: &str) -> anyhow::Result<Vec<String>> {
    if let Some(c) = text(r, "completion") {
        return Ok(vec![c.to_owned()]);
    }
    for key in ["completions", "code_list"] {
        if r.get(key).is_some() {
            let all = strings(r, key, at)?;
            if all.is_empty() {
                bail!("{at}: {key}: empty");
            }
            return Ok(all);
        }
    }
    for key in ["canonical_solution", "code"] {
        if let Some(c) = text(r, key) {
            return Ok(vec![c.to_owned()]);
        }
    }
    bail!("{at}: completion: missing (nor completions, code_list, canonical_solution or code)")
}

/// Builds the request for one completion of record `r` in shape `format` (not `Auto`);
/// `language` is for records without one.
pub fn request(
    r: &Value,
    format: Format,
    completion: &str,
    language: &str,
    at: &str,
) -> anyhow::Result<pb::EvaluateRequest> {
    let field = |k: &str| text(r, k).ok_or_else(|| anyhow!("{at}: {k}: missing or not a string"));
    let raw = Some(pb::EvaluateOptions {
        raw_code: true,
        ..Default::default()
    });
    let assert = |test_code: &str, entry_point: String, prompt: String, stop_tokens: Vec<String>| {
        Some(pb::evaluate_request::Tests::Assert(pb::AssertTests {
            test_code: test_code.to_owned(),
            entry_point,
            stop_tokens,
            prompt,
        }))
    };
    let mut req = pb::EvaluateRequest {
        language: text(r, "language").unwrap_or(language).to_owned(),
        priority: crate::target::priority(),
        ..Default::default()
    };
    match format {
        Format::Auto => bail!("{at}: no format"),
        Format::Humaneval => {
            req.language = test_language(&req.language);
            let test = field("test")?;
            // Only Python's table entry has a check call; other languages' tests carry their
            // own main (MBXP), so entry_point is sent only where the harness needs it.
            let entry_point = match text(r, "entry_point") {
                Some(e) if is_python(&req.language) && python_check_uncalled(test) => e.to_owned(),
                _ => String::new(),
            };
            // HumanEval completions continue the prompt and are not Markdown: run them as they are.
            req.completion = format!("{}{completion}", field("prompt")?);
            req.tests = assert(test, entry_point, String::new(), vec![]);
            req.options = raw;
        }
        Format::HumanevalX => {
            let task = text(r, "task_id").unwrap_or("");
            if let Some(l) = humaneval_x_language(task) {
                req.language = l.to_owned();
            }
            req.completion = humaneval_x_program(r, &req.language, completion, at)?;
            req.tests = assert(field("test")?, String::new(), String::new(), vec![]);
            req.options = raw;
        }
        Format::MultiplE => {
            req.language = test_language(&req.language);
            req.completion = completion.to_owned();
            req.tests = assert(
                field("tests")?,
                String::new(),
                field("prompt")?.to_owned(),
                strings(r, "stop_tokens", at)?,
            );
            req.options = raw;
        }
        Format::Mbpp => {
            req.completion = completion.to_owned();
            let mut lines = strings(r, "test_imports", at)?;
            lines.extend(text(r, "test_setup_code").map(str::to_owned));
            lines.extend(strings(r, "test_list", at)?);
            req.tests = assert(&lines.join("\n"), String::new(), String::new(), vec![]);
        }
        Format::Livecodebench => {
            req.completion = completion.to_owned();
            req.tests = Some(livecodebench_tests(r, at)?);
        }
        Format::Stdio => {
            req.completion = completion.to_owned();
            req.tests = Some(stdio_tests(r, at)?);
        }
    }
    Ok(req)
}

fn stdio_tests(r: &Value, at: &str) -> anyhow::Result<pb::evaluate_request::Tests> {
    let pairs: Vec<(String, String)> = if r.get("inputs").is_some() {
        let (i, o) = (strings(r, "inputs", at)?, strings(r, "outputs", at)?);
        if i.len() != o.len() {
            bail!("{at}: outputs: {} outputs for {} inputs", o.len(), i.len());
        }
        i.into_iter().zip(o).collect()
    } else if let Some(tests) = r.get("tests").and_then(Value::as_array) {
        tests
            .iter()
            .enumerate()
            .map(|(n, t)| match (text(t, "input"), text(t, "output")) {
                (Some(i), Some(o)) => Ok((i.to_owned(), o.to_owned())),
                _ => Err(anyhow!("{at}: tests[{n}]: needs string input and output")),
            })
            .collect::<anyhow::Result<_>>()?
    } else {
        bail!("{at}: tests: none found (inputs/outputs or tests)");
    };
    Ok(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
        cases: pairs
            .into_iter()
            .map(|(i, o)| pb::StdioCase {
                stdin: i.into_bytes(),
                expected_stdout: o.into_bytes(),
            })
            .collect(),
        comparison: None,
    }))
}

/// HumanEval-X's program without its tests (`sandpool_executor::judge::humaneval_x::program`).
fn humaneval_x_program(r: &Value, language: &str, completion: &str, at: &str) -> anyhow::Result<String> {
    sandpool_executor::judge::humaneval_x::program(r, language, completion)
        .map_err(|k| anyhow!("{at}: {k}: missing or not a string"))
}

/// LiveCodeBench's tests: public and private cases, `testtype` stdin (stdio) or functional
/// (function_call of `metadata.func_name`, one JSON argument a line).
fn livecodebench_tests(r: &Value, at: &str) -> anyhow::Result<pb::evaluate_request::Tests> {
    let mut cases = lcb_cases(r.get("public_test_cases"), &format!("{at}: public_test_cases"))?;
    cases.extend(lcb_cases(
        r.get("private_test_cases"),
        &format!("{at}: private_test_cases"),
    )?);
    if cases.is_empty() {
        bail!("{at}: public_test_cases: no test cases");
    }
    let functional = cases
        .iter()
        .filter(|c| text(c, "testtype") == Some("functional"))
        .count();
    let pair = |c: &Value, n: usize| -> anyhow::Result<(String, String)> {
        match (text(c, "input"), text(c, "output")) {
            (Some(i), Some(o)) => Ok((i.to_owned(), o.to_owned())),
            _ => bail!("{at}: test case {n}: needs string input and output"),
        }
    };
    if functional == 0 {
        let cases = cases
            .iter()
            .enumerate()
            .map(|(n, c)| {
                pair(c, n).map(|(i, o)| pb::StdioCase {
                    stdin: i.into_bytes(),
                    expected_stdout: o.into_bytes(),
                })
            })
            .collect::<anyhow::Result<_>>()?;
        return Ok(pb::evaluate_request::Tests::Stdio(pb::StdioTests {
            cases,
            comparison: None,
        }));
    }
    if functional != cases.len() {
        bail!("{at}: test cases mix stdin and functional");
    }
    let meta: Value = match r.get("metadata") {
        Some(Value::String(s)) => serde_json::from_str(s).with_context(|| format!("{at}: metadata: not JSON"))?,
        Some(v) => v.clone(),
        None => Value::Null,
    };
    let fn_name =
        text(&meta, "func_name").ok_or_else(|| anyhow!("{at}: metadata.func_name: missing for functional tests"))?;
    let cases = cases
        .iter()
        .enumerate()
        .map(|(n, c)| {
            pair(c, n).map(|(i, o)| pb::FunctionCase {
                arguments_json: i,
                expected_json: o,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(pb::evaluate_request::Tests::FunctionCall(pb::FunctionCallTests {
        fn_name: fn_name.to_owned(),
        cases,
        json_input: true,
    }))
}

/// Test cases of a LiveCodeBench field: a JSON array, a string holding one, or (private cases)
/// base64 of zlib of a pickled string holding one.
fn lcb_cases(v: Option<&Value>, at: &str) -> anyhow::Result<Vec<Value>> {
    let s = match v {
        None | Some(Value::Null) => return Ok(vec![]),
        Some(Value::Array(a)) => return Ok(a.clone()),
        Some(Value::String(s)) => s,
        Some(_) => bail!("{at}: not a list or a string"),
    };
    let json = if s.trim_start().starts_with('[') {
        s.clone()
    } else {
        unpickle_compressed(s).with_context(|| format!("{at}: neither JSON nor base64(zlib(pickle))"))?
    };
    let v: Value = serde_json::from_str(&json).with_context(|| format!("{at}: not JSON"))?;
    match v {
        Value::Array(a) => Ok(a),
        _ => bail!("{at}: not a list"),
    }
}

/// LiveCodeBench's private cases: `base64(zlib(pickle.dumps(json_string)))`. Only a pickled
/// `str` is read (no pickle opcodes beyond those `pickle.dumps(str)` writes, so nothing runs).
fn unpickle_compressed(s: &str) -> anyhow::Result<String> {
    let z = base64::engine::general_purpose::STANDARD.decode(s.trim())?;
    let mut p = Vec::new();
    flate2::read::ZlibDecoder::new(&z[..])
        .take(1 << 30)
        .read_to_end(&mut p)?;
    let mut i = 0usize;
    let take = |i: &mut usize, n: usize| -> anyhow::Result<&[u8]> {
        let b = p
            .get(*i..i.saturating_add(n))
            .ok_or_else(|| anyhow!("pickle: truncated"))?;
        *i += n;
        Ok(b)
    };
    let len = |b: &[u8]| -> usize {
        b.iter()
            .rev()
            .fold(0usize, |a, x| a.saturating_mul(256).saturating_add(*x as usize))
    };
    loop {
        let op = take(&mut i, 1)?[0];
        match op {
            0x80 => i += 1, // PROTO n
            0x95 => i += 8, // FRAME len
            0x94 => {}      // MEMOIZE
            0x8c | b'X' | 0x8d => {
                let n = match op {
                    0x8c => len(take(&mut i, 1)?),
                    b'X' => len(take(&mut i, 4)?),
                    _ => len(take(&mut i, 8)?),
                };
                let bytes = take(&mut i, n)?;
                return Ok(String::from_utf8(bytes.to_vec())?);
            }
            other => bail!("pickle: opcode {other:#x} is not a pickled str"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assert_tests(r: &pb::EvaluateRequest) -> &pb::AssertTests {
        match &r.tests {
            Some(pb::evaluate_request::Tests::Assert(t)) => t,
            t => panic!("expected assert tests, got {t:?}"),
        }
    }

    #[test]
    fn shapes_are_recognised() {
        let cases = [
            (
                json!({"task_id": "HumanEval/0", "prompt": "p", "test": "t", "entry_point": "f"}),
                Format::Humaneval,
            ),
            (
                json!({"task_id": "MBJP/1", "language": "java", "prompt": "p", "test": "t", "entry_point": "f"}),
                Format::Humaneval,
            ),
            (
                json!({"task_id": "CPP/3", "prompt": "p", "declaration": "d", "test": "t"}),
                Format::HumanevalX,
            ),
            (
                json!({"name": "HumanEval_0", "language": "lua", "prompt": "p", "tests": "t", "stop_tokens": []}),
                Format::MultiplE,
            ),
            (
                json!({"question_id": "1", "public_test_cases": "[]"}),
                Format::Livecodebench,
            ),
            (json!({"task_id": 2, "code": "c", "test_list": []}), Format::Mbpp),
            (
                json!({"code": "c", "tests": [{"input": "", "output": ""}]}),
                Format::Stdio,
            ),
        ];
        for (r, f) in cases {
            assert_eq!(detect(&r), Some(f), "{r}");
        }
        assert_eq!(detect(&json!({"code": "x"})), None);
    }

    #[test]
    fn entry_point_goes_only_where_python_needs_it() {
        let row = |lang: &str, test: &str| json!({"task_id": "T", "language": lang, "prompt": "P\n", "test": test, "entry_point": "f"});
        let he = "def check(candidate):\n    assert candidate(1) == 2\n";
        let r = request(&row("python", he), Format::Humaneval, "X", "python", "r").expect("python");
        assert_eq!(
            (assert_tests(&r).entry_point.as_str(), r.completion.as_str()),
            ("f", "P\nX")
        );
        let called = format!("{he}\ncheck(f)\n");
        let r = request(&row("python", &called), Format::Humaneval, "X", "python", "r").expect("called");
        assert_eq!(assert_tests(&r).entry_point, "", "its test calls check itself");
        let r = request(&row("java", "class Main {}"), Format::Humaneval, "X", "python", "r").expect("java");
        assert_eq!(
            (assert_tests(&r).entry_point.as_str(), r.language.as_str()),
            ("", "java")
        );
        let r = request(
            &row("go", "func TestF(t *testing.T) {}"),
            Format::Humaneval,
            "X",
            "python",
            "r",
        )
        .expect("go");
        assert_eq!(r.language, "go_test");
        assert!(python_check_uncalled("def check(c):\n    assert c()\n# check(f)\n"));
        assert!(!python_check_uncalled(
            "def check(c):\n    assert c()\nif True: check(f)\n"
        ));
        assert!(python_check_uncalled("def check(c):\n    assert c()\nx.check(f)\n"));
    }

    #[test]
    fn multipl_e_keeps_the_prompt_out_of_the_cut() {
        let r = json!({"name": "HumanEval_1", "language": "py", "prompt": "def f():\n", "tests": "def check(c):\n    assert c() == 1\ncheck(f)\n", "stop_tokens": ["\ndef", "\n#"]});
        let q = request(&r, Format::MultiplE, "    return 1\n", "python", "r").expect("multipl-e");
        let t = assert_tests(&q);
        assert_eq!(
            (q.completion.as_str(), t.prompt.as_str()),
            ("    return 1\n", "def f():\n")
        );
        assert_eq!(t.stop_tokens, ["\ndef", "\n#"]);
    }

    #[test]
    fn humaneval_x_go_and_rust_are_assembled() {
        let go = json!({"task_id": "Go/1", "prompt": "import (\n    \"math\"\n)\n\nfunc F() int {\n", "import": "import (\n    \"math\"\n)\n",
            "declaration": "d", "test_setup": "package main\n\nimport (\n    \"testing\"\n)\n", "test": "func TestF(t *testing.T) {}"});
        let r = request(
            &go,
            Format::HumanevalX,
            "    return int(math.Sqrt(strings.Count(\"a\", \"a\")))\n}\n",
            "python",
            "r",
        )
        .expect("go");
        assert_eq!(r.language, "go_test");
        assert!(
            r.completion
                .starts_with("package main\n\nimport (\n    \"math\"\n    \"strings\"\n    \"testing\""),
            "{}",
            r.completion
        );
        let rs = json!({"task_id": "Rust/1", "prompt": "/* doc */", "declaration": "use rand::Rng;\nfn f() -> i32 {\n", "test": "#[test] fn t() {}"});
        let r = request(&rs, Format::HumanevalX, "    1\n}\n", "python", "r").expect("rust");
        assert_eq!(
            (r.language.as_str(), r.completion.as_str()),
            ("rust_test", "fn f() -> i32 {\n\n    1\n}\n")
        );
    }

    #[test]
    fn livecodebench_private_cases_are_unpickled() {
        // python3 -c 'import base64,zlib,pickle,json; print(base64.b64encode(zlib.compress(pickle.dumps(json.dumps([{"input": "1\n", "output": "2\n", "testtype": "stdin"}])))).decode())'
        let private = "eJxrYJlqwwABPRbR1UqZeQWlJUpWCkqGMXlKOgpK+aUlUAEjiEBJanFJSWVBKkiouCQlM0+pNnaKHgCVCRRG";
        let r = json!({"question_id": "q", "public_test_cases": "[{\"input\": \"3\\n\", \"output\": \"4\\n\", \"testtype\": \"stdin\"}]",
            "private_test_cases": private, "metadata": "{}"});
        let q = request(&r, Format::Livecodebench, "print(int(input()) + 1)", "python", "r").expect("lcb");
        match q.tests {
            Some(pb::evaluate_request::Tests::Stdio(s)) => {
                let ins: Vec<&[u8]> = s.cases.iter().map(|c| &c.stdin[..]).collect();
                assert_eq!(ins, [&b"3\n"[..], &b"1\n"[..]]);
            }
            t => panic!("expected stdio, got {t:?}"),
        }
        let f = json!({"question_id": "q", "public_test_cases": [{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional"}],
            "metadata": "{\"func_name\": \"append\"}"});
        let q = request(&f, Format::Livecodebench, "class Solution: ...", "python", "r").expect("functional");
        match q.tests {
            Some(pb::evaluate_request::Tests::FunctionCall(t)) => {
                assert_eq!((t.fn_name.as_str(), t.json_input), ("append", true));
                assert_eq!(t.cases[0].arguments_json, "[1, 2]\n3");
            }
            t => panic!("expected function_call, got {t:?}"),
        }
        assert!(
            unpickle_compressed("eJwDAAAAAAE=").is_err(),
            "an empty pickle is no string"
        );
    }
}
