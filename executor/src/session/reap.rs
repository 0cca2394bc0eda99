//! The end of sessions: at close, past their idle or absolute timeout or their tenant's
//! removal (the reaper), and at the executor's shutdown; a seat is freed only once the host
//! sees none of its processes.

use super::record::Session;
use super::seats::KILL_WAIT;
use super::{SessionError, SessionManager, procs};
use sandpool_proto::v1 as pb;
use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

impl SessionManager {
    /// Ends a session; returns how many calls it served.
    pub async fn close(
        &self,
        req: pb::CloseSessionRequest,
        auth: &[u8],
    ) -> Result<pb::CloseSessionResponse, SessionError> {
        let _in_progress = self.engine.admission().request();
        let s = self.find(&req.session_id, auth)?;
        let calls = self.end(&s, "closed").await;
        Ok(pb::CloseSessionResponse { calls })
    }

    /// Ends a session for `call`'s caller, a paused one too (its archive deleted from the
    /// store); returns how many calls it served.
    pub async fn close_as(
        &self,
        req: pb::CloseSessionRequest,
        call: crate::call::Call,
    ) -> Result<pb::CloseSessionResponse, SessionError> {
        let auth = call.caller.as_bytes().to_vec();
        match self.close(req.clone(), &auth).await {
            Err(SessionError::NotFound | SessionError::Paused) if !req.session_id.is_empty() => {
                let ticket = self.engine.ticket(&call, 0, "priority")?;
                let _in_progress = self.engine.admission().request();
                // Not while this executor resumes it: a resume that finished meanwhile left
                // it live, so it is closed as a live one (else it would live on after an OK).
                let _no_resume = self.resuming.lock(&req.session_id).await;
                if let Ok(s) = self.find(&req.session_id, &auth) {
                    let calls = self.end(&s, "closed").await;
                    return Ok(pb::CloseSessionResponse { calls });
                }
                let calls = self.close_paused(&req.session_id, &auth, &ticket).await?;
                Ok(pb::CloseSessionResponse { calls })
            }
            other => other,
        }
    }

    /// Ends one session (see [`Self::end_all`]); returns how many calls it served.
    pub(super) async fn end(&self, s: &Arc<Session>, why: &'static str) -> u32 {
        let one = [(s.clone(), why)];
        self.end_all(&one).await.first().copied().unwrap_or(0)
    }

    /// Removes the sessions of `all` (each with why it ends), stops what runs in them, waits
    /// until the host sees none of their processes, then frees their seats; answers how many
    /// calls each served. All at once: one `/proc` scan a round covers every uid, so hundreds
    /// of sessions expiring together cost what one does. A seat whose processes outlived
    /// [`KILL_WAIT`] is never handed on (logged).
    pub(super) async fn end_all(&self, all: &[(Arc<Session>, &'static str)]) -> Vec<u32> {
        let removed: Vec<bool> = match self.sessions.lock() {
            Ok(mut m) => {
                let removed = all.iter().map(|(s, _)| m.remove(&s.id).is_some()).collect();
                let tenants: BTreeSet<&str> = all.iter().map(|(s, _)| &*s.tenant).collect();
                tenants.into_iter().for_each(|t| self.publish(&m, t));
                removed
            }
            Err(_) => vec![false; all.len()],
        };
        for (s, _) in all {
            s.closed.send_replace(true);
        }
        // A call in progress sees `closed` and drops its run, then lets go of the state.
        let mut states = futures::future::join_all(all.iter().map(|(s, _)| async move {
            let mut st = s.state.lock().await;
            if let Some(r) = st.repl.take() {
                let _ = r.kill().await;
            }
            st
        }))
        .await;
        let base = self.policy().uid_base;
        // Everything a session runs starts under its state's lock, after its /work is made:
        // with every state held and `closed` sent, a session without /work never ran a
        // process, and its seat is free as it is (most of a burst of create-and-close).
        let seats: Vec<(usize, u32)> = all
            .iter()
            .filter(|(s, _)| s.work.initialized())
            .map(|(s, _)| (s.seat, s.uid(base)))
            .collect();
        let left = procs::wait_gone(&self.engine, &seats, KILL_WAIT).await;
        for (((s, why), st), removed) in all.iter().zip(states.iter_mut()).zip(removed) {
            if left.contains(&s.uid(base)) {
                // Never hand on a seat that still runs someone's processes.
                tracing::error!(session = %&s.id[..8], seat = s.seat, "session processes survived; its seat stays out of use");
                std::mem::forget(st.seat.take());
            } else {
                st.seat = None;
            }
            if removed {
                tracing::info!(session = %&s.id[..8], calls = st.calls, why, "session ended");
            }
        }
        states.iter().map(|st| st.calls).collect()
    }

    /// Ends every session and spare interpreter (executor shutdown).
    pub async fn close_all(&self) {
        self.stop_spares().await;
        let all: Vec<_> = self
            .sessions
            .lock()
            .map(|m| m.values().map(|s| (s.clone(), "executor shutting down")).collect())
            .unwrap_or_default();
        self.end_all(&all).await;
    }

    /// Ends, from now on, each session whose tenant `tenants` no longer has (removed,
    /// or renamed: a tenant is its identity, [`crate::tenants::Tenant::identity`]) within a
    /// reaper round of the table's change: its access token and its id reach nothing after.
    pub fn follow_tenants(&self, tenants: Arc<crate::tenants::Tenants>) {
        let _ = self.tenants.set(tenants);
    }

    /// Ends the sessions past their idle or absolute timeout, and those of removed tenants.
    pub(super) async fn reap(&self) {
        let table = self.tenants.get().filter(|t| !t.is_open()).map(|t| t.table());
        let gone = |s: &Session| {
            table
                .as_ref()
                .is_some_and(|t| s.ticket.tenant.authenticated && !t.has_identity(s.ticket.tenant.identity))
        };
        let expired: Vec<(Arc<Session>, &'static str)> = self
            .sessions
            .lock()
            .map(|m| {
                m.values()
                    .filter_map(|s| {
                        if gone(s) {
                            Some((s.clone(), "its tenant left the tenants table"))
                        } else if s.life_left().is_zero() {
                            // One that asked to be paused at its end is [`Self::pause_ended`]'s.
                            (!self.pauses_at_end(s)).then(|| (s.clone(), "lifetime reached"))
                        } else if s.idle_for() >= s.totals.idle && s.state.try_lock().is_ok() {
                            // A call in progress is not idleness.
                            Some((s.clone(), "idle timeout"))
                        } else {
                            None
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !expired.is_empty() {
            self.end_all(&expired).await;
        }
    }
}

/// How often the reaper measures the sessions' memory (one cgroup read per session).
pub(super) const MEASURE_EVERY: u32 = 8;

pub(super) async fn reaper(m: Weak<SessionManager>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for round in 0u32.. {
        tick.tick().await;
        let Some(m) = m.upgrade() else { return };
        m.pause_ended();
        m.reap().await;
        m.auto_pause();
        if round % MEASURE_EVERY == 0 {
            m.measure().await;
        }
        m.sweep_store_when_due();
    }
}
