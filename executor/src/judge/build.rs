//! What each test's work dir starts with: a compiled build to copy, or sources to write.

use crate::admission::SlotGuard;
use crate::engine::{Engine, Phased};
use crate::error::scrub_host_paths;
use crate::languages::Language;
use crate::limits::Limits;
use crate::metrics::Phase;
use crate::task::blocking;
use sandpool_proto::v1 as pb;
use sandpool_sandbox::{RunSpec, WorkDir};
use std::sync::Arc;

/// A file written into a work dir: path, content, executable.
pub type SourceFile = (String, Vec<u8>, bool);

/// The starting content of a run's work dir.
#[derive(Debug, Clone)]
pub enum Build {
    /// Interpreted: a copy of `seed` (the language's warm-up), then these files, afresh for every run.
    Sources {
        seed: Option<Arc<WorkDir>>,
        files: Vec<SourceFile>,
    },
    /// Compiled once in this work dir; every run gets a copy of it.
    Compiled(Arc<WorkDir>),
}

/// How compiling went.
#[derive(Debug)]
pub enum Compiled {
    Ok(Build, Option<pb::PhaseResult>),
    /// The program's fault (COMPILE_ERROR and friends): the phase result.
    Failed(pb::PhaseResult),
    /// The executor's fault: what failed, and the phase if there was one.
    SandboxError(String, Option<pb::PhaseResult>),
}

/// Compiles `files` for `lang` in a fresh work dir of `slot` (no-op for interpreted languages),
/// with the language's shared artifacts (built first if this is their first use) unless
/// `cold_start`.
pub async fn compile(
    engine: &Engine,
    slot: &SlotGuard,
    lang: &Language,
    files: Vec<SourceFile>,
    limits: Limits,
    cold_start: bool,
) -> Compiled {
    let Some(table_argv) = &lang.compile else {
        return Compiled::Ok(Build::Sources { seed: None, files }, None);
    };
    let shared = engine.shared_for(slot, lang, cold_start).await;
    let source = files.iter().find(|f| f.0 == lang.source).map(|f| f.1.as_slice());
    let command = crate::shared::compile_command(shared.as_deref(), lang, table_argv, source);
    let work = match engine.sandbox().work_dir(slot.index()) {
        Ok(w) => w,
        Err(e) => return Compiled::SandboxError(scrub_host_paths(&e.to_string()), None),
    };
    // Up to a work dir's size in writes: off the runtime.
    let written = blocking(move || {
        for (path, content, exec) in &files {
            work.write_file(path, content, *exec).map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(work)
    })
    .await;
    let work = match written {
        Ok(Ok(w)) => w,
        Ok(Err(e)) => return Compiled::SandboxError(scrub_host_paths(&e), None),
        Err(e) => return Compiled::SandboxError(e.to_string(), None),
    };
    let spec = RunSpec {
        argv: command.argv,
        env: command.env,
        stdin: vec![],
        limits,
        gpu: lang.gpu,
        warm: None,
    };
    let Phased {
        mut result,
        verdict,
        error,
    } = engine.run_phase(slot, &work, &spec, Phase::Compile).await;
    result.warm |= command.warm;
    match verdict {
        pb::Verdict::Ok => Compiled::Ok(Build::Compiled(Arc::new(work)), Some(result)),
        pb::Verdict::SandboxError => Compiled::SandboxError(error.unwrap_or_default(), Some(result)),
        _ => {
            let mut result = result;
            result.verdict = pb::Verdict::CompileError as i32;
            Compiled::Failed(result)
        }
    }
}

/// A fresh work dir in `slot` holding `build` plus `extra` files, made on the blocking pool
/// (copying a build or writing sources is up to a work dir's size).
pub async fn prepare(
    engine: &Arc<Engine>,
    slot: &SlotGuard,
    build: &Build,
    extra: Vec<SourceFile>,
) -> Result<WorkDir, String> {
    let (engine, build, slot) = (engine.clone(), build.clone(), slot.index());
    blocking(move || prepare_now(&engine, slot, &build, &extra))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| scrub_host_paths(&e))
}

fn prepare_now(engine: &Engine, slot: usize, build: &Build, extra: &[SourceFile]) -> Result<WorkDir, String> {
    let work = engine.sandbox().work_dir(slot).map_err(|e| e.to_string())?;
    match build {
        Build::Compiled(base) => work.copy_from(base).map_err(|e| e.to_string())?,
        Build::Sources { seed, files } => {
            if let Some(seed) = seed {
                work.copy_from(seed).map_err(|e| e.to_string())?;
            }
            for (p, c, x) in files {
                work.write_file(p, c, *x).map_err(|e| e.to_string())?;
            }
        }
    }
    for (p, c, x) in extra {
        work.write_file(p, c, *x).map_err(|e| e.to_string())?;
    }
    Ok(work)
}

/// Runs `lang`'s warm-up program in a fresh work dir of `slot`; the dir, if it exited 0.
pub async fn warm_up(engine: &Engine, slot: &SlotGuard, lang: &Language, program: &str) -> Result<WorkDir, String> {
    let work = engine.sandbox().work_dir(slot.index()).map_err(|e| e.to_string())?;
    work.write_file(&lang.source, program.as_bytes(), false)
        .map_err(|e| e.to_string())?;
    let spec = RunSpec {
        argv: lang.run.clone(),
        env: lang.run_env(),
        stdin: vec![],
        limits: engine.policy().compile_defaults,
        gpu: lang.gpu,
        warm: None,
    };
    let p = engine.run_phase(slot, &work, &spec, Phase::Compile).await;
    match p.verdict {
        pb::Verdict::Ok => Ok(work),
        v => Err(format!(
            "{}: {}",
            v.as_str_name(),
            String::from_utf8_lossy(&p.result.stderr)
                .chars()
                .take(500)
                .collect::<String>()
        )),
    }
}
