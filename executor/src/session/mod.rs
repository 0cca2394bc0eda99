//! Stateful sessions (docs/sessions.md): a sandbox whose /work, and for Python
//! the interpreter's state, lives across calls.
//!
//! A session holds a seat from creation to its end: a sandbox identity beside the run
//! slots, with a uid and a cgroup of its own (at most [`SessionPolicy::max_sessions`] of
//! them, and no more than their memory budget allows), and one work dir that every call of
//! the session mounts at /work. It takes a run slot only while a call of it runs, queued
//! like any request with its creator's tenant and priority: an idle session costs memory,
//! not a slot.
//!
//! - Python: one long-lived sandboxed run of a small REPL driver ([`repl`]),
//!   started with the session's totals as its limits; cells reach it through
//!   files in /work. A call past its wall time kills the interpreter, which
//!   restarts on the next call: files stay, variables are gone (`state_reset`).
//! - Bash: each call a fresh run in the same /work ([`shell`]), starting in the
//!   last call's working directory with its exported variables.
//!
//! Sessions end at close, after their idle or absolute timeout (a reaper task
//! checks every 250 ms), or when the executor shuts down: the seat's processes
//! are killed, and the seat is handed on only once the host sees none left.
//! Ids are 128 random bits from the kernel's CSPRNG and the executor's name; a session's calls must carry
//! the `authorization` metadata its creator sent (compared in constant time),
//! else they get NOT_FOUND, like unknown, closed or expired ids.
//!
//! Where each part lives:
//!
//! - [`registry`]: the table of sessions, their ids, and who may reach one;
//!   [`record`]: what one session is, and what its holder sees of it;
//! - [`caps`]: the executor's and tenants' caps and the memory budget; [`policy`]: the
//!   limits a session and its calls get;
//! - [`seats`]: the sandbox identities sessions hold; [`procs`]: whether a seat's
//!   processes are gone;
//! - [`create`]: create and open; [`call`]: a call's checks and run slot, then bash
//!   ([`shell`]) or Python ([`python`]);
//! - [`startup`]: the interpreter's start-up; [`repl`]: the interpreter and its driver;
//!   [`spares`]: interpreters started ahead of demand;
//! - [`files`]: /work, the request's files and the session's own directory;
//! - [`pause`]: pause into the session store, resume from it ([`owner_seal`]: an open
//!   pool's owner kept for a data-plane resume); [`drain`]: pause every
//!   session at shutdown, and resume one on its next call on any executor;
//!   [`snapshot`]: snapshots and forks; [`lifecycle`]: paused at the end instead of ended,
//!   and paused sessions listed;
//! - [`reap`]: close, timeouts, shutdown; [`error`]: why a call was refused.

mod call;
mod caps;
mod create;
mod drain;
mod error;
mod files;
mod lifecycle;
mod lookups;
mod owner_seal;
mod pause;
pub mod policy;
mod procs;
mod python;
mod reap;
mod record;
mod registry;
pub mod repl;
mod resuming;
mod seats;
mod shell;
mod snapshot;
mod spares;
mod startup;

pub use call::MAX_BACKGROUND;
pub use drain::{DrainReport, EXECUTOR_ADDRESS_HEADER, EXECUTOR_HEADER};
pub use error::SessionError;
pub(crate) use files::write_state;
pub use policy::{SessionPolicy, Totals};
pub use record::{Extras, SessionInfo};
pub(crate) use registry::random_hex;
pub use seats::seat_cpu_weight;
pub use snapshot::{MAX_FORK, SNAPSHOT_PREFIX};

use crate::engine::Engine;
use reap::reaper;
use record::Session;
use seats::Seats;
use startup::FORKED_STARTS_PER_SLOT;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Where the session machinery keeps its files inside /work; requests may not write there.
pub const STATE_DIR: &str = ".sandpool";

/// Bytes of /work held back for the session's own files (a call's request, its reply): a
/// session whose program filled /work still takes the call that frees space.
pub const RESERVE_BYTES: usize = 1 << 20;

/// Every session of one executor.
#[derive(Debug)]
pub struct SessionManager {
    engine: Arc<Engine>,
    /// The sessions' cap, defaults and ceilings (the executor's flags).
    policy: SessionPolicy,
    /// "host:port" clients send a session's calls to.
    advertise: String,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Sessions being created, per tenant: counted against the caps before they hold a seat.
    creating: Mutex<HashMap<Arc<str>, usize>>,
    seats: Arc<Seats>,
    /// Interpreters started ahead of demand (`--session-spares`).
    spares: spares::Spares,
    /// What Python sessions' interpreters fork from (cold without it).
    driver_zygote: Option<Arc<crate::sandbox::ZygoteConfig>>,
    /// Forked interpreter starts at once (see [`startup::StartGate`]).
    starts: Arc<tokio::sync::Semaphore>,
    /// The executor's tenants ([`SessionManager::follow_tenants`]): a session whose
    /// tenant leaves the table is ended.
    tenants: std::sync::OnceLock<Arc<crate::tenants::Tenants>>,
    /// Where paused sessions go ([`Self::use_store`]); none: sessions cannot be paused.
    store: std::sync::OnceLock<pause::StoreSlot>,
    /// Sessions this executor paused, by id: their calls answer `session paused`.
    paused: Mutex<HashMap<String, pause::Paused>>,
    /// One resume of a session at a time (a session is never resumed twice).
    resuming: resuming::Resuming,
}

impl SessionManager {
    /// Starts the manager of `engine`'s sessions under `policy`, and its reaper (which
    /// stops when the manager is dropped).
    pub fn start(engine: Arc<Engine>, mut policy: SessionPolicy, advertise: String) -> Arc<Self> {
        let (slots, seats) = (engine.sandbox().slots(), engine.sandbox().seats());
        // No more sessions than the sandbox has seats for (none outside namespaces mode).
        // Spares sit in seats beyond the sessions' (the sandbox is given both).
        let namespaces = engine.sandbox().mode() == crate::sandbox::IsolationMode::Namespaces;
        let spare_count = match namespaces {
            true => policy.spares.min(seats.saturating_sub(policy.max_sessions.min(seats))),
            false => 0,
        };
        // Outside namespaces mode every create is refused (runs share one uid): a capacity
        // of none, not one the executor would refuse.
        policy.max_sessions = match namespaces {
            true => policy.max_sessions.min(seats - spare_count),
            false => 0,
        };
        let metrics = engine.metrics();
        metrics.session_capacity.set(policy.max_sessions as i64);
        metrics
            .session_memory_budget
            .set(i64::try_from(policy.memory_budget).unwrap_or(i64::MAX));
        let python = engine.language("python", "language").is_ok();
        let driver_zygote = repl::driver_zygote(&engine).filter(|_| python && seats > 0);
        if let Some(cfg) = &driver_zygote {
            engine.sandbox().start_seat_zygote(cfg.clone());
        }
        let seat_pool = Arc::new(Seats(Mutex::new((slots..slots + seats).collect()), engine.clone()));
        let m = Arc::new(SessionManager {
            driver_zygote,
            starts: Arc::new(tokio::sync::Semaphore::new(FORKED_STARTS_PER_SLOT * slots.max(1))),
            engine,
            policy,
            advertise,
            sessions: Mutex::new(HashMap::new()),
            creating: Mutex::new(HashMap::new()),
            seats: seat_pool,
            spares: spares::Spares::new(spare_count),
            tenants: std::sync::OnceLock::new(),
            store: std::sync::OnceLock::new(),
            paused: Mutex::new(HashMap::new()),
            resuming: resuming::Resuming::default(),
        });
        let weak = Arc::downgrade(&m);
        tokio::spawn(reaper(weak.clone()));
        if spare_count > 0 {
            tokio::spawn(spares::keeper(weak));
        }
        m
    }

    /// The sessions' cap, defaults and ceilings.
    pub fn policy(&self) -> &SessionPolicy {
        &self.policy
    }
}
