//! What the executor keeps of one session ([`Session`], its call state [`State`]) and what
//! its holder sees of it ([`SessionInfo`]) or asks for at create ([`Extras`]).

use super::SessionError;
use super::files::make_work;
use super::policy::Totals;
use super::repl::Repl;
use super::seats::SeatGuard;
use crate::admission::Ticket;
use crate::engine::Engine;
use crate::limits::Limits;
use crate::sandbox::WorkDir;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The session kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Python,
    Bash,
}

/// What a front door other than gRPC (E2B, docs/compatibility.md) keeps with a session it
/// opens. The engine itself never looks at it.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// Give the session a data-plane secret ([`SessionInfo::access_token`]): its calls then
    /// authenticate by id and that secret ([`super::SessionManager::by_access`]), not by caller.
    pub access_token: bool,
    /// The caller's labels, returned as given and matched by [`super::SessionManager::list`].
    pub metadata: BTreeMap<String, String>,
    /// The name the caller created it under (E2B's template).
    pub template: String,
    /// Its Python interpreter (and the commands it starts) runs as E2B's base template
    /// does: in `/home/user` (the seat's `/work` again, [`crate::sandbox::SEAT_HOME`]), with
    /// `HOME`, `USER` and `LOGNAME` to match. Such a session takes no spare interpreter.
    pub home: bool,
    /// Ends the session this long after creation (never past its lifetime); adjustable with
    /// [`super::SessionManager::set_end`]. None: its lifetime.
    pub end_after: Option<Duration>,
    /// Its next call while it is paused resumes it ([`super::SessionManager::pause`]).
    pub auto_resume: bool,
    /// SHA-256 of the data-plane secrets it was given before a pause: a resumed session gets a
    /// fresh secret and still takes these, so a client that kept the old one goes on.
    pub earlier_tokens: Vec<[u8; 32]>,
    /// Paused in this mode, not ended, when its end (`end_after`, its lifetime) comes and a
    /// session store is configured (E2B's `autoPause`).
    pub pause_on_timeout: Option<sandpool_proto::v1::PauseMode>,
}

/// What a session's holder may see of it.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub id: String,
    pub language: String,
    pub template: String,
    pub metadata: BTreeMap<String, String>,
    pub access_token: Option<String>,
    pub started_at: SystemTime,
    /// When it ends unless used up, closed or idle first.
    pub end_at: SystemTime,
    pub totals: Totals,
    /// It is paused: kept in the session store, not running ([`super::SessionManager::list_paused`]).
    pub paused: bool,
}

/// One session.
#[derive(Debug)]
pub(super) struct Session {
    pub(super) id: String,
    pub(super) kind: Kind,
    pub(super) language: String,
    /// Its creator as a [`crate::call::Caller`]: the tenant, or without auth the
    /// `authorization` metadata (empty without one).
    pub(super) owner: Vec<u8>,
    /// The creator's tenant: the session counts against its `max_sessions`.
    pub(super) tenant: Arc<str>,
    pub(super) totals: Totals,
    pub(super) call_limits: Limits,
    pub(super) created: Instant,
    pub(super) started_at: SystemTime,
    /// An end earlier than the lifetime's (E2B's timeout), set and moved by its holder.
    pub(super) end_at: Mutex<Option<Instant>>,
    pub(super) access_token: Option<String>,
    /// See [`Extras::earlier_tokens`].
    pub(super) earlier_tokens: Vec<[u8; 32]>,
    pub(super) metadata: BTreeMap<String, String>,
    pub(super) template: String,
    /// See [`Extras::home`].
    pub(super) home: bool,
    /// See [`Extras::auto_resume`].
    pub(super) auto_resume: bool,
    /// See [`Extras::pause_on_timeout`].
    pub(super) pause_on_timeout: Option<sandpool_proto::v1::PauseMode>,
    /// See [`Extras::end_after`]: a session resumed from a pause gets it again.
    pub(super) end_after: Option<Duration>,
    pub(super) last_used: Mutex<Instant>,
    /// The sandbox identity (`slots..slots + seats`) its runs use.
    pub(super) seat: usize,
    /// Its creator's tenant and priority: what each call queues for a run slot with.
    pub(super) ticket: Ticket,
    /// Memory its seat's cgroup held when last measured, at least the policy's idle bytes.
    pub(super) memory: AtomicU64,
    /// Its /work: made at create when the request brings files, else on first use (a
    /// session created and closed in a burst mounts nothing).
    pub(super) work: tokio::sync::OnceCell<Arc<WorkDir>>,
    /// The reserve did not fit when /work was made: fill it after the next call.
    pub(super) reserve_missing: std::sync::atomic::AtomicBool,
    /// It has started background processes (E2B's commands), which run and grow between its
    /// calls: its share of the ceiling stays grown after a call, on loan, instead of falling
    /// back to what it holds, or a command would meet the idle share (a compiler, `pip`).
    pub(super) background: std::sync::atomic::AtomicBool,
    /// An automatic pause of it is under way (the reaper starts one at a time).
    pub(super) pausing: std::sync::atomic::AtomicBool,
    /// Set once the session is ending: a call in progress stops at once.
    pub(super) closed: tokio::sync::watch::Sender<bool>,
    pub(super) state: tokio::sync::Mutex<State>,
}

#[derive(Debug)]
pub(super) struct State {
    /// Released after the session's processes are gone.
    pub(super) seat: Option<SeatGuard>,
    pub(super) calls: u32,
    /// CPU charged to the session: finished runs' measured CPU, plus what the running
    /// interpreter reported (or the wall time of calls it was killed in).
    pub(super) cpu_used: Duration,
    /// `cpu_used` when the running interpreter started: its run's measured CPU replaces
    /// what it reported once it ends with an outcome.
    pub(super) cpu_at_repl_start: Duration,
    pub(super) repl: Option<Repl>,
    pub(super) epoch: u64,
    pub(super) next_call: u64,
    /// A Python call whose caller went away mid-call: the interpreter may still be in it.
    pub(super) abandoned: bool,
    /// The reserve was given up (or never fit): fill it again after the call.
    pub(super) reserve_low: bool,
}

impl Session {
    pub(super) fn touch(&self) {
        if let Ok(mut t) = self.last_used.lock() {
            *t = Instant::now();
        }
    }

    pub(super) fn idle_for(&self) -> Duration {
        self.last_used.lock().map(|t| t.elapsed()).unwrap_or_default()
    }

    pub(super) fn life_left(&self) -> Duration {
        let life = self.totals.lifetime.saturating_sub(self.created.elapsed());
        match self.end_at.lock().ok().and_then(|e| *e) {
            Some(end) => life.min(end.saturating_duration_since(Instant::now())),
            None => life,
        }
    }

    pub(super) fn info(&self) -> SessionInfo {
        let left = self.life_left();
        SessionInfo {
            id: self.id.clone(),
            language: self.language.clone(),
            template: self.template.clone(),
            metadata: self.metadata.clone(),
            access_token: self.access_token.clone(),
            started_at: self.started_at,
            end_at: SystemTime::now() + left,
            totals: self.totals,
            paused: false,
        }
    }

    pub(super) fn uid(&self, uid_base: u32) -> u32 {
        uid_base + self.seat as u32
    }

    /// Its /work, made now if it was not yet (see [`Session::work`]).
    pub(super) async fn work(&self, engine: &Arc<Engine>) -> Result<Arc<WorkDir>, SessionError> {
        let work = self
            .work
            .get_or_try_init(|| async {
                let (w, reserve_ok) = make_work(engine, self.seat, Vec::new()).await?;
                self.reserve_missing.store(!reserve_ok, Ordering::Relaxed);
                Ok::<_, SessionError>(w)
            })
            .await?;
        Ok(work.clone())
    }
}
