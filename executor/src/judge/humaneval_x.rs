//! HumanEval-X rows as programs: what `sandpool eval` sends and what the
//! judge_humaneval_x suite checks, assembled once.

use serde_json::Value;

/// Standard packages HumanEval-X Go solutions use, some without importing them (CodeGeeX's
/// harness adds them the same way).
const GO_PACKAGES: &[&str] = &[
    "math",
    "strings",
    "sort",
    "strconv",
    "fmt",
    "bytes",
    "regexp",
    "unicode",
    "math/rand",
    "time",
    "crypto/md5",
    "container/heap",
    "reflect",
    "errors",
    "math/big",
];

/// Crates HumanEval-X Rust declarations `use` that the sandbox does not have.
const RUST_CRATE_USES: &[&str] = &["use rand::Rng;", "use regex::Regex;", "use md5;"];

/// HumanEval-X's program without its tests (the judge appends `test` after a newline):
/// the prompt and the completion; for Go the file's `test_setup` (package and imports) with the
/// prompt's import block dropped and the packages the code names added; for Rust the
/// declaration without the `use` of crates.
pub fn program(r: &Value, language: &str, completion: &str) -> Result<String, &'static str> {
    let text = |k: &'static str| r.get(k).and_then(Value::as_str);
    let field = |k: &'static str| text(k).ok_or(k);
    match language {
        "go_test" => {
            let prompt = field("prompt")?.replacen(text("import").unwrap_or(""), "", 1);
            let setup = field("test_setup")?;
            let have: Vec<&str> = setup.lines().map(str::trim).filter(|l| l.starts_with('"')).collect();
            // Comments left out: "a list of strings." is no use of package strings.
            let code: String = format!("{prompt}{completion}")
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            let extra: Vec<String> = GO_PACKAGES
                .iter()
                .map(|pkg| format!("\"{pkg}\""))
                .filter(|q| !have.contains(&q.as_str()))
                .filter(|q| {
                    let name = q.trim_matches('"').rsplit('/').next().unwrap_or("");
                    code.match_indices(&format!("{name}.")).any(|(i, _)| {
                        !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.' || c == '/')
                    })
                })
                .collect();
            let setup = if extra.is_empty() {
                setup.to_owned()
            } else {
                setup.replacen("import (", &format!("import (\n    {}", extra.join("\n    ")), 1)
            };
            Ok(format!("{setup}\n{prompt}{completion}"))
        }
        "rust_test" => {
            let decl: String = field("declaration")?
                .lines()
                .filter(|l| !RUST_CRATE_USES.contains(&l.trim()))
                .map(|l| format!("{l}\n"))
                .collect();
            Ok(format!("{decl}\n{completion}"))
        }
        _ => Ok(format!("{}{completion}", field("prompt")?)),
    }
}
