//! Piston v2's judge API, so that Piston's clients (npm `piston-client`, PyPI `piston-rspy`
//! and `aiopyston`, open-r1's Codeforces rewards) work by changing only the URL:
//!
//! - `GET /api/v2/runtimes`: the languages this executor runs, with Piston's names.
//! - `POST /api/v2/execute`: compile and run one program ([`execute`]).
//!
//! Both also answer with a trailing slash (aiopyston adds one). Errors are Piston's
//! `{"message": ...}`; a key may come as a raw `Authorization: <key>` header, as Piston's
//! clients send it, or as `Bearer <key>` (see [`raw_key_as_bearer`]).
//!
//! What differs from Piston (docs/compatibility.md): `output` is stdout then stderr, not
//! interleaved in arrival order; versions are the toolchains' own, one per language.

use crate::call::Call;
use crate::engine::Engine;
use crate::error::ExecError;
use crate::languages::Availability;
use base64::Engine as _;
use sandpool_proto::v1 as pb;
use serde::{Deserialize, Serialize};

/// Piston's name for a language of ours where it differs, and extra aliases Piston's
/// clients use; our own names and aliases are accepted too.
const PISTON_NAMES: &[(&str, &str, &[&str])] = &[
    ("cpp", "c++", &["cpp", "g++"]),
    ("c", "c", &["gcc"]),
    ("python", "python", &["py", "py3", "python3"]),
    ("javascript", "javascript", &["node-javascript", "node-js", "js"]),
    ("r", "rscript", &["r"]),
    ("sql", "sqlite3", &["sqlite", "sql"]),
    ("csharp", "csharp", &["mono", "c#", "cs"]),
    ("d", "d", &["dmd"]),
];

/// Languages of the table that exist for the judge's harnesses, not as programs.
const NOT_RUNTIMES: &[&str] = &["pytest", "junit", "jest", "go_test", "rust_test"];

/// One runtime of `GET /api/v2/runtimes`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Runtime {
    pub language: String,
    pub version: String,
    pub aliases: Vec<String>,
    /// Our name for it, for [`execute`]: not part of the answer.
    #[serde(skip)]
    pub table_name: String,
}

/// The runtimes this executor offers: every available language but the judge's harnesses.
pub fn runtimes(engine: &Engine) -> Vec<Runtime> {
    let mut out = Vec::new();
    for lang in engine.languages().iter() {
        if NOT_RUNTIMES.contains(&lang.name.as_str()) {
            continue;
        }
        let Some(Availability::Available { version }) = engine.availability().get(&lang.name) else {
            continue;
        };
        let (language, extra) = PISTON_NAMES
            .iter()
            .find(|(ours, ..)| *ours == lang.name)
            .map_or((lang.name.as_str(), &[][..]), |(_, piston, extra)| (*piston, *extra));
        let mut aliases: Vec<String> = Vec::new();
        for a in std::iter::once(lang.name.as_str())
            .chain(lang.aliases.iter().map(String::as_str))
            .chain(extra.iter().copied())
        {
            let a = a.to_lowercase();
            if a != language && !aliases.contains(&a) {
                aliases.push(a);
            }
        }
        out.push(Runtime {
            language: language.to_owned(),
            version: semver_of(version),
            aliases,
            table_name: lang.name.clone(),
        });
    }
    out.sort_by(|a, b| a.language.cmp(&b.language));
    out
}

/// The first `N.N[.N]` in a toolchain's version line ("g++ (Debian 12.2.0-14) 12.2.0" is
/// 12.2.0; "Python 3.11.2" is 3.11.2), padded to three parts as Piston's versions are.
pub fn semver_of(line: &str) -> String {
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() && (i == 0 || !(b[i - 1].is_ascii_digit() || b[i - 1] == b'.')) {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            let parts: Vec<&str> = line[start..i].split('.').filter(|p| !p.is_empty()).take(3).collect();
            if parts.len() >= 2 {
                let mut v = parts.join(".");
                for _ in parts.len()..3 {
                    v.push_str(".0");
                }
                return v;
            }
        }
        i += 1;
    }
    "0.0.0".to_owned()
}

/// Whether `version` (as asked: `*`, empty, `3`, `3.x`, `3.11`, `3.11.2`) matches `have`.
pub fn version_matches(asked: &str, have: &str) -> bool {
    let asked = asked.trim();
    let asked = asked
        .strip_suffix(".x")
        .or_else(|| asked.strip_suffix(".*"))
        .unwrap_or(asked);
    asked.is_empty() || asked == "*" || asked == "x" || have == asked || have.starts_with(&format!("{asked}."))
}

/// One file of a request; the first is the program.
#[derive(Debug, Deserialize)]
pub struct PistonFile {
    #[serde(default)]
    pub name: Option<String>,
    pub content: String,
    /// `utf8` (the default), `base64` or `hex`.
    #[serde(default)]
    pub encoding: Option<String>,
}

/// `POST /api/v2/execute`'s body (unknown fields are ignored, as Piston does).
#[derive(Debug, Deserialize)]
pub struct ExecuteBody {
    pub language: String,
    #[serde(default)]
    pub version: Option<String>,
    pub files: Vec<PistonFile>,
    #[serde(default)]
    pub stdin: Option<String>,
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// Milliseconds of wall time; -1 or absent: the executor's default.
    #[serde(default)]
    pub compile_timeout: Option<i64>,
    #[serde(default)]
    pub run_timeout: Option<i64>,
    /// Milliseconds of CPU time (newer Piston); -1 or absent: as the timeout allows.
    #[serde(default)]
    pub compile_cpu_time: Option<i64>,
    #[serde(default)]
    pub run_cpu_time: Option<i64>,
    /// Bytes; -1 or absent: the executor's default.
    #[serde(default)]
    pub compile_memory_limit: Option<i64>,
    #[serde(default)]
    pub run_memory_limit: Option<i64>,
}

/// One stage (`compile` or `run`) of the answer.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Stage {
    pub stdout: String,
    pub stderr: String,
    /// stdout then stderr (Piston interleaves them as they arrive).
    pub output: String,
    /// The exit code; null when a signal ended the process (or it did not run).
    pub code: Option<i32>,
    /// The signal's name (`SIGKILL` for a time, memory or output limit), else null.
    pub signal: Option<String>,
    /// Why it ended, when not by itself: Piston's status codes (`TO` time, `OL` output,
    /// `SG` signal, `RE` runtime error), null for a clean exit.
    pub status: Option<&'static str>,
    pub message: Option<String>,
    /// Milliseconds.
    pub wall_time: u64,
    pub cpu_time: u64,
    /// Peak bytes.
    pub memory: u64,
}

/// The answer of `POST /api/v2/execute`.
#[derive(Debug, Clone, Serialize)]
pub struct ExecuteAnswer {
    pub language: String,
    pub version: String,
    pub run: Stage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compile: Option<Stage>,
}

/// A request error as Piston words it: the field at fault in a sentence.
fn bad(field: &str, message: impl std::fmt::Display) -> ExecError {
    ExecError::invalid(field, message.to_string())
}

/// A Piston limit (-1 or absent: the default, 0 for the engine) as a positive number.
fn limit(value: Option<i64>, field: &str) -> Result<u64, ExecError> {
    match value {
        None | Some(-1) => Ok(0),
        Some(v) if v > 0 => Ok(v as u64),
        Some(v) => Err(bad(field, format!("{v} is not a positive number or -1 (the default)"))),
    }
}

/// Decodes a file's content by its encoding.
fn decode(f: &PistonFile, i: usize) -> Result<Vec<u8>, ExecError> {
    match f.encoding.as_deref().unwrap_or("utf8") {
        "utf8" | "utf-8" | "" => Ok(f.content.clone().into_bytes()),
        "base64" => base64::engine::general_purpose::STANDARD
            .decode(f.content.trim())
            .map_err(|e| bad(&format!("files[{i}].content"), format!("not base64: {e}"))),
        "hex" => {
            let s = f.content.trim();
            let hex = |c: u8| (c as char).to_digit(16);
            if !s.len().is_multiple_of(2) {
                return Err(bad(&format!("files[{i}].content"), "not hex: odd length"));
            }
            s.as_bytes()
                .chunks(2)
                .map(|p| match (hex(p[0]), hex(p[1])) {
                    (Some(h), Some(l)) => Ok((h * 16 + l) as u8),
                    _ => Err(bad(&format!("files[{i}].content"), "not hex")),
                })
                .collect()
        }
        other => Err(bad(
            &format!("files[{i}].encoding"),
            format!("{other:?} is not an encoding (utf8, base64 or hex)"),
        )),
    }
}

/// Runs `body` through the engine, as Piston would.
pub async fn execute(engine: &Engine, body: ExecuteBody, call: Call) -> Result<ExecuteAnswer, ExecError> {
    let asked = body.language.to_lowercase();
    let version = body.version.as_deref().unwrap_or("*");
    let runtime = runtimes(engine)
        .into_iter()
        .find(|r| (r.language == asked || r.aliases.contains(&asked)) && version_matches(version, &r.version))
        .ok_or_else(|| bad("language", format!("{}-{version} runtime is unknown", body.language)))?;
    let Some((main, rest)) = body.files.split_first() else {
        return Err(bad("files", "at least one file is required (the first is the program)"));
    };
    let code =
        String::from_utf8(decode(main, 0)?).map_err(|_| bad("files[0].content", "the program is not UTF-8 text"))?;
    let mut files = Vec::new();
    for (i, f) in rest.iter().enumerate() {
        let path = f
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("file{}.code", i + 1));
        files.push(pb::File {
            path,
            content: decode(f, i + 1)?,
            executable: false,
        });
    }
    let phase = |wall: Option<i64>, cpu: Option<i64>, mem: Option<i64>, names: [&str; 3]| {
        let wall = limit(wall, names[0])?;
        let cpu = limit(cpu, names[1])?;
        let memory = limit(mem, names[2])?;
        // Piston's timeout is wall time; CPU time follows it unless asked for separately.
        let max_cpu = engine.policy().max.cpu.as_millis() as u64;
        let cpu = if cpu == 0 && wall > 0 { wall.min(max_cpu) } else { cpu };
        Ok::<_, ExecError>(pb::Limits {
            wall_time_ms: wall,
            cpu_time_ms: cpu,
            memory_bytes: memory,
            ..Default::default()
        })
    };
    let run_limits = phase(
        body.run_timeout,
        body.run_cpu_time,
        body.run_memory_limit,
        ["run_timeout", "run_cpu_time", "run_memory_limit"],
    )?;
    let compile_limits = phase(
        body.compile_timeout,
        body.compile_cpu_time,
        body.compile_memory_limit,
        ["compile_timeout", "compile_cpu_time", "compile_memory_limit"],
    )?;
    let req = pb::ExecuteRequest {
        language: runtime.table_name.clone(),
        code,
        stdin: body.stdin.unwrap_or_default().into_bytes(),
        files,
        limits: Some(run_limits),
        compile_limits: Some(compile_limits),
        args: body.args.unwrap_or_default(),
        fetch_files: vec![],
        request_id: String::new(),
        cold_start: false,
        cache: pb::CachePolicy::Default as i32,
        // The call's (X-Sandpool-Priority) stands.
        priority: 0,
    };
    let resp = engine.execute(req, call).await.map_err(piston_field)?;
    let v = |p: &pb::PhaseResult| pb::Verdict::try_from(p.verdict).unwrap_or(pb::Verdict::SandboxError);
    if resp
        .compile
        .iter()
        .chain(&resp.run)
        .any(|p| v(p) == pb::Verdict::SandboxError)
        || pb::Verdict::try_from(resp.verdict) == Ok(pb::Verdict::SandboxError)
    {
        return Err(ExecError::Internal(resp.message));
    }
    let compile = resp.compile.as_ref().map(stage);
    let run = match resp.run.as_ref() {
        Some(r) => stage(r),
        // Piston's clients expect a run stage even when compiling failed.
        None => Stage {
            message: Some("not run: compilation failed".to_owned()),
            ..Default::default()
        },
    };
    Ok(ExecuteAnswer {
        language: runtime.language,
        version: runtime.version,
        run,
        compile,
    })
}

/// One phase's result as Piston's stage.
fn stage(p: &pb::PhaseResult) -> Stage {
    let verdict = pb::Verdict::try_from(p.verdict).unwrap_or(pb::Verdict::SandboxError);
    let stdout = String::from_utf8_lossy(&p.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&p.stderr).into_owned();
    let signal_name = |s: i32| {
        nix::sys::signal::Signal::try_from(s)
            .map(|s| s.as_str().to_owned())
            .unwrap_or_else(|_| format!("SIG{s}"))
    };
    // Limits end a program with SIGKILL, as Piston's do.
    let (code, signal, status, message) = match verdict {
        pb::Verdict::TimeLimitExceeded | pb::Verdict::WallTimeLimitExceeded => (
            None,
            Some("SIGKILL".to_owned()),
            Some("TO"),
            Some("time limit exceeded".to_owned()),
        ),
        pb::Verdict::MemoryLimitExceeded => (
            None,
            Some("SIGKILL".to_owned()),
            Some("SG"),
            Some("memory limit exceeded".to_owned()),
        ),
        pb::Verdict::OutputLimitExceeded => (
            None,
            Some("SIGKILL".to_owned()),
            Some("OL"),
            Some("output limit exceeded".to_owned()),
        ),
        _ if p.signal != 0 => (None, Some(signal_name(p.signal)), Some("SG"), None),
        _ if p.exit_code != 0 => (Some(p.exit_code), None, Some("RE"), None),
        _ => (Some(0), None, None, None),
    };
    Stage {
        output: format!("{stdout}{stderr}"),
        stdout,
        stderr,
        code,
        signal,
        status,
        message,
        wall_time: p.wall_time_us / 1000,
        cpu_time: p.cpu_time_us / 1000,
        memory: p.peak_memory_bytes,
    }
}

/// Names a limit's field as Piston does (`run_timeout`, not `limits.wall_time_ms`).
fn piston_field(e: ExecError) -> ExecError {
    match e {
        ExecError::InvalidArgument { field, message } => {
            let field = match field.as_str() {
                "limits.wall_time_ms" => "run_timeout",
                "limits.cpu_time_ms" => "run_cpu_time",
                "limits.memory_bytes" => "run_memory_limit",
                "compile_limits.wall_time_ms" => "compile_timeout",
                "compile_limits.cpu_time_ms" => "compile_cpu_time",
                "compile_limits.memory_bytes" => "compile_memory_limit",
                "code" => "files[0].content",
                f => f,
            }
            .to_owned();
            ExecError::InvalidArgument { field, message }
        }
        e => e,
    }
}

/// Piston's clients send their key as a raw `Authorization: <key>` header; on Piston's
/// paths such a header becomes `Bearer <key>` before the token is checked.
pub fn raw_key_as_bearer(headers: &mut http::HeaderMap) {
    let Some(v) = headers.get(http::header::AUTHORIZATION) else {
        return;
    };
    let raw = v.as_bytes().trim_ascii();
    if raw.is_empty() || crate::tenants::strip_bearer(raw).is_some() {
        return;
    }
    if let Ok(v) = http::HeaderValue::from_bytes(&[b"Bearer ".as_slice(), raw].concat()) {
        headers.insert(http::header::AUTHORIZATION, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_the_toolchains_first_dotted_number() {
        assert_eq!(semver_of("Python 3.11.2"), "3.11.2");
        assert_eq!(semver_of("g++ (Debian 12.2.0-14) 12.2.0"), "12.2.0");
        assert_eq!(semver_of("go version go1.19.8 linux/amd64"), "1.19.8");
        assert_eq!(semver_of("openjdk 17.0.13 2024-10-15"), "17.0.13");
        assert_eq!(semver_of("v18.19.0"), "18.19.0");
        assert_eq!(
            semver_of("This is perl 5, version 36, subversion 0 (v5.36.0)"),
            "5.36.0"
        );
        assert_eq!(semver_of("node 18.19"), "18.19.0");
        assert_eq!(semver_of("nothing"), "0.0.0");
    }

    #[test]
    fn version_matching_takes_any_a_prefix_or_exact() {
        for asked in ["*", "", "3", "3.x", "3.11", "3.11.*", "3.11.2"] {
            assert!(version_matches(asked, "3.11.2"), "{asked}");
        }
        for asked in ["3.1", "3.11.20", "2", "3.11.2.1", "4.x"] {
            assert!(!version_matches(asked, "3.11.2"), "{asked}");
        }
    }

    #[test]
    fn limits_take_minus_one_as_the_default_and_refuse_other_non_positives() {
        assert_eq!(limit(None, "run_timeout").unwrap(), 0);
        assert_eq!(limit(Some(-1), "run_timeout").unwrap(), 0);
        assert_eq!(limit(Some(3000), "run_timeout").unwrap(), 3000);
        let e = limit(Some(0), "run_timeout").unwrap_err();
        assert!(e.to_string().starts_with("run_timeout"), "{e}");
        assert!(limit(Some(-5), "run_memory_limit").is_err());
    }

    #[test]
    fn contents_decode_by_their_encoding() {
        let f = |c: &str, e: Option<&str>| PistonFile {
            name: None,
            content: c.into(),
            encoding: e.map(Into::into),
        };
        assert_eq!(decode(&f("hi", None), 0).unwrap(), b"hi");
        assert_eq!(decode(&f("aGk=", Some("base64")), 0).unwrap(), b"hi");
        assert_eq!(decode(&f("6869", Some("hex")), 0).unwrap(), b"hi");
        let e = decode(&f("%%", Some("base64")), 2).unwrap_err();
        assert!(e.to_string().starts_with("files[2].content"), "{e}");
        let e = decode(&f("hi", Some("rot13")), 1).unwrap_err();
        assert!(e.to_string().starts_with("files[1].encoding"), "{e}");
    }

    #[test]
    fn limit_errors_use_pistons_field_names() {
        let named = |f: &str| match piston_field(ExecError::invalid(f, "x")) {
            ExecError::InvalidArgument { field, .. } => field,
            e => panic!("{e:?}"),
        };
        assert_eq!(named("limits.wall_time_ms"), "run_timeout");
        assert_eq!(named("compile_limits.memory_bytes"), "compile_memory_limit");
        assert_eq!(named("files[1].path"), "files[1].path");
    }

    #[test]
    fn raw_keys_become_bearer_tokens_and_bearer_ones_stay() {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, http::HeaderValue::from_static("k3y"));
        raw_key_as_bearer(&mut h);
        assert_eq!(h[http::header::AUTHORIZATION], "Bearer k3y");
        raw_key_as_bearer(&mut h);
        assert_eq!(h[http::header::AUTHORIZATION], "Bearer k3y");
        let mut none = http::HeaderMap::new();
        raw_key_as_bearer(&mut none);
        assert!(none.is_empty());
    }
}
