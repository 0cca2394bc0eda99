//! The MCP tools' arguments and results: their JSON shapes, schemas and
//! conversions to and from the gRPC messages.

use crate::target::verdict_name;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use sandpool_proto::v1 as pb;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Arguments of `run_code`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCodeArgs {
    /// Language of the program: one of the executor's languages.
    pub language: String,
    /// The program's source code, run as the language's main file.
    pub code: String,
    /// Text fed to the program's standard input.
    #[serde(default)]
    pub stdin: String,
    /// Arguments passed to the program.
    #[serde(default)]
    pub args: Vec<String>,
    /// Resource limits of the run; a field left out takes the executor's default.
    #[serde(default)]
    pub limits: Option<LimitArgs>,
}

/// Per-run resource limits. The executor refuses values above its ceilings.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitArgs {
    /// Wall-clock time, milliseconds.
    #[schemars(range(min = 1))]
    pub wall_time_ms: Option<u64>,
    /// CPU time, milliseconds.
    #[schemars(range(min = 1))]
    pub cpu_time_ms: Option<u64>,
    /// Memory, bytes.
    #[schemars(range(min = 1))]
    pub memory_bytes: Option<u64>,
    /// Output kept per stream (stdout, stderr), bytes; the rest is cut off.
    #[schemars(range(min = 1))]
    pub output_bytes: Option<u64>,
}

impl LimitArgs {
    /// The gRPC limits: 0 (unset) means "executor default" there. An explicit 0
    /// is refused here, since it would silently mean the default.
    pub fn to_proto(&self, field: &str) -> Result<pb::Limits, String> {
        let pick = |name: &str, v: Option<u64>| match v {
            Some(0) => Err(format!(
                "`{field}.{name}`: must be at least 1 (leave it out for the default)"
            )),
            Some(n) => Ok(n),
            None => Ok(0),
        };
        Ok(pb::Limits {
            wall_time_ms: pick("wall_time_ms", self.wall_time_ms)?,
            cpu_time_ms: pick("cpu_time_ms", self.cpu_time_ms)?,
            memory_bytes: pick("memory_bytes", self.memory_bytes)?,
            output_bytes: pick("output_bytes", self.output_bytes)?,
            ..Default::default()
        })
    }
}

/// What one run of a program did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Outcome {
    /// OK, COMPILE_ERROR, RUNTIME_ERROR, TIME_LIMIT_EXCEEDED, WALL_TIME_LIMIT_EXCEEDED,
    /// MEMORY_LIMIT_EXCEEDED, OUTPUT_LIMIT_EXCEEDED or SANDBOX_ERROR.
    pub verdict: String,
    /// The process's exit code (0 when a signal ended it).
    pub exit_code: i32,
    /// The signal that ended the process, 0 if none.
    pub signal: i32,
    /// Standard output (invalid UTF-8 replaced).
    pub stdout: String,
    /// Standard error (invalid UTF-8 replaced).
    pub stderr: String,
    /// True when stdout hit the output limit and was cut.
    pub stdout_truncated: bool,
    /// True when stderr hit the output limit and was cut.
    pub stderr_truncated: bool,
    /// Resources the program used.
    pub usage: Usage,
    /// Detail from the executor, e.g. what failed for SANDBOX_ERROR; empty when none.
    pub message: String,
}

/// Resources one phase used.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Usage {
    /// Wall-clock time, milliseconds.
    pub wall_time_ms: f64,
    /// CPU time, milliseconds.
    pub cpu_time_ms: f64,
    /// Peak memory, bytes.
    pub peak_memory_bytes: u64,
}

impl Outcome {
    pub fn new(verdict: i32, p: &pb::PhaseResult, message: &str) -> Outcome {
        Outcome {
            verdict: verdict_name(verdict).to_owned(),
            exit_code: p.exit_code,
            signal: p.signal,
            stdout: String::from_utf8_lossy(&p.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&p.stderr).into_owned(),
            stdout_truncated: p.stdout_truncated,
            stderr_truncated: p.stderr_truncated,
            usage: Usage {
                wall_time_ms: p.wall_time_us as f64 / 1000.0,
                cpu_time_ms: p.cpu_time_us as f64 / 1000.0,
                peak_memory_bytes: p.peak_memory_bytes,
            },
            message: message.to_owned(),
        }
    }
}

/// What `run_code` did: the run phase, or the compile phase when compiling failed.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RunResult {
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Which phase the other fields describe: "run", or "compile" when compiling failed.
    pub phase: String,
}

impl RunResult {
    /// The phase that decided the verdict: run, or compile when there was no run.
    pub fn from_response(r: &pb::ExecuteResponse) -> RunResult {
        let (phase, p) = match (&r.run, &r.compile) {
            (Some(run), _) => ("run", run.clone()),
            (None, Some(compile)) => ("compile", compile.clone()),
            (None, None) => ("run", pb::PhaseResult::default()),
        };
        RunResult {
            outcome: Outcome::new(r.verdict, &p, &r.message),
            phase: phase.to_owned(),
        }
    }
}

impl RunCodeArgs {
    /// The gRPC request these arguments ask for.
    pub fn into_request(self) -> Result<pb::ExecuteRequest, String> {
        let limits = self.limits.unwrap_or_default().to_proto("limits")?;
        Ok(pb::ExecuteRequest {
            language: self.language,
            code: self.code,
            stdin: self.stdin.into_bytes(),
            args: self.args,
            limits: Some(limits),
            ..Default::default()
        })
    }
}

/// A tool's input schema: `T`'s, with `language` narrowed to `languages` when known.
fn input_schema<T: JsonSchema + 'static>(languages: &[String]) -> Arc<JsonObject> {
    let schema = rmcp::handler::server::common::schema_for_type::<T>();
    if languages.is_empty() {
        return schema;
    }
    let mut schema = (*schema).clone();
    if let Some(serde_json::Value::Object(lang)) = schema.get_mut("properties").and_then(|p| p.get_mut("language")) {
        lang.insert("enum".into(), serde_json::json!(languages));
    }
    Arc::new(schema)
}

fn tool<In: JsonSchema + 'static, Out: JsonSchema + 'static>(
    name: &'static str,
    description: &'static str,
    languages: &[String],
    annotations: ToolAnnotations,
) -> Tool {
    Tool::new(name, description, input_schema::<In>(languages))
        .with_raw_output_schema(rmcp::handler::server::common::schema_for_output::<Out>())
        .with_annotations(annotations.open_world(false))
}

/// The tools this server offers; `languages` are the executor's available ones
/// (empty: unknown, any name is passed on and the executor judges).
pub fn list(languages: &[String]) -> Vec<Tool> {
    use super::session_tools::*;
    // Sessions exist for these languages only (docs/sessions.md).
    let session_languages: Vec<String> = ["python", "bash"]
        .into_iter()
        .filter(|l| languages.is_empty() || languages.iter().any(|a| a == l))
        .map(String::from)
        .collect();
    let none: &[String] = &[];
    let writes = || ToolAnnotations::new().read_only(false).destructive(false);
    vec![
        tool::<RunCodeArgs, RunResult>(
            "run_code",
            "Run a program once in a fresh sandbox and return its verdict, output, exit code and \
             resource usage. Nothing persists between calls: use a session for state.",
            languages,
            writes(),
        ),
        tool::<CreateSessionArgs, SessionCreated>(
            "create_session",
            "Open a session: a sandbox whose /work (and, for python, the interpreter's variables) \
             lives across run_in_session calls until close_session or its idle timeout. Returns its \
             session_id.",
            &session_languages,
            writes(),
        ),
        tool::<RunInSessionArgs, SessionRunResult>(
            "run_in_session",
            "Run code (in the session's language) or a shell command in a session. Python keeps \
             variables between calls and returns the final expression's value in `display`.",
            none,
            writes(),
        ),
        tool::<WriteFileArgs, FileWritten>(
            "write_file",
            "Write a file into a session's /work, replacing any file at that path.",
            none,
            writes(),
        ),
        tool::<ReadFileArgs, FileRead>(
            "read_file",
            "Read a file from a session's /work: text as is, other bytes as base64.",
            none,
            ToolAnnotations::new().read_only(true),
        ),
        tool::<CloseSessionArgs, SessionClosed>(
            "close_session",
            "End a session: its processes are killed and its /work is deleted.",
            none,
            ToolAnnotations::new()
                .read_only(false)
                .destructive(true)
                .idempotent(true),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_code_schema_is_precise() {
        let tools = list(&["python".into(), "bash".into()]);
        let schema = serde_json::Value::Object((*tools[0].input_schema).clone());
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        let mut required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        required.sort_unstable();
        assert_eq!(required, ["code", "language"]);
        assert_eq!(
            schema["properties"]["language"]["enum"],
            serde_json::json!(["python", "bash"])
        );
    }

    #[test]
    fn session_languages_are_the_available_ones_of_python_and_bash() {
        let enum_of = |tools: &[Tool]| {
            let t = tools.iter().find(|t| t.name == "create_session").unwrap();
            t.input_schema["properties"]["language"].get("enum").cloned()
        };
        let only_python = list(&["python".into(), "c".into()]);
        assert_eq!(enum_of(&only_python), Some(serde_json::json!(["python"])));
        assert_eq!(enum_of(&list(&[])), Some(serde_json::json!(["python", "bash"])));
        let names: Vec<_> = only_python.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "run_code",
                "create_session",
                "run_in_session",
                "write_file",
                "read_file",
                "close_session"
            ]
        );
    }

    #[test]
    fn a_zero_limit_is_refused_by_name() {
        let l = LimitArgs {
            memory_bytes: Some(0),
            ..Default::default()
        };
        let e = l.to_proto("limits").unwrap_err();
        assert!(e.contains("`limits.memory_bytes`"), "{e}");
    }
}
