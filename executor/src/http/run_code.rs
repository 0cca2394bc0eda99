//! SandboxFusion's `POST /run_code`: run one program.

use super::shapes::{RunResponse, command_result, run_status};
use crate::call::Call;
use crate::engine::Engine;
use crate::error::ExecError;
use base64::Engine as _;
use sandpool_proto::v1 as pb;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The request, as SandboxFusion defines it (unknown fields are ignored).
#[derive(Debug, Deserialize)]
pub struct RunCodeRequest {
    pub code: String,
    pub language: String,
    /// Seconds.
    #[serde(default)]
    pub compile_timeout: Option<f64>,
    /// Seconds.
    #[serde(default)]
    pub run_timeout: Option<f64>,
    #[serde(default, rename = "memory_limit_MB")]
    pub memory_limit_mb: Option<f64>,
    #[serde(default)]
    pub stdin: Option<String>,
    /// Path to base64 content.
    #[serde(default)]
    pub files: BTreeMap<String, Option<String>>,
    #[serde(default)]
    pub fetch_files: Vec<String>,
}

/// Seconds (as the HTTP APIs give them) to clamped milliseconds; None or <= 0 is "default".
pub fn seconds_to_ms(s: Option<f64>, max_ms: u64) -> u64 {
    match s {
        Some(s) if s.is_finite() && s > 0.0 => ((s * 1000.0).ceil() as u64).clamp(1, max_ms.max(1)),
        _ => 0,
    }
}

/// Time limits for a phase from an HTTP timeout in seconds, clamped to the executor's ceiling.
pub fn time_limits(engine: &Engine, seconds: Option<f64>) -> Option<pb::Limits> {
    let max = &engine.policy().max;
    let wall = seconds_to_ms(seconds, max.wall.as_millis() as u64);
    (wall > 0).then(|| pb::Limits {
        wall_time_ms: wall,
        cpu_time_ms: wall.min(max.cpu.as_millis() as u64),
        ..Default::default()
    })
}

/// Runs `req` through the engine.
pub async fn run_code(engine: &Engine, req: RunCodeRequest, call: Call) -> Result<RunResponse, ExecError> {
    let mut files = Vec::new();
    for (path, content) in &req.files {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(content.as_deref().unwrap_or(""))
            .map_err(|e| ExecError::invalid(format!("files[{path:?}]"), format!("not base64: {e}")))?;
        files.push(pb::File {
            path: path.clone(),
            content: bytes,
            executable: false,
        });
    }
    let mut limits = time_limits(engine, req.run_timeout).unwrap_or_default();
    if let Some(mb) = req.memory_limit_mb.filter(|m| m.is_finite() && *m > 0.0) {
        let bytes = (mb * 1048576.0) as u64;
        let min = crate::limits::MIN.memory;
        if bytes < min {
            return Err(ExecError::invalid(
                "memory_limit_MB",
                format!(
                    "{mb} MB is below the smallest this executor runs with, {} MB",
                    min >> 20
                ),
            ));
        }
        limits.memory_bytes = bytes.min(engine.policy().max.memory);
    }
    let exec = pb::ExecuteRequest {
        language: req.language,
        code: req.code,
        stdin: req.stdin.unwrap_or_default().into_bytes(),
        files,
        limits: Some(limits),
        compile_limits: time_limits(engine, req.compile_timeout),
        args: vec![],
        fetch_files: req.fetch_files,
        request_id: String::new(),
        cold_start: false,
        cache: pb::CachePolicy::Default as i32,
        // The call's (X-Sandpool-Priority) stands.
        priority: 0,
    };
    let resp = engine.execute(exec, call).await.map_err(http_field)?;
    let status = run_status(resp.compile.as_ref(), resp.run.as_ref());
    Ok(RunResponse {
        status,
        message: resp.message,
        compile_result: resp.compile.as_ref().map(command_result),
        run_result: resp.run.as_ref().map(command_result),
        executor_pod_name: resp.executor.as_ref().map(|e| e.name.clone()),
        executor_isolation: resp.executor.as_ref().map(|e| e.isolation.clone()),
        executor_toolchain: resp.executor.as_ref().map(|e| e.toolchain.clone()),
        executor_cached: resp.cached,
        files: resp
            .files
            .iter()
            .map(|f| {
                (
                    f.path.clone(),
                    base64::engine::general_purpose::STANDARD.encode(&f.content),
                )
            })
            .collect(),
    })
}

/// Names a limit's field as this API does (`run_timeout`, not `limits.wall_time_ms`).
fn http_field(e: ExecError) -> ExecError {
    match e {
        ExecError::InvalidArgument { field, message } => {
            let field = match field.as_str() {
                "limits.wall_time_ms" | "limits.cpu_time_ms" => "run_timeout".to_owned(),
                "compile_limits.wall_time_ms" | "compile_limits.cpu_time_ms" => "compile_timeout".to_owned(),
                "limits.memory_bytes" => "memory_limit_MB".to_owned(),
                _ => field,
            };
            ExecError::InvalidArgument { field, message }
        }
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_errors_use_this_apis_field_names() {
        let named = |f: &str| match http_field(ExecError::invalid(f, "x")) {
            ExecError::InvalidArgument { field, .. } => field,
            e => panic!("{e:?}"),
        };
        assert_eq!(named("limits.wall_time_ms"), "run_timeout");
        assert_eq!(named("compile_limits.cpu_time_ms"), "compile_timeout");
        assert_eq!(named("limits.memory_bytes"), "memory_limit_MB");
        assert_eq!(named("files[0].path"), "files[0].path");
    }

    #[test]
    fn seconds_become_clamped_milliseconds() {
        assert_eq!(seconds_to_ms(Some(1.5), 60_000), 1500);
        assert_eq!(seconds_to_ms(Some(600.0), 60_000), 60_000);
        assert_eq!(seconds_to_ms(Some(0.0), 60_000), 0);
        assert_eq!(seconds_to_ms(Some(f64::NAN), 60_000), 0);
        assert_eq!(seconds_to_ms(None, 60_000), 0);
    }
}
