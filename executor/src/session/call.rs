//! A session's calls: checked against its totals, queued for a run slot, its memory share
//! grown for the call, then run as bash ([`super::shell`]) or by its Python interpreter
//! ([`super::python`]).

use super::record::{Kind, Session, State};
use super::{SessionError, SessionManager, files::refill_reserve, policy, shell};
use crate::admission::Admit;
use crate::error::ExecError;
use crate::limits::Limits;
use crate::task::blocking;
use sandpool_proto::v1 as pb;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The most background processes (E2B's commands) a session runs at once; a tenant's are
/// bounded by this times its `max_sessions` (docs/tenants.md, "Shared caps").
pub const MAX_BACKGROUND: usize = 16;

/// What a session call asks for.
pub(super) enum Input {
    Code(String),
    Command(String),
    /// A request for the Python driver as given ([`SessionManager::op`], [`SessionManager::run_live`]).
    Request(serde_json::Value),
}

impl Input {
    fn len(&self) -> usize {
        match self {
            Input::Code(s) | Input::Command(s) => s.len(),
            Input::Request(v) => v.to_string().len(),
        }
    }

    fn field(&self) -> &'static str {
        match self {
            Input::Code(_) => "code",
            Input::Command(_) => "command",
            Input::Request(_) => "op",
        }
    }
}

impl SessionManager {
    /// Runs code or a command in a session.
    pub async fn run(
        &self,
        req: pb::RunInSessionRequest,
        auth: &[u8],
    ) -> Result<pb::RunInSessionResponse, SessionError> {
        let input = match req.input {
            Some(pb::run_in_session_request::Input::Code(c)) => Input::Code(c),
            Some(pb::run_in_session_request::Input::Command(c)) => Input::Command(c),
            None => return Err(ExecError::invalid("input", "set code or command").into()),
        };
        self.call(&req.session_id, auth, input, req.stdin, req.limits, &req.request_id)
            .await
    }

    /// An operation on a Python session's background processes (E2B's commands; the
    /// driver's `_op`): `op` is `{"kind": "spawn"|"procs"|"signal"|"input"|"close_stdin", ...}`.
    /// Answers the driver's JSON, which has `error` and `message` when the operation failed.
    /// A `spawn` is refused past [`MAX_BACKGROUND`] processes running in the session.
    pub async fn op(
        &self,
        id: &str,
        auth: &[u8],
        mut op: serde_json::Value,
    ) -> Result<serde_json::Value, SessionError> {
        if op.get("kind").and_then(|k| k.as_str()) == Some("spawn") {
            op["max_running"] = MAX_BACKGROUND.into();
        }
        let r = self.call(id, auth, Input::Request(op), Vec::new(), None, "").await?;
        if r.verdict != pb::Verdict::Ok as i32 {
            return Err(ExecError::Internal(format!("the session's interpreter did not do it: {}", r.message)).into());
        }
        serde_json::from_str(&r.display)
            .map_err(|e| ExecError::Internal(format!("the session's interpreter answered oddly: {e}")).into())
    }

    /// Runs a cell in a Python session whose output the driver also copies, as it is
    /// written, to `.sandpool/live/<live>/{stdout,stderr}` ([`Self::state_file`] reads it
    /// while the call runs: E2B's streamed `run_code`).
    pub async fn run_live(
        &self,
        id: &str,
        auth: &[u8],
        code: String,
        live: &str,
    ) -> Result<pb::RunInSessionResponse, SessionError> {
        let req = serde_json::json!({"kind": "code", "source": code, "live": live});
        self.call(id, auth, Input::Request(req), Vec::new(), None, "").await
    }

    pub(super) async fn call(
        &self,
        id: &str,
        auth: &[u8],
        input: Input,
        stdin: Vec<u8>,
        req_limits: Option<pb::Limits>,
        request_id: &str,
    ) -> Result<pb::RunInSessionResponse, SessionError> {
        let _in_progress = self.engine.admission().request();
        let mut s = match self.find(id, auth) {
            // A session created with auto_resume is resumed by its next call.
            Err(SessionError::Paused) => match self.auto_resumes(id, auth) {
                Some(ticket) => self.resume_as(id, auth, &ticket).await?,
                None => return Err(SessionError::Paused),
            },
            other => other?,
        };
        if input.len() as u64 > s.totals.disk {
            return Err(ExecError::invalid(input.field(), "longer than the session's /work can hold").into());
        }
        let mut resumed = false;
        let (mut st, mut closed) = loop {
            let mut closed = s.closed.subscribe();
            let st = tokio::select! {
                st = s.state.lock() => Some(st),
                _ = closed.wait_for(|c| *c) => None,
            };
            if let Some(st) = st.filter(|_| !*s.closed.borrow()) {
                break (st, closed);
            }
            // Paused (auto-pause) while this call waited for it: an auto_resume session is
            // resumed, once; nothing of the call has run yet.
            match self.not_live(id, auth) {
                SessionError::Paused if !resumed => match self.auto_resumes(id, auth) {
                    Some(ticket) => {
                        s = self.resume_as(id, auth, &ticket).await?;
                        resumed = true;
                    }
                    None => return Err(SessionError::Paused),
                },
                e => return Err(e),
            }
        };
        if st.calls >= s.totals.calls {
            return Err(SessionError::Exhausted(format!(
                "the session has used its {} calls (session_limits.max_calls)",
                s.totals.calls
            )));
        }
        let cpu_left = s.totals.cpu.saturating_sub(st.cpu_used);
        if cpu_left.is_zero() {
            return Err(SessionError::Exhausted(
                "the session has used its CPU time (session_limits.cpu_time_ms)".into(),
            ));
        }
        let limits = policy::call_limits(
            self.engine.policy(),
            &s.call_limits,
            req_limits.as_ref(),
            &s.totals,
            cpu_left,
            s.life_left(),
        )?;
        st.calls += 1;
        s.touch();
        let t = Instant::now();
        if let Input::Request(op) = &input
            && op.get("kind").and_then(|k| k.as_str()) == Some("spawn")
        {
            s.background.store(true, Ordering::Relaxed);
        }
        let run = async {
            // A forked interpreter starts before the call's slot is taken (see StartGate).
            let ensured = match (s.kind, self.forked_start_gate()) {
                (Kind::Python, Some(gate)) => Some(self.ensure_repl(&s, &mut st, Some(gate)).await?),
                _ => None,
            };
            // A run slot for this call only, queued like any request's (a session admitted
            // before a drain began still gets its calls run).
            let _permit = self.engine.acquire_as(&s.ticket, None, Admit::Continuing).await?;
            // Its memory limit rises into the room the other sessions leave in the ceiling.
            self.share(&s, crate::sandbox::SeatShare::Grow(s.totals.memory)).await;
            match s.kind {
                Kind::Bash => match input {
                    Input::Code(source) | Input::Command(source) => {
                        self.run_shell(&s, &mut st, &source, stdin, limits).await
                    }
                    Input::Request(_) => Err(ExecError::invalid(
                        "session_id",
                        "background processes need a Python session (this one is bash)",
                    )
                    .into()),
                },
                Kind::Python => self.run_python(&s, &mut st, input, stdin, limits, ensured).await,
            }
        };
        let resp = tokio::select! {
            r = run => r,
            // Closed or expired mid-call: the run is dropped (killed) here.
            _ = closed.wait_for(|c| *c) => return Err(SessionError::NotFound),
        };
        self.share(&s, super::caps::idle_share(&s)).await;
        st.reserve_low |= s.reserve_missing.swap(false, Ordering::Relaxed);
        if st.reserve_low
            && let Some(w) = s.work.get().cloned()
        {
            st.reserve_low = !blocking(move || refill_reserve(&w)).await.unwrap_or(false);
        }
        // The reaper may have read the session mid-call; what it holds after is read here.
        if s.memory.load(Ordering::Relaxed) > self.policy.idle_bytes {
            self.remeasure(vec![s.clone()]).await;
        }
        let mut resp = resp?;
        s.touch();
        resp.calls_left = s.totals.calls.saturating_sub(st.calls);
        resp.executor = Some(self.engine.info(""));
        tracing::debug!(session = %&s.id[..8], elapsed_ms = t.elapsed().as_millis() as u64, request_id = %request_id, verdict = resp.verdict, "session call");
        Ok(resp)
    }

    pub(super) async fn run_shell(
        &self,
        s: &Session,
        st: &mut State,
        source: &str,
        stdin: Vec<u8>,
        limits: Limits,
    ) -> Result<pb::RunInSessionResponse, SessionError> {
        let work = s.work(&self.engine).await?;
        let r = shell::call(&self.engine, s.seat, &work, source, stdin, limits).await?;
        st.reserve_low |= r.reserve_used;
        st.cpu_used += Duration::from_micros(r.result.cpu_time_us);
        Ok(pb::RunInSessionResponse {
            verdict: r.verdict as i32,
            result: Some(r.result),
            cwd: r.cwd,
            message: r.message,
            ..Default::default()
        })
    }
}
