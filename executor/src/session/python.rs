//! A Python session's call: its request handed to the interpreter ([`super::repl`]) and the
//! reply, time-out or exit turned into the call's answer.

use super::call::Input;
use super::record::{Session, State};
use super::repl::{self, CallEnd, Repl};
use super::startup::Ensured;
use super::{SessionError, SessionManager};
use crate::error::{ExecError, scrub_host_paths};
use crate::limits::Limits;
use crate::verdict;
use sandpool_proto::v1 as pb;
use std::time::{Duration, Instant};

/// Marks a Python call abandoned unless it finished: its caller's future was dropped.
pub(super) struct CallGuard<'a> {
    state: &'a mut State,
    done: bool,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.state.abandoned = true;
        }
    }
}

impl SessionManager {
    pub(super) async fn run_python(
        &self,
        s: &Session,
        st: &mut State,
        input: Input,
        stdin: Vec<u8>,
        limits: Limits,
        ensured: Option<Ensured>,
    ) -> Result<pb::RunInSessionResponse, SessionError> {
        let Ensured {
            mut reset,
            mut notes,
            died,
        } = match ensured {
            Some(e) => e,
            None => self.ensure_repl(s, st, None).await?,
        };
        if let Some(why) = died {
            // Not counted: the call ran nothing.
            st.calls = st.calls.saturating_sub(1);
            return Err(SessionError::Reset(why));
        }
        let n = st.next_call;
        st.next_call += 1;
        let mut request = match input {
            Input::Code(source) => serde_json::json!({"kind": "code", "source": source}),
            Input::Command(source) => serde_json::json!({"kind": "command", "source": source}),
            Input::Request(op) => op,
        };
        request["output_bytes"] = limits.output.into();
        request["display_chars"] = limits.output.min(repl::DISPLAY_CHARS).into();
        request["cpu_seconds"] = limits.cpu.as_secs_f64().into();
        let t = Instant::now();
        let guard = CallGuard { state: st, done: false };
        let Some(repl) = guard.state.repl.as_mut() else {
            return Err(ExecError::Internal("no interpreter".into()).into());
        };
        let Some(work) = s.work.get().cloned() else {
            return Err(ExecError::Internal("no /work".into()).into());
        };
        let end = repl.call(&work, n, request, stdin, limits.wall, limits.output).await;
        let host_used_reserve = repl.reserve_used;
        let mut guard = guard;
        guard.done = true;
        let st = &mut *guard.state;
        st.reserve_low |= host_used_reserve;
        let wall = t.elapsed();
        let mut resp = pb::RunInSessionResponse::default();
        match end? {
            CallEnd::Replied(r) => {
                // The cell's own report: bounded, and replaced by the measured CPU when the run ends.
                let cpu = Duration::from_micros(r.cpu_us).min(s.totals.cpu);
                st.cpu_used += cpu;
                let truncated = r.stdout_truncated || r.stderr_truncated;
                let v = if truncated {
                    pb::Verdict::OutputLimitExceeded
                } else if r.status == "ok" {
                    pb::Verdict::Ok
                } else {
                    pb::Verdict::RuntimeError
                };
                resp.verdict = v as i32;
                st.reserve_low |= r.reserve_used;
                if r.reserve_used {
                    notes.push("the session's /work is full: this call's output could not be returned; free space (rm) to go on");
                }
                resp.display = r.display;
                if r.display_truncated {
                    notes.push("the displayed value was cut to its first characters (print it, or write it to a file, for all of it)");
                }
                resp.cwd = r.cwd;
                if !r.error.is_empty() {
                    resp.message = r.error;
                }
                resp.result = Some(pb::PhaseResult {
                    verdict: v as i32,
                    exit_code: i32::try_from(r.exit_code).unwrap_or(1),
                    signal: 0,
                    stdout: r.stdout,
                    stderr: r.stderr,
                    stdout_truncated: r.stdout_truncated,
                    stderr_truncated: r.stderr_truncated,
                    wall_time_us: wall.as_micros() as u64,
                    cpu_time_us: cpu.as_micros() as u64,
                    peak_memory_bytes: r.max_rss,
                    warm: false,
                });
            }
            CallEnd::TimedOut => {
                st.cpu_used += wall;
                if let Some(r) = st.repl.take() {
                    self.kill_repl(s, st, r).await;
                }
                reset = true;
                let v = pb::Verdict::WallTimeLimitExceeded;
                resp.verdict = v as i32;
                resp.result = Some(pb::PhaseResult {
                    verdict: v as i32,
                    signal: libc::SIGKILL,
                    wall_time_us: wall.as_micros() as u64,
                    ..Default::default()
                });
                notes.push("the call ran past its wall time: the interpreter was killed and restarts on the next call (files in /work stay, variables are gone)");
            }
            CallEnd::Exited(outcome) => {
                st.repl = None;
                reset = true;
                match outcome {
                    Ok(o) => {
                        st.cpu_used = st.cpu_at_repl_start + o.cpu;
                        let result = verdict::phase_result(o);
                        // The cell's own doing (exit(), its memory limit) as often as not: info.
                        tracing::info!(
                            session = %&s.id[..8], seat = s.seat,
                            verdict = ?pb::Verdict::try_from(result.verdict), signal = result.signal,
                            "session interpreter exited during a call"
                        );
                        resp.verdict = result.verdict;
                        resp.result = Some(result);
                        notes.push("the interpreter exited during the call and restarts on the next one (files in /work stay, variables are gone)");
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "session interpreter failed");
                        resp.verdict = pb::Verdict::SandboxError as i32;
                        resp.result = Some(verdict::sandbox_error_phase());
                        resp.message = scrub_host_paths(&e.client_message());
                    }
                }
            }
        }
        resp.state_reset = reset;
        for n in notes {
            let sep = if resp.message.is_empty() { "" } else { "; " };
            resp.message = format!("{}{sep}{n}", resp.message);
        }
        Ok(resp)
    }

    /// Kills an interpreter and waits until the host sees none of the slot's processes.
    pub(super) async fn kill_repl(&self, s: &Session, st: &mut State, r: Repl) {
        if let Some(Ok(o)) = r.kill().await {
            st.cpu_used = st.cpu_at_repl_start + o.cpu;
        }
        self.wait_gone(s).await;
    }
}
