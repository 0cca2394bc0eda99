//! `sandpool exec FILE`: run one file and print what happened.

use crate::target::Target;
use crate::target::verdict_name;
use sandpool_executor::config::ExecutorArgs;
use sandpool_proto::v1 as pb;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// Source file to run.
    file: PathBuf,
    /// Language (default: from the file's extension).
    #[arg(long, short)]
    language: Option<String>,
    /// File fed to standard input.
    #[arg(long)]
    stdin: Option<PathBuf>,
    /// Executor(s): host:port, dns:///pool.ns.svc.cluster.local:50051 (every address), or a,b,... (default: embedded).
    #[arg(long, env = "SANDPOOL_ENDPOINT")]
    endpoint: Option<String>,
    /// Argument passed to the program (repeatable).
    #[arg(long = "arg")]
    args: Vec<String>,
    /// Wall-time limit, ms (0: executor default).
    #[arg(long, default_value_t = 0)]
    wall_time_ms: u64,
    /// Memory limit, bytes (0: executor default).
    #[arg(long, default_value_t = 0)]
    memory_bytes: u64,
    /// Print the response as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    executor: ExecutorArgs,
}

/// Guesses the language from the file extension using the table's source names.
fn language_for(file: &std::path::Path, caps: &pb::Capabilities) -> Option<String> {
    let ext = file.extension()?.to_str()?;
    caps.languages
        .iter()
        .filter(|l| !l.gpu && l.available)
        .find(|l| l.source_file.rsplit('.').next() == Some(ext) && !l.source_file.contains("test"))
        .map(|l| l.name.clone())
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

fn print_phase(name: &str, p: &pb::PhaseResult) {
    let trunc = |t: bool| if t { " (truncated)" } else { "" };
    if !p.stdout.is_empty() {
        println!(
            "--- {name} stdout{} ---\n{}",
            trunc(p.stdout_truncated),
            String::from_utf8_lossy(&p.stdout).trim_end()
        );
    }
    if !p.stderr.is_empty() {
        println!(
            "--- {name} stderr{} ---\n{}",
            trunc(p.stderr_truncated),
            String::from_utf8_lossy(&p.stderr).trim_end()
        );
    }
    let end = if p.signal != 0 {
        format!("signal {}", p.signal)
    } else {
        format!("exit {}", p.exit_code)
    };
    println!(
        "{name}: {} · {end} · wall {:.1} ms · cpu {:.1} ms · peak memory {}",
        verdict_name(p.verdict),
        p.wall_time_us as f64 / 1000.0,
        p.cpu_time_us as f64 / 1000.0,
        human(p.peak_memory_bytes)
    );
}

pub async fn run(a: ExecArgs) -> anyhow::Result<i32> {
    let code = std::fs::read_to_string(&a.file).map_err(|e| anyhow::anyhow!("reading {}: {e}", a.file.display()))?;
    let stdin = match &a.stdin {
        Some(p) => std::fs::read(p).map_err(|e| anyhow::anyhow!("reading {}: {e}", p.display()))?,
        None => vec![],
    };
    let target = Target::new(a.endpoint.as_deref(), &a.executor).await?;
    let language = match a.language {
        Some(l) => l,
        None => {
            let caps = target.capabilities().await?;
            language_for(&a.file, &caps)
                .ok_or_else(|| anyhow::anyhow!("cannot tell the language of {}; pass --language", a.file.display()))?
        }
    };
    let req = pb::ExecuteRequest {
        language,
        code,
        stdin,
        args: a.args,
        limits: Some(pb::Limits {
            wall_time_ms: a.wall_time_ms,
            memory_bytes: a.memory_bytes,
            ..Default::default()
        }),
        priority: crate::target::priority(),
        ..Default::default()
    };
    let resp = target
        .execute(req)
        .await
        .map_err(|s| anyhow::anyhow!("{}: {}", s.code(), s.message()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&resp))?);
    } else {
        if let Some(c) = &resp.compile {
            print_phase("compile", c);
        }
        if let Some(r) = &resp.run {
            print_phase("run", r);
        }
        let info = resp.executor.clone().unwrap_or_default();
        println!(
            "verdict: {} ({} on {}, isolation {})",
            verdict_name(resp.verdict),
            info.toolchain,
            info.name,
            info.isolation
        );
        if !resp.message.is_empty() {
            println!("message: {}", resp.message);
        }
    }
    Ok(if resp.verdict == pb::Verdict::Ok as i32 { 0 } else { 1 })
}

fn phase_json(p: &pb::PhaseResult) -> serde_json::Value {
    serde_json::json!({
        "verdict": verdict_name(p.verdict),
        "exit_code": p.exit_code,
        "signal": p.signal,
        "stdout": String::from_utf8_lossy(&p.stdout),
        "stderr": String::from_utf8_lossy(&p.stderr),
        "stdout_truncated": p.stdout_truncated,
        "stderr_truncated": p.stderr_truncated,
        "wall_time_us": p.wall_time_us,
        "cpu_time_us": p.cpu_time_us,
        "peak_memory_bytes": p.peak_memory_bytes,
    })
}

fn to_json(r: &pb::ExecuteResponse) -> serde_json::Value {
    let info = r.executor.clone().unwrap_or_default();
    serde_json::json!({
        "verdict": verdict_name(r.verdict),
        "compile": r.compile.as_ref().map(phase_json),
        "run": r.run.as_ref().map(phase_json),
        "message": r.message,
        "executor": {"name": info.name, "version": info.version, "isolation": info.isolation, "toolchain": info.toolchain},
    })
}
