//! Bad-case capture: an opt-in, bounded JSONL record of requests that ended
//! with chosen verdicts (SANDBOX_ERROR by default), with their responses, for
//! debugging the executor.
//!
//! It stores user code and inputs: it is off unless `--capture-dir` is set.
//! Lines are handed to one writer thread through a bounded channel; when the
//! writer falls behind, lines are dropped (and counted), so a response never
//! waits for the disk. Files rotate: `capture.jsonl` is renamed to
//! `capture.1.jsonl` (and so on) when the next line would pass its share of
//! `--capture-max-bytes`; only `--capture-files` files are kept.

use crate::admission::Ticket;
use base64::Engine as _;
use prost::Message;
use sandpool_proto::v1 as pb;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

/// Lines waiting for the writer; past this they are dropped.
const QUEUE: usize = 256;
/// Longest text field (code, stdout, stderr, message) shown readably in a line; the
/// full request and response are always in the base64 protobuf fields.
const TEXT_BYTES: usize = 16 << 10;

/// Capture settings.
#[derive(Debug, Clone)]
pub struct CaptureConfig {
    pub dir: PathBuf,
    /// Verdicts recorded.
    pub verdicts: Vec<pb::Verdict>,
    /// All files together stay under this, bytes.
    pub max_bytes: u64,
    /// Files kept (the current one and rotated ones).
    pub files: usize,
}

/// Errors setting capture up.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("--capture-verdicts: unknown verdict {0:?}")]
    Verdict(String),
    #[error("--capture-dir {0}: {1}")]
    Dir(PathBuf, std::io::Error),
}

/// Parses `sandbox_error,runtime_error` (case-insensitive proto names).
pub fn parse_verdicts(names: &[String]) -> Result<Vec<pb::Verdict>, CaptureError> {
    names
        .iter()
        .map(|n| pb::Verdict::from_str_name(&n.trim().to_uppercase()).ok_or_else(|| CaptureError::Verdict(n.clone())))
        .collect()
}

/// The capture handle, shared by every front end; cheap to clone.
#[derive(Debug, Clone)]
pub struct Capture {
    verdicts: Arc<[pb::Verdict]>,
    tx: SyncSender<Vec<u8>>,
    dropped: Arc<AtomicU64>,
}

impl Capture {
    /// Creates the directory and starts the writer thread.
    pub fn start(cfg: CaptureConfig) -> Result<Self, CaptureError> {
        std::fs::create_dir_all(&cfg.dir).map_err(|e| CaptureError::Dir(cfg.dir.clone(), e))?;
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE);
        let files = cfg.files.max(1);
        let mut w = Rotating {
            dir: cfg.dir.clone(),
            file_cap: (cfg.max_bytes / files as u64).max(1),
            files,
            current: None,
            size: 0,
        };
        std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || {
                for line in rx {
                    if let Err(e) = w.write(&line) {
                        tracing::warn!(error = %e, "capture: writing failed");
                    }
                }
            })
            .map_err(|e| CaptureError::Dir(cfg.dir.clone(), e))?;
        tracing::warn!(dir = %cfg.dir.display(), verdicts = ?cfg.verdicts, "capturing requests (user code) to disk");
        Ok(Capture {
            verdicts: cfg.verdicts.into(),
            tx,
            dropped: Arc::default(),
        })
    }

    fn wants(&self, v: pb::Verdict) -> bool {
        self.verdicts.contains(&v)
    }

    /// Lines dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn send(&self, line: serde_json::Value) {
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        match self.tx.try_send(bytes) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Records an Execute that ended with `verdict`, if chosen.
    pub fn execute(&self, verdict: pb::Verdict, req: &pb::ExecuteRequest, resp: &pb::ExecuteResponse, who: &Ticket) {
        if !self.wants(verdict) {
            return;
        }
        let phase = |p: &Option<pb::PhaseResult>| {
            p.as_ref().map(|p| {
                serde_json::json!({
                    "verdict": name(p.verdict),
                    "exit_code": p.exit_code,
                    "signal": p.signal,
                    "stdout": text(&p.stdout),
                    "stderr": text(&p.stderr),
                })
            })
        };
        self.send(serde_json::json!({
            "time_unix_ms": now_ms(),
            "kind": "execute",
            "tenant": &*who.tenant.name,
            "priority": who.priority.name(),
            "request_id": req.request_id,
            "language": req.language,
            "verdict": verdict.as_str_name(),
            "message": text(resp.message.as_bytes()),
            "code": text(req.code.as_bytes()),
            "files": req.files.iter().map(|f| &f.path).collect::<Vec<_>>(),
            "compile": phase(&resp.compile),
            "run": phase(&resp.run),
            "request_pb": b64(&req.encode_to_vec()),
            "response_pb": b64(&resp.encode_to_vec()),
        }));
    }

    /// Records an Evaluate whose overall verdict is chosen.
    pub fn evaluate(&self, req: &pb::EvaluateRequest, resp: &pb::EvaluateResponse, who: &Ticket) {
        let verdict = pb::Verdict::try_from(resp.verdict).unwrap_or_default();
        if !self.wants(verdict) {
            return;
        }
        self.send(serde_json::json!({
            "time_unix_ms": now_ms(),
            "kind": "evaluate",
            "tenant": &*who.tenant.name,
            "priority": who.priority.name(),
            "id": req.id,
            "language": req.language,
            "verdict": verdict.as_str_name(),
            "message": text(resp.message.as_bytes()),
            "completion": text(req.completion.as_bytes()),
            "tests": resp.tests.iter().map(|t| serde_json::json!({
                "index": t.index,
                "verdict": name(t.verdict),
                "message": text(t.message.as_bytes()),
            })).collect::<Vec<_>>(),
            "request_pb": b64(&req.encode_to_vec()),
            "response_pb": b64(&resp.encode_to_vec()),
        }));
    }
}

fn name(v: i32) -> &'static str {
    pb::Verdict::try_from(v).map(|v| v.as_str_name()).unwrap_or("UNKNOWN")
}

fn text(b: &[u8]) -> String {
    let cut = &b[..b.len().min(TEXT_BYTES)];
    String::from_utf8_lossy(cut).into_owned()
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// `capture.jsonl` and its rotated predecessors `capture.1.jsonl` ... `capture.{files-1}.jsonl`.
struct Rotating {
    dir: PathBuf,
    file_cap: u64,
    files: usize,
    current: Option<std::fs::File>,
    size: u64,
}

fn numbered(dir: &Path, n: usize) -> PathBuf {
    if n == 0 {
        dir.join("capture.jsonl")
    } else {
        dir.join(format!("capture.{n}.jsonl"))
    }
}

impl Rotating {
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        let len = line.len() as u64;
        if len > self.file_cap {
            tracing::warn!(
                bytes = len,
                cap = self.file_cap,
                "capture: a record larger than a capture file; skipped"
            );
            return Ok(());
        }
        if self.current.is_none() {
            let path = numbered(&self.dir, 0);
            let f = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
            self.size = f.metadata()?.len();
            self.current = Some(f);
        }
        if self.size + len > self.file_cap {
            self.current = None;
            let _ = std::fs::remove_file(numbered(&self.dir, self.files - 1));
            for n in (0..self.files - 1).rev() {
                let _ = std::fs::rename(numbered(&self.dir, n), numbered(&self.dir, n + 1));
            }
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(numbered(&self.dir, 0))?;
            self.size = 0;
            self.current = Some(f);
        }
        if let Some(f) = &mut self.current {
            f.write_all(line)?;
            self.size += len;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_keeps_the_total_under_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Rotating {
            dir: dir.path().into(),
            file_cap: 100,
            files: 3,
            current: None,
            size: 0,
        };
        for i in 0..50 {
            w.write(format!("{{\"n\":{i:030}}}\n").as_bytes()).unwrap();
        }
        let total: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total <= 300, "{total}");
        let last = std::fs::read_to_string(numbered(dir.path(), 0)).unwrap();
        assert!(last.contains(&format!("{:030}", 49)));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
    }

    #[test]
    fn verdict_names_parse() {
        let v = parse_verdicts(&["sandbox_error".into(), "RUNTIME_ERROR".into()]).unwrap();
        assert_eq!(v, [pb::Verdict::SandboxError, pb::Verdict::RuntimeError]);
        assert!(parse_verdicts(&["nope".into()]).is_err());
    }
}
