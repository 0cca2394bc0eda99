//! Spare interpreters (`--session-spares`): Python drivers started ahead of demand, each in
//! a free seat with a /work of its own, so that a new session's first call finds one ready
//! instead of waiting for an interpreter to start (about 70 ms of CPU).
//!
//! A spare is handed to a create that brings no files and asks for the default limits: it
//! becomes that session's interpreter, in its seat, as if the session had started it. A
//! spare never ran anyone's code. Spares are started one at a time, at batch priority, only
//! while the sessions leave room in the memory budget, and never while the executor drains.
//! One older than [`MAX_AGE`] is ended and replaced: its run's wall-time backstop counts
//! from its start, not from the session's.

use super::files::make_work;
use super::repl::{self, Repl};
use super::seats::{KILL_WAIT, SeatGuard};
use super::{SessionManager, procs};
use crate::admission::{Admit, Ticket};
use crate::limits::Limits;
use crate::sandbox::WorkDir;
use crate::tenants::Priority;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long a spare waits for a session before it is replaced.
pub const MAX_AGE: Duration = Duration::from_secs(60);

/// A started, ready interpreter no session holds yet.
pub(super) struct Spare {
    pub seat: SeatGuard,
    pub work: Arc<WorkDir>,
    pub repl: Repl,
    /// The /work reserve fit when it was made.
    pub reserve_ok: bool,
    /// The limits it was started for: the sessions' defaults.
    pub limits: Limits,
    born: Instant,
}

/// The spares of one executor.
#[derive(Default)]
pub(super) struct Spares {
    want: usize,
    ready: Mutex<Vec<Spare>>,
    /// Wakes the keeper when a spare was taken.
    taken: Arc<tokio::sync::Notify>,
    /// Set at shutdown: no more are started.
    stopped: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Spares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spares")
            .field("want", &self.want)
            .field("ready", &self.count())
            .finish()
    }
}

impl Spares {
    pub fn new(want: usize) -> Self {
        Spares {
            want,
            ..Default::default()
        }
    }

    /// How many are ready now.
    pub fn count(&self) -> usize {
        self.ready.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// The newest ready spare started for `limits`, if one is young enough.
    pub fn take(&self, limits: &Limits) -> Option<Spare> {
        let spare = {
            let mut ready = self.ready.lock().ok()?;
            let i = ready
                .iter()
                .rposition(|s| s.limits == *limits && s.born.elapsed() < MAX_AGE && s.repl.alive())?;
            ready.remove(i)
        };
        self.taken.notify_one();
        Some(spare)
    }

    /// Stops starting spares and hands back the ready ones (to be ended).
    fn stop(&self) -> Vec<Spare> {
        self.stopped.store(true, std::sync::atomic::Ordering::Relaxed);
        self.taken.notify_one();
        self.ready
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }

    fn stopped(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The ready spares too old to hand out, or whose interpreter ended.
    fn stale(&self) -> Vec<Spare> {
        let Ok(mut ready) = self.ready.lock() else {
            return vec![];
        };
        let (keep, stale) = std::mem::take(&mut *ready)
            .into_iter()
            .partition(|s| s.born.elapsed() < MAX_AGE && s.repl.alive());
        *ready = keep;
        stale
    }
}

impl SessionManager {
    /// Ends every spare and starts no more (executor shutdown).
    pub(super) async fn stop_spares(&self) {
        let all = self.spares.stop();
        self.retire(all).await;
    }

    /// Ends `spares` and frees their seats once their processes are gone.
    async fn retire(&self, spares: Vec<Spare>) {
        if spares.is_empty() {
            return;
        }
        let base = self.policy().uid_base;
        let mut held = Vec::with_capacity(spares.len());
        for s in spares {
            s.repl.kill().await;
            held.push(s.seat);
        }
        let seats: Vec<(usize, u32)> = held.iter().map(|g| (g.index, base + g.index as u32)).collect();
        let left = procs::wait_gone(&self.engine, &seats, KILL_WAIT).await;
        for g in held {
            if left.contains(&(base + g.index as u32)) {
                tracing::error!(
                    seat = g.index,
                    "a spare interpreter's processes survived; its seat stays out of use"
                );
                std::mem::forget(g);
            }
        }
    }

    /// Starts one spare and waits until it is ready; None when there is no room for one.
    async fn start_spare(&self, limits: Limits) -> Option<Spare> {
        let engine = &self.engine;
        let seat = self.seats.take()?;
        let (work, reserve_ok) = match make_work(engine, seat.index, Vec::new()).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "could not make a spare interpreter's /work");
                return None;
            }
        };
        // Batch priority: a spare is started ahead of need, never ahead of work.
        let ticket = Ticket {
            priority: Priority::Batch,
            ..Ticket::default()
        };
        let _slot = engine.acquire_as(&ticket, None, Admit::Continuing).await.ok()?;
        let run = Limits {
            // The sandbox's backstop (the key's wall is the session's lifetime): the reaper
            // ends the session at its lifetime, which starts at create, up to MAX_AGE after this.
            wall: limits.wall + MAX_AGE + Duration::from_secs(5),
            ..limits
        };
        let repl = match Repl::start(engine, seat.index, &work, run, 1, 1, false, self.driver_zygote.clone()) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "could not start a spare interpreter");
                return None;
            }
        };
        tokio::select! {
            _ = repl::until_ready(&work, 1) => {}
            _ = repl.ended() => {}
        }
        let spare = Spare {
            seat,
            work,
            repl,
            reserve_ok,
            limits,
            born: Instant::now(),
        };
        if spare.repl.alive() && repl::is_ready(&spare.work, 1).await {
            return Some(spare);
        }
        self.retire(vec![spare]).await;
        None
    }

    /// True while another spare fits: wanted, a seat free, room in the memory budget.
    fn room_for_spare(&self) -> bool {
        let spares = self.spares.count();
        let held = self.memory_held() + (spares as u64 + 1) * self.policy().idle_bytes;
        spares < self.spares.want
            && held <= self.policy().memory_budget
            && !self.spares.stopped()
            && !self.engine.admission().is_draining()
    }
}

/// Keeps `--session-spares` spares ready while the manager lives.
pub(super) async fn keeper(m: Weak<SessionManager>) {
    loop {
        let Some(mgr) = m.upgrade() else { return };
        if mgr.spares.want == 0 || mgr.spares.stopped() {
            return;
        }
        let stale = mgr.spares.stale();
        mgr.retire(stale).await;
        while mgr.room_for_spare() {
            let Some(limits) = mgr.default_spare_key() else { break };
            match mgr.start_spare(limits).await {
                Some(s) if !mgr.spares.stopped() => {
                    if let Ok(mut r) = mgr.spares.ready.lock() {
                        r.push(s);
                    }
                }
                Some(s) => mgr.retire(vec![s]).await,
                None => break,
            }
        }
        let taken = mgr.spares.taken.clone();
        drop(mgr);
        // Woken when one is taken (a take while this looked left a permit), else a look
        // every second (age, budget, drain).
        let _ = tokio::time::timeout(Duration::from_secs(1), taken.notified()).await;
    }
}
