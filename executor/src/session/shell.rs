//! A bash session's call: a fresh sandboxed run in the session's /work.
//!
//! The cell is written to `.sandpool/cell.sh` and sourced by a prelude that first
//! restores the last call's exported variables and working directory; an EXIT trap
//! saves both for the next call, so `cd src` or `export X=1` carry over as in a
//! terminal. Unexported variables, functions, /tmp and background processes do not:
//! every call is a new process tree, killed whole when it ends.

use super::SessionError;
use crate::engine::Engine;
use crate::limits::Limits;
use crate::metrics::Phase;
use crate::sandbox::{RunSpec, WorkDir};
use crate::task::blocking;
use sandpool_proto::v1 as pb;
use std::sync::Arc;

const PRELUDE: &str = r#"[ -r /work/.sandpool/env ] && . /work/.sandpool/env >/dev/null 2>&1
cd -- "$(cat /work/.sandpool/cwd 2>/dev/null)" 2>/dev/null || cd /work
trap 'export -p > /work/.sandpool/env 2>/dev/null; pwd > /work/.sandpool/cwd 2>/dev/null' EXIT
. /work/.sandpool/cell.sh
"#;

/// Longest working directory read back.
const CWD_CAP: u64 = 4096;

/// One call's result.
pub struct ShellResult {
    pub verdict: pb::Verdict,
    pub result: pb::PhaseResult,
    pub cwd: String,
    pub message: String,
    /// The cell needed the reserve (see [`super::RESERVE_BYTES`]).
    pub reserve_used: bool,
}

/// Runs `source` as bash in `work`, in the session's seat, under `limits`.
pub async fn call(
    engine: &Arc<Engine>,
    seat: usize,
    work: &Arc<WorkDir>,
    source: &str,
    stdin: Vec<u8>,
    limits: Limits,
) -> Result<ShellResult, SessionError> {
    let (lang, _) = engine.language("bash", "language")?;
    let w = work.clone();
    let cell = source.as_bytes().to_vec();
    let reserve_used = blocking(move || super::write_state(&w, &[(".sandpool/cell.sh", &cell)])).await??;
    let bash = lang.run.first().cloned().unwrap_or_else(|| "bash".into());
    let spec = RunSpec {
        argv: vec![bash, "-c".into(), PRELUDE.into()],
        env: lang.run_env(),
        stdin,
        limits,
        gpu: false,
        warm: None,
    };
    let r = engine.run_phase_in(seat, work, &spec, Phase::Run).await;
    let w = work.clone();
    let cwd = blocking(move || w.read_file(".sandpool/cwd", CWD_CAP))
        .await?
        .map(|b| String::from_utf8_lossy(&b).trim_end().to_owned())
        .unwrap_or_default();
    Ok(ShellResult {
        verdict: r.verdict,
        result: r.result,
        cwd,
        message: r.error.unwrap_or_default(),
        reserve_used,
    })
}
