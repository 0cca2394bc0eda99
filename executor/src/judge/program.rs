//! From an `EvaluateRequest` to what runs: the program's source and, per test,
//! its stdin and how its outcome is judged.

use super::compare::Comparison;
use super::extract;
use crate::error::ExecError;
use crate::languages::{CheckFunction, Language};
use sandpool_proto::v1 as pb;

/// How one test's run is judged once it ended with exit 0.
#[derive(Debug, Clone)]
pub enum Expect {
    /// stdout compared with this (or handed to the special judge).
    Stdout(Vec<u8>),
    /// The harness's JSON result line (after the nonce) must match this.
    Json(serde_json::Value),
    /// The last non-empty stdout line must be the nonce the epilogue prints.
    Sentinel,
    /// Exit status 0 is the only signal (languages without an epilogue).
    ExitZero,
}

/// One test.
#[derive(Debug, Clone)]
pub struct Case {
    pub stdin: Vec<u8>,
    /// Shown in the response as the test's input.
    pub input: Vec<u8>,
    /// Shown in the response as the test's expected output.
    pub expected: Vec<u8>,
    pub expect: Expect,
}

/// Everything the judge runs for one request.
#[derive(Debug, Clone)]
pub struct Program {
    /// The code taken from the completion (after extraction and stop tokens).
    pub extracted: String,
    /// The source file's content.
    pub full: String,
    pub cases: Vec<Case>,
    pub comparison: Comparison,
    /// The random marker only the judge and the harness know.
    pub nonce: String,
}

/// A fresh random nonce (128 bits, hex).
pub fn nonce() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // Never expected; the clock and the address space still differ per call.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        b = (t ^ (&b as *const _ as u128)).to_le_bytes();
    }
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("SANDPOOL-DONE-{hex}")
}

/// Fence tags that mean `lang`, lower-cased.
pub fn fence_tags(lang: &Language) -> Vec<String> {
    std::iter::once(&lang.name)
        .chain(&lang.aliases)
        .chain(&lang.judge.fences)
        .map(|t| t.to_lowercase())
        .collect()
}

fn is_identifier(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_') && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// Whether `req`'s assert tests get the prelude: its `options.prelude`, else `default`.
fn wants_prelude(req: &pb::EvaluateRequest, default: bool) -> Result<bool, ExecError> {
    use pb::evaluate_options::Prelude;
    let v = req.options.as_ref().map_or(0, |o| o.prelude);
    match Prelude::try_from(v) {
        Ok(Prelude::Unspecified) => Ok(default),
        Ok(Prelude::On) => Ok(true),
        Ok(Prelude::Off) => Ok(false),
        Err(_) => Err(ExecError::invalid("options.prelude", format!("unknown value {v}"))),
    }
}

/// True when some line of `test_code` defines the check function (starts with `check.define`)
/// and no part of it calls it (`check.call` not preceded by a name character or `.`, outside
/// the name in the definitions themselves).
pub fn defines_but_never_calls(test_code: &str, check: &CheckFunction) -> bool {
    let (define, call) = (check.define.as_str(), check.call.as_str());
    if define.is_empty() || call.is_empty() {
        return false;
    }
    let mut defined = false;
    let calls = |text: &str| {
        text.match_indices(call).any(|(i, _)| {
            !text[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '$')
        })
    };
    for line in test_code.lines() {
        let t = line.trim_start();
        let t = match check.comment.as_str() {
            "" => t,
            c => t.split(c).next().unwrap_or(""),
        };
        if let Some(rest) = t.strip_prefix(define) {
            defined = true;
            if calls(rest) {
                return false;
            }
        } else if calls(t) {
            return false;
        }
    }
    defined
}

/// Builds the program for `req` in `lang`; `prelude_default`: whether assert tests get the
/// language's prelude when the request does not say.
pub fn build(req: &pb::EvaluateRequest, lang: &Language, prelude_default: bool) -> Result<Program, ExecError> {
    let raw = req.options.as_ref().is_some_and(|o| o.raw_code);
    let mut code = if raw {
        req.completion.clone()
    } else {
        extract::extract(&req.completion, &fence_tags(lang)).to_owned()
    };
    let nonce = nonce();
    let mut comparison = Comparison::IgnoreTrailingWhitespace;
    let (full, cases) = match &req.tests {
        None => {
            return Err(ExecError::invalid(
                "tests",
                "one of stdio, function_call or assert is required",
            ));
        }
        Some(pb::evaluate_request::Tests::Stdio(t)) => {
            if t.cases.is_empty() {
                return Err(ExecError::invalid("tests.stdio.cases", "at least one case is required"));
            }
            if let Some(c) = &t.comparison {
                let mode = pb::comparison::Mode::try_from(c.mode)
                    .map_err(|_| ExecError::invalid("tests.stdio.comparison.mode", "unknown mode"))?;
                if !(c.abs_tol >= 0.0 && c.rel_tol >= 0.0) {
                    return Err(ExecError::invalid(
                        "tests.stdio.comparison",
                        "abs_tol and rel_tol must be non-negative numbers",
                    ));
                }
                comparison = Comparison::new(mode, c.abs_tol, c.rel_tol);
            }
            let cases = t
                .cases
                .iter()
                .map(|c| Case {
                    stdin: c.stdin.clone(),
                    input: c.stdin.clone(),
                    expected: c.expected_stdout.clone(),
                    expect: Expect::Stdout(c.expected_stdout.clone()),
                })
                .collect();
            (code.clone(), cases)
        }
        Some(pb::evaluate_request::Tests::FunctionCall(t)) => {
            let Some(harness) = &lang.judge.function_call_harness else {
                return Err(ExecError::invalid(
                    "tests.function_call",
                    format!("not supported for language {}", lang.name),
                ));
            };
            if !is_identifier(&t.fn_name) {
                return Err(ExecError::invalid(
                    "tests.function_call.fn_name",
                    "must be an identifier",
                ));
            }
            if t.cases.is_empty() {
                return Err(ExecError::invalid(
                    "tests.function_call.cases",
                    "at least one case is required",
                ));
            }
            let mut cases = Vec::with_capacity(t.cases.len());
            for (i, c) in t.cases.iter().enumerate() {
                let field = |f: &str| format!("tests.function_call.cases[{i}].{f}");
                let bad = |f: &str, e: serde_json::Error| ExecError::invalid(field(f), format!("invalid JSON: {e}"));
                if t.json_input {
                    for line in c.arguments_json.lines().filter(|l| !l.trim().is_empty()) {
                        serde_json::from_str::<serde_json::Value>(line).map_err(|e| bad("arguments_json", e))?;
                    }
                } else {
                    let v: serde_json::Value =
                        serde_json::from_str(&c.arguments_json).map_err(|e| bad("arguments_json", e))?;
                    if !v.is_array() {
                        return Err(ExecError::invalid(
                            field("arguments_json"),
                            "must be a JSON array of arguments",
                        ));
                    }
                }
                let expected: serde_json::Value =
                    serde_json::from_str(&c.expected_json).map_err(|e| bad("expected_json", e))?;
                cases.push(Case {
                    stdin: format!("{nonce}\n{}", c.arguments_json).into_bytes(),
                    input: c.arguments_json.clone().into_bytes(),
                    expected: c.expected_json.clone().into_bytes(),
                    expect: Expect::Json(expected),
                });
            }
            let h = harness
                .replace("{fn_name}", &t.fn_name)
                .replace("{json_input}", if t.json_input { "True" } else { "False" });
            (format!("{code}\n{h}"), cases)
        }
        Some(pb::evaluate_request::Tests::Assert(t)) => {
            if t.test_code.trim().is_empty() {
                return Err(ExecError::invalid("tests.assert.test_code", "must not be empty"));
            }
            if let Some((cut, token)) = t
                .stop_tokens
                .iter()
                .filter(|s| !s.is_empty())
                .filter_map(|s| code.find(s.as_str()).map(|i| (i, s)))
                .min()
            {
                // Without a prompt the completion is the whole program: cutting it to nothing
                // would leave the tests alone, which is never what a benchmark meant.
                if t.prompt.is_empty() && code[..cut].trim().is_empty() && !code.trim().is_empty() {
                    return Err(ExecError::invalid(
                        "tests.assert.stop_tokens",
                        format!(
                            "{token:?} cuts the whole completion away (at offset {cut}); put the prompt in \
                             tests.assert.prompt, which stop tokens do not cut"
                        ),
                    ));
                }
                code.truncate(cut);
            }
            let j = &lang.judge;
            if t.entry_point.is_empty()
                && let Some(check) = &j.check_function
                && defines_but_never_calls(&t.test_code, check)
            {
                return Err(ExecError::invalid(
                    "tests.assert.entry_point",
                    format!(
                        "test_code defines the check function ({:?}...) but never calls it, so any code \
                         would pass: give entry_point (HumanEval) or call it in test_code",
                        check.define
                    ),
                ));
            }
            let program = format!("{}{code}", t.prompt);
            let prelude = if !wants_prelude(req, prelude_default)? {
                String::new()
            } else if j.prelude_imports_on_use {
                prelude_on_use(&j.assert_prelude, &j.prelude_triggers, &[&program, &t.test_code])
            } else {
                j.assert_prelude.trim_start().to_owned()
            };
            let mut full = format!("{}{prelude}{program}\n{}", j.assert_setup.trim_start(), t.test_code);
            if !full.ends_with('\n') {
                full.push('\n');
            }
            if !t.entry_point.is_empty() {
                if !is_identifier(&t.entry_point) {
                    return Err(ExecError::invalid("tests.assert.entry_point", "must be an identifier"));
                }
                let Some(call) = &j.assert_call else {
                    return Err(ExecError::invalid(
                        "tests.assert.entry_point",
                        format!(
                            "language {} has no HumanEval-style check call; put the calls in test_code",
                            lang.name
                        ),
                    ));
                };
                full.push_str(&call.replace("{entry_point}", &t.entry_point));
            }
            let expect = match &j.assert_epilogue {
                Some(e) => {
                    full.push_str(&e.replace("{nonce}", &nonce));
                    Expect::Sentinel
                }
                None => Expect::ExitZero,
            };
            let case = Case {
                stdin: vec![],
                input: vec![],
                expected: vec![],
                expect,
            };
            (full, vec![case])
        }
    };
    Ok(Program {
        extracted: code,
        full,
        cases,
        comparison,
        nonce,
    })
}

/// `prelude` without the `import X` / `import X as Y` lines whose name `Y` no part of `texts`
/// mentions, nor the lines of `triggers` none of whose names `texts` mention.
pub fn prelude_on_use(
    prelude: &str,
    triggers: &std::collections::BTreeMap<String, Vec<String>>,
    texts: &[&str],
) -> String {
    let mentions = |name: &str| {
        texts.iter().any(|t| {
            t.match_indices(name).any(|(i, _)| {
                let before = t[..i].chars().next_back();
                let after = t[i + name.len()..].chars().next();
                let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                !word(before) && !word(after)
            })
        })
    };
    prelude
        .trim_start()
        .lines()
        .filter(|l| {
            if let Some(names) = triggers.get(l.trim()) {
                return names.iter().any(|n| mentions(n));
            }
            let Some(rest) = l.trim().strip_prefix("import ") else {
                return true;
            };
            let name = rest.rsplit(" as ").next().unwrap_or(rest).trim();
            name.contains(',') || mentions(name)
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// What the function-call harness printed after the nonce, on the last line carrying it.
pub fn harness_result<'a>(stdout: &'a [u8], nonce: &str) -> Option<&'a [u8]> {
    stdout
        .split(|c| *c == b'\n')
        .rev()
        .find_map(|l| l.strip_prefix(nonce.as_bytes()))
}

/// `stdout` without the harness's marker line (the last line starting with the
/// nonce, and the newline the harness wrote before it), so clients see only the program's output.
pub fn strip_marker(stdout: &mut Vec<u8>, nonce: &str) {
    let n = nonce.as_bytes();
    let Some(start) = stdout.windows(n.len()).rposition(|w| w == n) else {
        return;
    };
    if start > 0 && stdout[start - 1] != b'\n' {
        return;
    }
    let end = stdout[start..]
        .iter()
        .position(|c| *c == b'\n')
        .map_or(stdout.len(), |i| start + i + 1);
    let from = if start > 0 { start - 1 } else { start };
    stdout.drain(from..end);
    if from > 0 && stdout.get(from - 1) != Some(&b'\n') && from < stdout.len() {
        stdout.insert(from, b'\n');
    }
}

/// True when the last non-empty stdout line is exactly the nonce.
pub fn sentinel_seen(stdout: &[u8], nonce: &str) -> bool {
    stdout
        .split(|c| *c == b'\n')
        .map(|l| l.trim_ascii())
        .rfind(|l| !l.is_empty())
        .is_some_and(|l| l == nonce.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::languages::{BUILTIN, LanguageTable};

    fn req(tests: pb::evaluate_request::Tests, completion: &str) -> pb::EvaluateRequest {
        pb::EvaluateRequest {
            language: "python".into(),
            completion: completion.into(),
            tests: Some(tests),
            ..Default::default()
        }
    }

    #[test]
    fn humaneval_program_has_prelude_check_and_sentinel() {
        let t = LanguageTable::parse(BUILTIN).unwrap();
        let py = t.get("python").unwrap();
        let r = req(
            pb::evaluate_request::Tests::Assert(pb::AssertTests {
                test_code: "def check(candidate):\n    assert candidate(1) == 2\n".into(),
                entry_point: "f".into(),
                stop_tokens: vec![],
                ..Default::default()
            }),
            "```python\ndef f(x):\n    return x + 1\n```",
        );
        let p = build(&r, py, true).unwrap();
        assert_eq!(p.extracted, "def f(x):\n    return x + 1");
        assert!(p.full.starts_with("def f(x):"), "{}", p.full);
        assert!(p.full.contains("def f(x):\n    return x + 1\ndef check(candidate)"));
        assert!(p.full.contains("check(f)"));
        assert!(p.full.trim_end().ends_with(&format!("print(\"\\n{}\")", p.nonce)));
        assert!(matches!(p.cases[0].expect, Expect::Sentinel));
    }

    #[test]
    fn prelude_keeps_only_the_imports_the_program_names() {
        let p = "import math\nimport re\nimport numpy as np\nfrom typing import *\nx = 1\n";
        let t: std::collections::BTreeMap<String, Vec<String>> = [(
            "from typing import *".to_string(),
            vec!["List".to_string(), "Dict".to_string()],
        )]
        .into();
        let kept = prelude_on_use(p, &t, &["x = math.sqrt(2)", "np.array([])  # rex"]);
        assert_eq!(kept, "import math\nimport numpy as np\nx = 1\n");
        let kept = prelude_on_use(p, &t, &["def f(a: List[int]):", "mathematics = 1"]);
        assert_eq!(kept, "from typing import *\nx = 1\n");
    }

    #[test]
    fn stop_tokens_cut_the_completion() {
        let t = LanguageTable::parse(BUILTIN).unwrap();
        let r = pb::EvaluateRequest {
            language: "cpp".into(),
            completion: "```cpp\nint f() {\n    return 1;\n}\nint main() {}\n```".into(),
            tests: Some(pb::evaluate_request::Tests::Assert(pb::AssertTests {
                test_code: "}\nint main() { return f() - 1; }\n".into(),
                entry_point: String::new(),
                stop_tokens: vec!["\nint main".into(), "\n}".into()],
                ..Default::default()
            })),
            ..Default::default()
        };
        let p = build(&r, t.get("cpp").unwrap(), true).unwrap();
        assert_eq!(p.extracted, "int f() {\n    return 1;");
        assert!(p.full.ends_with("return 1;\n}\nint main() { return f() - 1; }\n"));
    }

    fn assert_req(lang: &str, code: &str, t: pb::AssertTests) -> pb::EvaluateRequest {
        pb::EvaluateRequest {
            language: lang.into(),
            completion: code.into(),
            tests: Some(pb::evaluate_request::Tests::Assert(t)),
            options: Some(pb::EvaluateOptions {
                raw_code: true,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_check_defined_but_never_called_is_refused() {
        let t = LanguageTable::parse(BUILTIN).unwrap();
        let py = t.get("python").unwrap();
        let check = "def check(candidate):\n    assert candidate(1) == 2\n";
        let tests = |test_code: &str, entry_point: &str| pb::AssertTests {
            test_code: test_code.into(),
            entry_point: entry_point.into(),
            ..Default::default()
        };
        let e = build(&assert_req("python", "def f(x): pass", tests(check, "")), py, true).unwrap_err();
        assert!(e.to_string().starts_with("tests.assert.entry_point:"), "{e}");
        assert!(e.to_string().contains("never calls it"), "{e}");
        // A comment or a method of the same name is no call.
        let commented = format!("{check}# check(f)\nself.check(f)\n");
        assert!(build(&assert_req("python", "x", tests(&commented, "")), py, true).is_err());
        for ok in [
            tests(check, "f"),
            tests(&format!("{check}\ncheck(f)\n"), ""),
            tests("assert f(1) == 2", ""),
        ] {
            build(&assert_req("python", "def f(x): return x + 1", ok.clone()), py, true)
                .unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        let js = t.get("javascript").unwrap();
        let mpe = "function test() {\n  assert.deepEqual(f(1), 2);\n}\n";
        assert!(build(&assert_req("javascript", "x", tests(mpe, "")), js, true).is_err());
        build(
            &assert_req("javascript", "x", tests(&format!("{mpe}\ntest();\n"), "")),
            js,
            true,
        )
        .unwrap();
    }

    #[test]
    fn stop_tokens_never_cut_the_prompt_and_never_everything() {
        let t = LanguageTable::parse(BUILTIN).unwrap();
        let py = t.get("python").unwrap();
        let tests = |prompt: &str| pb::AssertTests {
            test_code: "assert f() == 1\n".into(),
            stop_tokens: vec!["\ndef".into(), "\nprint".into()],
            prompt: prompt.into(),
            ..Default::default()
        };
        let prompt = "import os\n\ndef f():\n";
        let p = build(
            &assert_req("python", "    return 1\nprint(2)\n", tests(prompt)),
            py,
            false,
        )
        .unwrap();
        assert_eq!(p.extracted, "    return 1");
        assert!(
            p.full
                .starts_with("import os\n\ndef f():\n    return 1\nassert f() == 1\n"),
            "{}",
            p.full
        );
        let e = build(
            &assert_req("python", "\ndef f():\n    return 1\n", tests("")),
            py,
            false,
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("tests.assert.stop_tokens:"), "{e}");
        // An empty completion under a prompt is the model's (failing) answer, not a bad request.
        build(
            &assert_req("python", "\ndef g(): pass", tests("def f():\n    return 1\n")),
            py,
            false,
        )
        .unwrap();
    }

    #[test]
    fn javascript_asserts_throw_even_without_the_prelude() {
        let t = LanguageTable::parse(BUILTIN).unwrap();
        let mut r = assert_req(
            "javascript",
            "const f = () => 1;",
            pb::AssertTests {
                test_code: "console.assert(f() === 2);\n".into(),
                ..Default::default()
            },
        );
        r.options.as_mut().unwrap().prelude = pb::evaluate_options::Prelude::Off as i32;
        let p = build(&r, t.get("javascript").unwrap(), false).unwrap();
        assert!(
            p.full.starts_with("Object.defineProperty(console, \"assert\""),
            "{}",
            p.full
        );
    }

    #[test]
    fn the_prelude_follows_the_request_then_the_default() {
        use pb::evaluate_options::Prelude;
        let t = LanguageTable::parse(BUILTIN).unwrap();
        let py = t.get("python").unwrap();
        let mut r = assert_req(
            "python",
            "def f(): return math.pi",
            pb::AssertTests {
                test_code: "assert f() > 3\n".into(),
                ..Default::default()
            },
        );
        let with = |r: &mut pb::EvaluateRequest, p: Prelude| r.options.as_mut().unwrap().prelude = p as i32;
        assert!(build(&r, py, true).unwrap().full.starts_with("import math\n"));
        assert!(build(&r, py, false).unwrap().full.starts_with("def f()"));
        with(&mut r, Prelude::Off);
        assert!(build(&r, py, true).unwrap().full.starts_with("def f()"));
        with(&mut r, Prelude::On);
        assert!(build(&r, py, false).unwrap().full.starts_with("import math\n"));
        r.options.as_mut().unwrap().prelude = 7;
        let e = build(&r, py, true).unwrap_err();
        assert!(e.to_string().starts_with("options.prelude:"), "{e}");
    }

    #[test]
    fn bad_function_calls_name_the_field() {
        let t = LanguageTable::parse(BUILTIN).unwrap();
        let py = t.get("python").unwrap();
        let fc = |fn_name: &str, args: &str| {
            req(
                pb::evaluate_request::Tests::FunctionCall(pb::FunctionCallTests {
                    fn_name: fn_name.into(),
                    cases: vec![pb::FunctionCase {
                        arguments_json: args.into(),
                        expected_json: "3".into(),
                    }],
                    json_input: false,
                }),
                "def add(a, b): return a + b",
            )
        };
        let e = build(&fc("add; import os", "[1, 2]"), py, true).unwrap_err();
        assert!(e.to_string().contains("fn_name"), "{e}");
        let e = build(&fc("add", "[1, "), py, true).unwrap_err();
        assert!(e.to_string().contains("cases[0].arguments_json"), "{e}");
        let e = build(&fc("add", "1"), py, true).unwrap_err();
        assert!(e.to_string().contains("JSON array"), "{e}");
        let p = build(&fc("add", "[1, 2]"), py, true).unwrap();
        assert!(p.cases[0].stdin.starts_with(p.nonce.as_bytes()));
        assert!(p.full.contains("\"add\""));
        let e = build(&pb::EvaluateRequest::default(), py, true).unwrap_err();
        assert!(e.to_string().starts_with("tests:"), "{e}");
    }

    #[test]
    fn markers_are_found_only_where_expected() {
        let n = "N0NCE";
        assert!(sentinel_seen(b"hello\nN0NCE\n\n", n));
        assert!(!sentinel_seen(b"N0NCE\nlater output\n", n));
        assert!(!sentinel_seen(b"", n));
        assert_eq!(harness_result(b"x\nN0NCE[1]\nN0NCE3\n", n), Some(&b"3"[..]));
        assert_eq!(harness_result(b"3\n", n), None);
        let mut out = b"hi\n\nN0NCE[1]\n".to_vec();
        strip_marker(&mut out, n);
        assert_eq!(out, b"hi\n");
        let mut out = b"\nN0NCE\n".to_vec();
        strip_marker(&mut out, n);
        assert_eq!(out, b"");
        let mut out = b"xN0NCE\n".to_vec();
        strip_marker(&mut out, n);
        assert_eq!(out, b"xN0NCE\n");
    }
}
