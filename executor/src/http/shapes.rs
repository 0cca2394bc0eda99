//! JSON shapes shared by SandboxFusion's `/run_code` and ScaleBox's tests'
//! `exec_info`: field names and status strings exactly as those APIs use them.

use sandpool_proto::v1 as pb;
use serde::Serialize;
use std::collections::BTreeMap;

/// One command's result (`compile_result` / `run_result`).
#[derive(Debug, Clone, Serialize)]
pub struct CommandResult {
    /// "Finished", "TimeLimitExceeded" or "Error".
    pub status: &'static str,
    /// Seconds.
    pub execution_time: f64,
    pub return_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// SandboxFusion's run response (`/run_code`, and `exec_info` in ScaleBox tests).
#[derive(Debug, Clone, Serialize)]
pub struct RunResponse {
    /// "Success", "Failed" or "SandboxError".
    pub status: &'static str,
    pub message: String,
    pub compile_result: Option<CommandResult>,
    pub run_result: Option<CommandResult>,
    pub executor_pod_name: Option<String>,
    pub files: BTreeMap<String, String>,
    /// Sandpool's additions (SandboxFusion clients ignore them): isolation mode in force
    /// and the toolchain that ran the code, as in the gRPC `ExecutorInfo`.
    pub executor_isolation: Option<String>,
    pub executor_toolchain: Option<String>,
    /// True when the answer came from the executor's result cache (nothing ran).
    pub executor_cached: bool,
}

/// The `CommandResult` of a phase.
pub fn command_result(p: &pb::PhaseResult) -> CommandResult {
    let v = pb::Verdict::try_from(p.verdict).unwrap_or(pb::Verdict::SandboxError);
    let status = match v {
        pb::Verdict::TimeLimitExceeded | pb::Verdict::WallTimeLimitExceeded => "TimeLimitExceeded",
        pb::Verdict::SandboxError => "Error",
        _ => "Finished",
    };
    CommandResult {
        status,
        execution_time: p.wall_time_us as f64 / 1e6,
        // Like Python's subprocess: a signal shows as its negative number.
        return_code: Some(if p.signal != 0 { -p.signal } else { p.exit_code }),
        stdout: String::from_utf8_lossy(&p.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&p.stderr).into_owned(),
    }
}

/// The overall status of a compile (optional) + run: "Success" only when both ended with exit 0.
pub fn run_status(compile: Option<&pb::PhaseResult>, run: Option<&pb::PhaseResult>) -> &'static str {
    let v = |p: &pb::PhaseResult| pb::Verdict::try_from(p.verdict).unwrap_or(pb::Verdict::SandboxError);
    let phases = compile.into_iter().chain(run);
    let mut status = "Success";
    for p in phases {
        match v(p) {
            pb::Verdict::Ok => {}
            pb::Verdict::SandboxError => return "SandboxError",
            _ => status = "Failed",
        }
    }
    if run.is_none() && status == "Success" {
        // Nothing ran (compile failed or the executor failed before the run).
        status = "Failed";
    }
    status
}
