//! A Python session's interpreter start-up: in the background soon after create ([`boot`]),
//! or by the call that finds none alive ([`SessionManager::ensure_repl`]), through a gate
//! ([`StartGate`]: a run slot for a cold start, a start permit for a forked one).

use super::record::{Session, State};
use super::repl::{self, Repl};
use super::{SessionError, SessionManager};
use crate::admission::{Admit, Ticket};
use crate::engine::Engine;
use crate::error::ExecError;
use crate::limits::Limits;
use crate::task::blocking;
use std::sync::Arc;
use std::time::Duration;

/// What an interpreter start holds while it starts. A cold start is about 70 ms of CPU (the
/// interpreter's own start and the driver's imports): it takes a run slot, queued like any
/// request. A start forked from the seats' zygote costs a few ms of CPU and waits mostly on
/// the kernel (joining the seat's cgroup waits for an RCU grace period): it takes one of
/// [`FORKED_STARTS_PER_SLOT`] × slots start permits instead, so a burst of sessions starts
/// beside the run slots' work instead of queueing behind it, and a call then takes a run
/// slot only while it runs.
pub(super) enum StartGate {
    Slot(Ticket),
    Forked(Arc<tokio::sync::Semaphore>),
}

/// Forked interpreter starts in progress at once, per run slot.
pub(super) const FORKED_STARTS_PER_SLOT: usize = 4;

/// Held while an interpreter starts (see [`StartGate`]): one of the two.
pub(super) struct StartHold {
    _slot: Option<crate::admission::SlotGuard>,
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl StartGate {
    pub(super) async fn enter(&self, engine: &Engine) -> Result<StartHold, ExecError> {
        Ok(match self {
            StartGate::Slot(ticket) => StartHold {
                _slot: Some(engine.acquire_as(ticket, None, Admit::Continuing).await?),
                _permit: None,
            },
            StartGate::Forked(permits) => StartHold {
                _slot: None,
                _permit: Some(
                    permits
                        .clone()
                        .acquire_owned()
                        .await
                        .map_err(|_| ExecError::Internal("interpreter starts: the gate was closed".into()))?,
                ),
            },
        })
    }
}

/// What [`SessionManager::ensure_repl`] did.
#[derive(Default)]
pub(super) struct Ensured {
    /// The interpreter was replaced: the session's variables are gone.
    pub(super) reset: bool,
    /// Why, for the call's `message`.
    pub(super) notes: Vec<&'static str>,
    /// The interpreter had died since the last call: why, for [`SessionError::Reset`].
    pub(super) died: Option<String>,
}

impl SessionManager {
    /// Where a call's interpreter starts: before the call takes its run slot when it forks
    /// (see [`StartGate`]); else in the call's slot (None).
    pub(super) fn forked_start_gate(&self) -> Option<StartGate> {
        self.driver_zygote
            .as_ref()
            .map(|_| StartGate::Forked(self.starts.clone()))
    }

    /// Makes sure session `s` has a live interpreter for its next call: kills one a caller
    /// abandoned mid-call or that has died, and starts a new one. With a `gate`, the start
    /// goes through it and this waits until the interpreter is ready (or has ended); without,
    /// the caller holds a run slot. Answers whether the state was reset, and why.
    pub(super) async fn ensure_repl(
        &self,
        s: &Session,
        st: &mut State,
        gate: Option<StartGate>,
    ) -> Result<Ensured, SessionError> {
        let mut done = Ensured::default();
        // An interpreter that was ready and whose seat holds no process any more is dead,
        // though its run may not have been seen to end yet (a kill between calls).
        let gone = match st.repl.as_ref().filter(|r| r.alive() && r.is_ready()) {
            Some(_) => {
                let (engine, seat) = (self.engine.clone(), s.seat);
                blocking(move || engine.sandbox().seat_busy(seat) == Some(false)).await?
            }
            None => false,
        };
        if !st.abandoned && !gone && st.repl.as_ref().is_some_and(Repl::alive) {
            return Ok(done);
        }
        let _hold = match &gate {
            Some(g) => Some(g.enter(&self.engine).await?),
            None => None,
        };
        if st.abandoned {
            // The last call's caller left before its reply: the interpreter may still be in it.
            if let Some(r) = st.repl.take() {
                self.kill_repl(s, st, r).await;
            }
            st.abandoned = false;
            done.reset = true;
            done.notes
                .push("the interpreter was restarted: an earlier call was abandoned by its caller");
        }
        if gone || !st.repl.as_ref().is_some_and(Repl::alive) {
            if let Some(r) = st.repl.take() {
                // It died between calls: the caller is told before anything runs on a state
                // it does not have (a NameError would be the first sign otherwise).
                let outcome = r.kill().await;
                if let Some(Ok(o)) = &outcome {
                    st.cpu_used = st.cpu_at_repl_start + o.cpu;
                }
                self.wait_gone(s).await;
                done.reset = true;
                done.died = Some(match outcome {
                    Some(Ok(o)) if o.oom_killed => "the session's interpreter was killed between calls at its memory limit (the sessions' memory ceiling)",
                    Some(Ok(o)) if o.signal != 0 => "the session's interpreter was killed between calls",
                    _ => "the session's interpreter exited between calls",
                }.to_owned() + "; it has been restarted: variables are gone, files in /work remain. The code was not run: run it again (with its setup)");
            }
            start_repl(&self.engine, s, st, self.driver_zygote.clone()).await?;
        }
        if gate.is_some()
            && let (Some(work), Some(repl)) = (s.work.get(), st.repl.as_ref())
        {
            tokio::select! {
                _ = repl::until_ready(work, st.epoch) => {}
                _ = repl.ended() => {}
            }
        }
        Ok(done)
    }
}

/// Starts the interpreter of session `s` (a call of it holds a run slot meanwhile).
pub(super) async fn start_repl(
    engine: &Arc<Engine>,
    s: &Session,
    st: &mut State,
    warm: Option<Arc<crate::sandbox::ZygoteConfig>>,
) -> Result<(), SessionError> {
    let work = s.work(engine).await?;
    st.epoch += 1;
    st.cpu_at_repl_start = st.cpu_used;
    let limits = Limits {
        // The sandbox's own backstop; the reaper ends the session first. Its lifetime, not
        // an earlier end, which the holder may still move (E2B's set_timeout).
        wall: s.totals.lifetime.saturating_sub(s.created.elapsed()) + Duration::from_secs(5),
        cpu: s.totals.cpu.saturating_sub(st.cpu_used),
        memory: s.totals.memory,
        ..s.call_limits
    };
    st.repl = Some(Repl::start(
        engine,
        s.seat,
        &work,
        limits,
        st.epoch,
        st.next_call,
        s.home,
        warm,
    )?);
    Ok(())
}

/// How long after create a Python session's interpreter starts on its own (see [`boot`]).
pub(super) const BOOT_DELAY: Duration = Duration::from_millis(50);

/// Starts a new Python session's interpreter in the background, so that its first call
/// seldom waits for it: [`BOOT_DELAY`] after create, through `gate` (a start permit for a
/// forked start; a run slot, queued with the creator's tenant and priority, for a cold one),
/// held until the interpreter is ready. A burst of creates starts their interpreters a few
/// at a time beside the other work, and a session closed before its turn (a probe, a create
/// the caller gave up on) costs no interpreter: starting one is most of a session's cost. A
/// call that comes first starts the interpreter itself.
pub(super) fn boot(
    engine: Arc<Engine>,
    s: Arc<Session>,
    warm: Option<Arc<crate::sandbox::ZygoteConfig>>,
    gate: StartGate,
) {
    tokio::spawn(async move {
        let mut closed = s.closed.subscribe();
        let start = async {
            tokio::time::sleep(BOOT_DELAY).await;
            let Ok(_hold) = gate.enter(&engine).await else {
                return;
            };
            let epoch = {
                // A call holds the state while it waits for a slot: never wait for the state
                // while holding one. A call in progress starts the interpreter itself.
                let Ok(mut st) = s.state.try_lock() else {
                    return;
                };
                if st.repl.is_some() || *s.closed.borrow() {
                    return;
                }
                if let Err(e) = start_repl(&engine, &s, &mut st, warm).await {
                    tracing::warn!(session = %&s.id[..8], error = %e, "could not start the interpreter; the first call tries again");
                    return;
                }
                (st.epoch, st.repl.as_ref().map(Repl::ended))
            };
            let (epoch, ended) = epoch;
            // The gate is left once the interpreter is ready, or has ended before that (a
            // session whose limits cannot hold it): never held for the start's time-out.
            if let (Some(work), Some(ended)) = (s.work.get(), ended) {
                tokio::select! {
                    _ = repl::until_ready(work, epoch) => {}
                    _ = ended => {}
                }
            }
        };
        tokio::select! {
            _ = start => {}
            _ = closed.wait_for(|c| *c) => {}
        }
    });
}
