//! What bounds the sessions an executor holds: its cap and its tenants' (`max_sessions`),
//! counted with the creates in progress, and the memory budget, measured from the seats'
//! cgroups.

use super::SessionManager;
use super::record::Session;
use crate::task::blocking;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// A create in progress, counted against the caps (the executor's, its tenant's) until dropped.
pub(super) struct Creating<'a> {
    pub(super) counts: &'a Mutex<HashMap<Arc<str>, usize>>,
    pub(super) tenant: Arc<str>,
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        if let Ok(mut c) = self.counts.lock()
            && let Some(n) = c.get_mut(&self.tenant)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.remove(&self.tenant);
            }
        }
    }
}

impl SessionManager {
    /// Memory the open sessions hold, as last measured (each at least the idle bytes).
    pub fn memory_held(&self) -> u64 {
        self.sessions
            .lock()
            .map(|m| m.values().map(|s| s.memory.load(Ordering::Relaxed)).sum())
            .unwrap_or(0)
    }

    /// Measures each session's memory from its seat's cgroup (off the runtime's threads).
    pub(super) async fn measure(&self) {
        let all: Vec<Arc<Session>> = self
            .sessions
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        // No session: nothing to read, and no trip to the blocking pool every 2 s (which kept
        // an idle executor's blocking threads from ever retiring: the soak's leak check saw one).
        let held = match all.is_empty() {
            true => 0,
            false => self.remeasure(all).await,
        };
        self.engine
            .metrics()
            .session_memory
            .set(i64::try_from(held).unwrap_or(i64::MAX));
    }

    /// Reads `these` sessions' memory now (off the runtime's threads); answers their sum.
    pub(super) async fn remeasure(&self, these: Vec<Arc<Session>>) -> u64 {
        let (engine, floor) = (self.engine.clone(), self.policy.idle_bytes);
        blocking(move || {
            these
                .iter()
                .map(|s| {
                    let used = engine.sandbox().memory_in_use(s.seat).unwrap_or(0).max(floor);
                    s.memory.store(used, Ordering::Relaxed);
                    used
                })
                .sum::<u64>()
        })
        .await
        .unwrap_or(0)
    }

    /// Reads again the sessions last measured above the idle bytes: a reading taken during
    /// a call (one that filled its memory limit, say) outlives the call by up to the
    /// reaper's period, and must not refuse a create on its own.
    pub(super) async fn remeasure_high(&self) {
        let floor = self.policy.idle_bytes;
        let high: Vec<Arc<Session>> = self
            .sessions
            .lock()
            .map(|m| {
                m.values()
                    .filter(|s| s.memory.load(Ordering::Relaxed) > floor)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if !high.is_empty() {
            self.remeasure(high).await;
        }
    }

    /// Whether one more session, beside `creating` being created, would not fit the memory
    /// budget, as last measured.
    pub(super) fn over_memory_budget(&self, creating: usize) -> bool {
        let wanted = (creating as u64 + 1).saturating_mul(self.policy.idle_bytes);
        self.memory_held().saturating_add(wanted) > self.policy.memory_budget
    }

    /// Moves session `s`'s share of the sessions' memory ceiling (off the runtime's threads:
    /// it writes its cgroup's limit).
    pub(super) async fn share(&self, s: &Session, share: crate::sandbox::SeatShare) {
        let (engine, seat) = (self.engine.clone(), s.seat);
        let _ = blocking(move || engine.sandbox().seat_share(seat, share)).await;
    }

    /// Sessions alive now.
    pub fn count(&self) -> usize {
        self.sessions.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// Sessions of `tenant` alive now.
    pub(super) fn count_of(&self, tenant: &str) -> usize {
        self.sessions
            .lock()
            .map(|m| m.values().filter(|s| *s.tenant == *tenant).count())
            .unwrap_or(0)
    }

    /// The executor's cap on sessions (`--max-sessions`): a tenant's default too.
    pub fn max_sessions(&self) -> usize {
        self.policy.max_sessions
    }
}

/// The share a session goes back to between its calls (after a call, or an archive of its
/// /work): what it holds, so that idle it cannot take room another session's call may need;
/// unless it runs background processes, which go on growing between calls: then its grown
/// share, on loan (another session's start or call takes it back when short).
pub(super) fn idle_share(s: &super::record::Session) -> crate::sandbox::SeatShare {
    if s.background.load(Ordering::Relaxed) {
        crate::sandbox::SeatShare::Lend(s.totals.memory)
    } else {
        crate::sandbox::SeatShare::Hold
    }
}
