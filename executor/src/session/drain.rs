//! Sessions that outlive their executor (docs/sessions.md, "Surviving the pod"): on SIGTERM
//! every live session is paused into the store, its record marked as paused by a drain; its
//! next call on any executor sharing the store resumes it there ([`SessionManager::resume_implicit`]),
//! whatever its `auto_resume`. Of two executors resuming one session at once, the store's
//! claim lets exactly one win; the other answers UNAVAILABLE, and the retry finds it.

use super::record::{Kind, Session};
use super::{SessionError, SessionManager};
use crate::call::Call;
use sandpool_proto::v1 as pb;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::time::Instant;

/// The mode a pause the session did not ask for (a drain, an idle pause) takes: the most
/// complete one its kind supports, so that it goes on as it was (a Python interpreter's
/// names kept; a bash session has files only).
pub(super) fn keep_most(kind: Kind) -> pb::PauseMode {
    match kind {
        Kind::Python => pb::PauseMode::Full,
        Kind::Bash => pb::PauseMode::Filesystem,
    }
}

/// What a drain did with the live sessions.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DrainReport {
    /// Paused into the store: resumed by their next call on any executor.
    pub paused: usize,
    /// Their pause failed (the store refused, the archive was too large): lost at exit.
    pub failed: usize,
    /// Not paused by the deadline: lost at exit.
    pub timed_out: usize,
}

/// The error a call on a session a drain paused gets on the executor that is going away:
/// retryable, so the client (or gateway) sends it to another executor, which resumes it.
pub(super) fn drained_here() -> SessionError {
    SessionError::Retry(
        "this executor is shutting down and paused the session into the store: retry, and \
         another executor resumes it"
            .into(),
    )
}

/// The error a call on a session that is not live here gets while this executor drains:
/// retryable (another executor may hold it, or resume it from the store), where a staying
/// executor would answer NOT_FOUND.
pub(super) fn not_here_while_draining() -> SessionError {
    SessionError::Retry(
        "this executor is shutting down and does not hold the session: retry, and another \
         executor serves or resumes it"
            .into(),
    )
}

/// The response metadata naming the executor that served a session call: its name (a pod's,
/// what session ids end with), so a gateway follows a session resumed away from the executor
/// its id names.
pub const EXECUTOR_HEADER: &str = "x-sandpool-executor";
/// The response metadata saying where a session's later calls go ("host:port"): a client
/// that calls executors directly follows the session there.
pub const EXECUTOR_ADDRESS_HEADER: &str = "x-sandpool-executor-address";

impl SessionManager {
    /// This executor's name and the address it advertises, for [`EXECUTOR_HEADER`] and
    /// [`EXECUTOR_ADDRESS_HEADER`].
    pub fn served_by(&self) -> (&str, &str) {
        (self.engine.name(), &self.advertise)
    }

    /// Pauses every live session at once (each takes a run slot, so as many at a time as
    /// there are slots), each by `deadline`; counts what became of them in
    /// `sandpool_session_drain_total{outcome}`. Call once admission is draining: no new
    /// session starts, and calls in progress finish first (a pause waits for its session's
    /// call).
    pub async fn pause_for_drain(&self, deadline: Instant) -> DrainReport {
        if !self.has_store() {
            return DrainReport::default();
        }
        let live: Vec<Arc<Session>> = self
            .sessions
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        if live.is_empty() {
            return DrainReport::default();
        }
        tracing::info!(sessions = live.len(), "draining: pausing every session into the store");
        let metrics = self.engine.metrics().clone();
        let outcomes = futures::future::join_all(live.iter().map(|s| {
            let metrics = metrics.clone();
            async move {
                // One an idle auto-pause is pausing now finishes that pause instead.
                let ours = !s.pausing.swap(true, Ordering::Relaxed);
                let outcome = match tokio::time::timeout_at(deadline, async {
                    match ours {
                        true => self.pause_live(s, keep_most(s.kind)).await.map(|p| p.stored_bytes),
                        false => {
                            let mut closed = s.closed.subscribe();
                            let _ = closed.wait_for(|c| *c).await;
                            Ok(0)
                        }
                    }
                })
                .await
                {
                    Ok(Ok(bytes)) => {
                        tracing::info!(session = %&s.id[..8], bytes, "session paused for the drain");
                        "paused"
                    }
                    Ok(Err(e)) => {
                        tracing::error!(session = %&s.id[..8], error = %e, "pausing a session for the drain failed: it is lost");
                        "failed"
                    }
                    Err(_) => {
                        tracing::error!(session = %&s.id[..8], "the drain timeout passed before the session was paused: it is lost");
                        "timed_out"
                    }
                };
                metrics.session_drained(outcome);
                outcome
            }
        }))
        .await;
        let count = |o: &str| outcomes.iter().filter(|x| **x == o).count();
        let report = DrainReport {
            paused: count("paused"),
            failed: count("failed"),
            timed_out: count("timed_out"),
        };
        tracing::info!(?report, "draining: sessions paused");
        report
    }

    /// Makes `id` live here when it is not, but the store holds it paused by a drain (or with
    /// `auto_resume`) for `call`'s caller: resumed from the store under the caller's tenant,
    /// its owner checked as ResumeSession checks it. Anything else is left for the call to
    /// answer (NOT_FOUND, `session paused`).
    pub async fn resume_implicit(&self, id: &str, call: &Call) -> Result<(), SessionError> {
        if id.is_empty() || self.lookup(id).is_ok() || !self.has_store() {
            return Ok(());
        }
        let auth = call.caller.as_bytes();
        // Paused here: the call itself resumes it or says why not.
        if self.paused_here(id) {
            return Ok(());
        }
        // An executor going away resumes nothing: the call is refused unrun, so the gateway
        // (or client) sends it to one that stays.
        if self.engine.admission().is_draining() {
            return Err(not_here_while_draining());
        }
        let ticket = self.engine.ticket(call, 0, "priority")?;
        if !self.resumes_implicitly(id, &ticket).await? {
            return Ok(());
        }
        let _in_progress = self.engine.admission().request();
        self.resume_as(id, auth, &ticket).await.map(drop)
    }
}
