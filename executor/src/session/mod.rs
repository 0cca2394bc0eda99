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

pub mod policy;
mod procs;
pub mod repl;
mod shell;
mod spares;

pub use policy::{SessionPolicy, Totals};

use crate::admission::{Admit, Ticket};
use crate::call::Call;
use crate::engine::Engine;
use crate::error::{ExecError, scrub_host_paths};
use crate::limits::Limits;
use crate::metrics::Exhaustion;
use crate::sandbox::WorkDir;
use crate::task::blocking;
use crate::{validate, verdict};
use repl::{CallEnd, Repl};
use sandpool_proto::v1 as pb;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};
use subtle::ConstantTimeEq;

/// Where the session machinery keeps its files inside /work; requests may not write there.
pub const STATE_DIR: &str = ".sandpool";

/// Bytes of /work held back for the session's own files (a call's request, its reply): a
/// session whose program filled /work still takes the call that frees space.
pub const RESERVE_BYTES: usize = 1 << 20;

/// The file holding [`RESERVE_BYTES`].
const RESERVE: &str = ".sandpool/reserve";

/// How long a closing session waits for the host to see its processes gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Why a session call was refused.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(
        "no such session: unknown, closed or expired (sessions live on one executor; a restarted executor has none)"
    )]
    NotFound,
    #[error("{0}")]
    Exhausted(String),
    /// The session's interpreter died between calls (killed at the sessions' memory ceiling,
    /// or it exited): its variables are gone. The call did not run; the next one runs in a
    /// fresh interpreter (gRPC FAILED_PRECONDITION, E2B the cell's error).
    #[error("session reset: {0}")]
    Reset(String),
    #[error(transparent)]
    Exec(#[from] ExecError),
}

impl From<crate::admission::AdmissionError> for SessionError {
    fn from(e: crate::admission::AdmissionError) -> Self {
        SessionError::Exec(e.into())
    }
}

/// The session kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Python,
    Bash,
}

/// What a front door other than gRPC (E2B, docs/compatibility.md) keeps with a session it
/// opens. The engine itself never looks at it.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// Give the session a data-plane secret ([`SessionInfo::access_token`]): its calls then
    /// authenticate by id and that secret ([`SessionManager::by_access`]), not by caller.
    pub access_token: bool,
    /// The caller's labels, returned as given and matched by [`SessionManager::list`].
    pub metadata: BTreeMap<String, String>,
    /// The name the caller created it under (E2B's template).
    pub template: String,
    /// Its Python interpreter (and the commands it starts) runs as E2B's base template
    /// does: in `/home/user` (the seat's `/work` again, [`crate::sandbox::SEAT_HOME`]), with
    /// `HOME`, `USER` and `LOGNAME` to match. Such a session takes no spare interpreter.
    pub home: bool,
    /// Ends the session this long after creation (never past its lifetime); adjustable with
    /// [`SessionManager::set_end`]. None: its lifetime.
    pub end_after: Option<Duration>,
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
}

/// One session.
#[derive(Debug)]
struct Session {
    id: String,
    kind: Kind,
    language: String,
    /// Its creator as a [`crate::call::Caller`]: the tenant, or without auth the
    /// `authorization` metadata (empty without one).
    owner: Vec<u8>,
    /// The creator's tenant: the session counts against its `max_sessions`.
    tenant: Arc<str>,
    totals: Totals,
    call_limits: Limits,
    created: Instant,
    started_at: SystemTime,
    /// An end earlier than the lifetime's (E2B's timeout), set and moved by its holder.
    end_at: Mutex<Option<Instant>>,
    access_token: Option<String>,
    metadata: BTreeMap<String, String>,
    template: String,
    /// See [`Extras::home`].
    home: bool,
    last_used: Mutex<Instant>,
    /// The sandbox identity (`slots..slots + seats`) its runs use.
    seat: usize,
    /// Its creator's tenant and priority: what each call queues for a run slot with.
    ticket: Ticket,
    /// Memory its seat's cgroup held when last measured, at least the policy's idle bytes.
    memory: AtomicU64,
    /// Its /work: made at create when the request brings files, else on first use (a
    /// session created and closed in a burst mounts nothing).
    work: tokio::sync::OnceCell<Arc<WorkDir>>,
    /// The reserve did not fit when /work was made: fill it after the next call.
    reserve_missing: std::sync::atomic::AtomicBool,
    /// It has started background processes (E2B's commands), which run and grow between its
    /// calls: its share of the ceiling stays grown after a call, on loan, instead of falling
    /// back to what it holds, or a command would meet the idle share (a compiler, `pip`).
    background: std::sync::atomic::AtomicBool,
    /// Set once the session is ending: a call in progress stops at once.
    closed: tokio::sync::watch::Sender<bool>,
    state: tokio::sync::Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Released after the session's processes are gone.
    seat: Option<SeatGuard>,
    calls: u32,
    /// CPU charged to the session: finished runs' measured CPU, plus what the running
    /// interpreter reported (or the wall time of calls it was killed in).
    cpu_used: Duration,
    /// `cpu_used` when the running interpreter started: its run's measured CPU replaces
    /// what it reported once it ends with an outcome.
    cpu_at_repl_start: Duration,
    repl: Option<Repl>,
    epoch: u64,
    next_call: u64,
    /// A Python call whose caller went away mid-call: the interpreter may still be in it.
    abandoned: bool,
    /// The reserve was given up (or never fit): fill it again after the call.
    reserve_low: bool,
}

impl Session {
    fn touch(&self) {
        if let Ok(mut t) = self.last_used.lock() {
            *t = Instant::now();
        }
    }

    fn idle_for(&self) -> Duration {
        self.last_used.lock().map(|t| t.elapsed()).unwrap_or_default()
    }

    fn life_left(&self) -> Duration {
        let life = self.totals.lifetime.saturating_sub(self.created.elapsed());
        match self.end_at.lock().ok().and_then(|e| *e) {
            Some(end) => life.min(end.saturating_duration_since(Instant::now())),
            None => life,
        }
    }

    fn info(&self) -> SessionInfo {
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
        }
    }

    fn uid(&self, uid_base: u32) -> u32 {
        uid_base + self.seat as u32
    }

    /// Its /work, made now if it was not yet (see [`Session::work`]).
    async fn work(&self, engine: &Arc<Engine>) -> Result<Arc<WorkDir>, SessionError> {
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

/// Makes seat `seat`'s /work (a mount: off the runtime's threads) with `files` and the
/// session's own (the working directory, the reserve); true when the reserve fit.
async fn make_work(
    engine: &Arc<Engine>,
    seat: usize,
    files: Vec<pb::File>,
) -> Result<(Arc<WorkDir>, bool), SessionError> {
    let engine = engine.clone();
    blocking(move || {
        let work = engine
            .sandbox()
            .work_dir(seat)
            .map_err(|e| ExecError::Internal(scrub_host_paths(&e.client_message())))?;
        write_files(&work, &files)?;
        // Files that leave no room for these are the request's business: best effort.
        let _ = work.write_file(".sandpool/cwd", b"/work\n", false);
        let reserve_ok = refill_reserve(&work);
        Ok((Arc::new(work), reserve_ok))
    })
    .await?
}

/// The executor's free session seats (sandbox identities `slots..slots + seats`).
#[derive(Debug)]
struct Seats(Mutex<BTreeSet<usize>>, Arc<Engine>);

/// A seat a session holds; back to the free ones when dropped (never while its processes live:
/// see [`SessionManager::end_all`]).
#[derive(Debug)]
struct SeatGuard {
    seats: Arc<Seats>,
    index: usize,
}

impl Seats {
    /// The lowest free seat: the fewest distinct cgroups are ever made.
    fn take(self: &Arc<Self>) -> Option<SeatGuard> {
        let index = self.0.lock().ok()?.pop_first()?;
        Some(SeatGuard {
            seats: self.clone(),
            index,
        })
    }
}

impl Drop for SeatGuard {
    fn drop(&mut self) {
        // Its processes are gone and its /work dropped: its share of the sessions' memory
        // ceiling is free for the others (a bookkeeping change, no cgroup is written).
        self.seats
            .1
            .sandbox()
            .seat_share(self.index, crate::sandbox::SeatShare::Release);
        if let Ok(mut free) = self.seats.0.lock() {
            free.insert(self.index);
        }
    }
}

/// What a session call asks for.
enum Input {
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

/// Marks a Python call abandoned unless it finished: its caller's future was dropped.
struct CallGuard<'a> {
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

/// A create in progress, counted against the caps (the executor's, its tenant's) until dropped.
struct Creating<'a> {
    counts: &'a Mutex<HashMap<Arc<str>, usize>>,
    tenant: Arc<str>,
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

/// The most background processes (E2B's commands) a session runs at once; a tenant's are
/// bounded by this times its `max_sessions` (docs/tenants.md, "Shared caps").
pub const MAX_BACKGROUND: usize = 16;

/// A seat's CPU weight for a session at `priority`, in cgroup v2 `cpu.weight` units where
/// every slot has 100: the priorities' weights (16 : 4 : 1), normal as a slot.
pub fn seat_cpu_weight(priority: crate::tenants::Priority) -> u32 {
    u32::try_from(priority.weight() * 100 / crate::tenants::Priority::Normal.weight()).unwrap_or(100)
}

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
    /// Forked interpreter starts at once (see [`StartGate`]).
    starts: Arc<tokio::sync::Semaphore>,
    /// The executor's tenants ([`SessionManager::follow_tenants`]): a session whose
    /// tenant leaves the table is ended.
    tenants: std::sync::OnceLock<Arc<crate::tenants::Tenants>>,
}

/// What an interpreter start holds while it starts. A cold start is about 70 ms of CPU (the
/// interpreter's own start and the driver's imports): it takes a run slot, queued like any
/// request. A start forked from the seats' zygote costs a few ms of CPU and waits mostly on
/// the kernel (joining the seat's cgroup waits for an RCU grace period): it takes one of
/// [`FORKED_STARTS_PER_SLOT`] × slots start permits instead, so a burst of sessions starts
/// beside the run slots' work instead of queueing behind it, and a call then takes a run
/// slot only while it runs.
enum StartGate {
    Slot(Ticket),
    Forked(Arc<tokio::sync::Semaphore>),
}

/// Forked interpreter starts in progress at once, per run slot.
const FORKED_STARTS_PER_SLOT: usize = 4;

/// Held while an interpreter starts (see [`StartGate`]): one of the two.
struct StartHold {
    _slot: Option<crate::admission::SlotGuard>,
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl StartGate {
    async fn enter(&self, engine: &Engine) -> Result<StartHold, ExecError> {
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
struct Ensured {
    /// The interpreter was replaced: the session's variables are gone.
    reset: bool,
    /// Why, for the call's `message`.
    notes: Vec<&'static str>,
    /// The interpreter had died since the last call: why, for [`SessionError::Reset`].
    died: Option<String>,
}

/// 128 bits from the kernel's CSPRNG, as hex.
pub(crate) fn random_hex() -> Result<String, ExecError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| ExecError::Internal(format!("getrandom: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// 128 random bits, hex, then `-` and the executor's name (its pod's): a pool's gateway
/// routes a session's calls by the id alone, with no shared store.
fn new_id(executor: &str) -> Result<String, ExecError> {
    Ok(format!("{}-{executor}", random_hex()?))
}

fn is_full(e: &crate::sandbox::WorkDirError) -> bool {
    matches!(e, crate::sandbox::WorkDirError::Io { source, .. }
        if matches!(source.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)))
}

/// Writes the session's own files into `work`; when /work is full, empties the reserve and
/// tries once more. Ok(true) when the reserve was used (refill it after the call).
///
/// The session's programs can write `.sandpool/` too: each file is written under a new name
/// and renamed into place ([`WorkDir::replace_file`]), so a FIFO, socket or link planted at
/// a name the executor will use next is replaced, never opened (an open of a FIFO waits for
/// a reader, forever). Only a directory planted there fails the call, naming the path.
pub(crate) fn write_state(work: &WorkDir, writes: &[(&str, &[u8])]) -> Result<bool, SessionError> {
    let attempt = || writes.iter().try_for_each(|(p, c)| work.replace_file(p, c, false));
    let internal = |e: crate::sandbox::WorkDirError| ExecError::Internal(scrub_host_paths(&e.to_string())).into();
    match attempt() {
        Ok(()) => Ok(false),
        Err(e) if is_full(&e) => {
            let _ = work.replace_file(RESERVE, b"", false);
            match attempt() {
                Ok(()) => Ok(true),
                Err(e) if is_full(&e) => Err(SessionError::Exhausted(format!(
                    "the session's /work is full: this call's input ({} bytes) does not fit even in the \
                     {RESERVE_BYTES} bytes kept back; free space with a short command (rm)",
                    writes.iter().map(|(_, c)| c.len()).sum::<usize>()
                ))),
                Err(e) => Err(internal(e)),
            }
        }
        Err(e) => Err(internal(e)),
    }
}

/// Fills the reserve again; true when it is whole.
fn refill_reserve(work: &WorkDir) -> bool {
    work.replace_file(RESERVE, &vec![0u8; RESERVE_BYTES], false).is_ok()
}

/// Validates files a request writes into a session's /work.
fn check_files(files: &[pb::File], field: &str, budget: u64) -> Result<(), ExecError> {
    for (i, f) in files.iter().enumerate() {
        if validate::components(&f.path).first() == Some(&STATE_DIR) {
            return Err(ExecError::invalid(
                format!("{field}[{i}].path"),
                format!("{STATE_DIR}/ is the session's own directory"),
            ));
        }
    }
    // The placeholder source file sits in the session's own directory: no request file clashes.
    validate::files(files, field, ".sandpool/-", 0, budget)
}

/// Writes a request's files into `work`. A file the session's own programs are in the way of
/// (a directory of that name, a link in its path) names its field; a full /work is RESOURCE_EXHAUSTED.
fn write_files(work: &WorkDir, files: &[pb::File]) -> Result<(), SessionError> {
    for (i, f) in files.iter().enumerate() {
        if let Err(e) = work.write_file(&f.path, &f.content, f.executable) {
            if is_full(&e) {
                return Err(SessionError::Exhausted(format!(
                    "files[{i}]: the session's /work is full ({} bytes written so far are kept)",
                    files[..i].iter().map(|f| f.content.len()).sum::<usize>()
                )));
            }
            return Err(ExecError::invalid(format!("files[{i}].path"), scrub_host_paths(&e.to_string())).into());
        }
    }
    Ok(())
}

/// Bytes in use in `work`.
fn disk_used(work: &WorkDir) -> u64 {
    work.bytes_used()
}

/// The check a session's later calls pass: same `authorization` as its creator's.
fn owner_matches(s: &Session, auth: &[u8]) -> bool {
    bool::from(s.owner.as_slice().ct_eq(auth))
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
        if namespaces {
            policy.max_sessions = policy.max_sessions.min(seats - spare_count);
        }
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

    /// Waits until the host sees none of `s`'s processes: sessions exist only
    /// in namespaces mode (see `create`), where each seat has a uid of its own.
    async fn wait_gone(&self, s: &Session) -> bool {
        let seat = [(s.seat, s.uid(self.policy().uid_base))];
        procs::wait_gone(&self.engine, &seat, KILL_WAIT).await.is_empty()
    }

    /// Memory the open sessions hold, as last measured (each at least the idle bytes).
    pub fn memory_held(&self) -> u64 {
        self.sessions
            .lock()
            .map(|m| m.values().map(|s| s.memory.load(Ordering::Relaxed)).sum())
            .unwrap_or(0)
    }

    /// Measures each session's memory from its seat's cgroup (off the runtime's threads).
    async fn measure(&self) {
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
    async fn remeasure(&self, these: Vec<Arc<Session>>) -> u64 {
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
    async fn remeasure_high(&self) {
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
    fn over_memory_budget(&self, creating: usize) -> bool {
        let wanted = (creating as u64 + 1).saturating_mul(self.policy.idle_bytes);
        self.memory_held().saturating_add(wanted) > self.policy.memory_budget
    }

    /// Moves session `s`'s share of the sessions' memory ceiling (off the runtime's threads:
    /// it writes its cgroup's limit).
    async fn share(&self, s: &Session, share: crate::sandbox::SeatShare) {
        let (engine, seat) = (self.engine.clone(), s.seat);
        let _ = blocking(move || engine.sandbox().seat_share(seat, share)).await;
    }

    /// Sessions alive now.
    pub fn count(&self) -> usize {
        self.sessions.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// Sessions of `tenant` alive now.
    fn count_of(&self, tenant: &str) -> usize {
        self.sessions
            .lock()
            .map(|m| m.values().filter(|s| *s.tenant == *tenant).count())
            .unwrap_or(0)
    }

    /// The executor's cap on sessions (`--max-sessions`): a tenant's default too.
    pub fn max_sessions(&self) -> usize {
        self.policy.max_sessions
    }

    /// Publishes `tenant`'s open sessions, from the table `m`.
    fn publish(&self, m: &HashMap<String, Arc<Session>>, tenant: &str) {
        let metrics = self.engine.metrics();
        metrics.sessions.set(m.len() as i64);
        metrics.tenant_sessions(tenant, m.values().filter(|s| *s.tenant == *tenant).count());
    }

    /// The session `id`, whoever asks.
    fn lookup(&self, id: &str) -> Result<Arc<Session>, SessionError> {
        self.sessions
            .lock()
            .ok()
            .and_then(|m| m.get(id).cloned())
            .ok_or(SessionError::NotFound)
    }

    fn find(&self, id: &str, auth: &[u8]) -> Result<Arc<Session>, SessionError> {
        if id.is_empty() {
            return Err(ExecError::invalid("session_id", "required").into());
        }
        let s = self.lookup(id)?;
        // Another caller's session looks like no session at all.
        if !owner_matches(&s, auth) {
            return Err(SessionError::NotFound);
        }
        Ok(s)
    }

    /// Opens a session.
    pub async fn create(
        &self,
        req: pb::CreateSessionRequest,
        call: Call,
    ) -> Result<pb::CreateSessionResponse, SessionError> {
        self.create_with(req, call, Extras::default()).await.map(|(r, _)| r)
    }

    /// Opens a session that keeps `extras`; answers what `info` would say of it too.
    pub async fn create_with(
        &self,
        req: pb::CreateSessionRequest,
        call: Call,
        extras: Extras,
    ) -> Result<(pb::CreateSessionResponse, SessionInfo), SessionError> {
        let engine = &self.engine;
        let _in_progress = engine.admission().request();
        let ticket = engine.ticket(&call, req.priority, "priority")?;
        let auth = call.caller.into_bytes();
        // The session drivers rely on a fixed /work and /tmp, which only the
        // namespaces mode gives (restricted runs see host paths).
        if engine.sandbox().mode() != crate::sandbox::IsolationMode::Namespaces {
            return Err(ExecError::Unavailable(
                "sessions".into(),
                format!(
                    "sessions need isolation mode namespaces; this executor runs {}",
                    engine.sandbox().mode().name()
                ),
            )
            .into());
        }
        let (lang, version) = engine.language(&req.language, "language")?;
        let kind = match lang.name.as_str() {
            "python" => Kind::Python,
            "bash" => Kind::Bash,
            other => {
                return Err(
                    ExecError::invalid("language", format!("sessions run python or bash, not {other:?}")).into(),
                );
            }
        };
        let version = version.to_owned();
        let language = lang.name.clone();
        let totals = policy::resolve(
            self.policy(),
            engine.policy(),
            req.session_limits.as_ref(),
            engine.work_dir_bytes(),
        )?;
        let call_limits = engine
            .policy()
            .resolve(req.call_limits.as_ref(), &engine.policy().run_defaults, "call_limits")
            .map_err(ExecError::from)?;
        let budget = engine.work_dir_bytes();
        let files = req.files;
        // Most creates bring no files: checked here then, not on the blocking pool (a thread
        // hop that cost a burst of creates a fifth of its rate).
        let files = match files.is_empty() {
            true => files,
            false => blocking(move || check_files(&files, "files", budget).map(|_| files)).await??,
        };

        // Refused for memory only on a fresh reading.
        let creating = self.creating.lock().map(|c| c.values().sum()).unwrap_or(0);
        if self.over_memory_budget(creating) {
            self.remeasure_high().await;
        }
        // Counted before waiting for a slot, so a burst of creates cannot pass the cap; uncounted
        // by the guard's drop, also when the caller goes away mid-create.
        let _creating = {
            let mut creating = self.creating.lock().map_err(|_| ExecError::Internal("lock".into()))?;
            let max = self.policy().max_sessions;
            if self.count() + creating.values().sum::<usize>() >= max {
                self.engine.metrics().exhausted(Exhaustion::Sessions);
                return Err(SessionError::Exhausted(format!(
                    "this executor already holds its {max} sessions (--max-sessions); close one or try another executor"
                )));
            }
            if self.over_memory_budget(creating.values().sum()) {
                self.engine.metrics().exhausted(Exhaustion::SessionMemory);
                return Err(SessionError::Exhausted(format!(
                    "the sessions on this executor hold {} MiB of their {} MiB memory budget (--session-memory-bytes); close one or try another executor",
                    self.memory_held() >> 20,
                    self.policy().memory_budget >> 20
                )));
            }
            let tenant = ticket.tenant.name.clone();
            let tenant_max = ticket.tenant.max_sessions.unwrap_or(max);
            let mine = creating.get(&tenant).copied().unwrap_or(0);
            if self.count_of(&tenant) + mine >= tenant_max {
                self.engine.metrics().exhausted(Exhaustion::TenantSessions);
                return Err(SessionError::Exhausted(format!(
                    "tenant {tenant:?} already holds its {tenant_max} sessions on this executor (its max_sessions); close one or try another executor"
                )));
            }
            *creating.entry(tenant.clone()).or_default() += 1;
            Creating {
                counts: &self.creating,
                tenant,
            }
        };
        let s = self
            .open(kind, language, totals, call_limits, files, auth, &ticket, extras)
            .await?;
        tracing::info!(session = %&s.id[..8], language = %s.language, seat = s.seat, request_id = %req.request_id, "session created");
        let info = s.info();
        let resp = pb::CreateSessionResponse {
            session_id: s.id.clone(),
            executor_address: self.advertise.clone(),
            language: s.language.clone(),
            session_limits: Some(s.totals.to_proto()),
            call_limits: Some(crate::limits::to_proto(s.call_limits)),
            executor: Some(engine.info(&version)),
        };
        Ok((resp, info))
    }

    /// The owner a session's calls authenticate as, given its id and the data-plane secret
    /// its creator was given ([`Extras::access_token`]); compared in constant time. A
    /// session without one, a wrong secret and an unknown id all look alike: NOT_FOUND.
    /// Also its creator's tenant (what its streams count against).
    pub fn by_access(&self, id: &str, token: &[u8]) -> Result<(Vec<u8>, Arc<crate::tenants::Tenant>), SessionError> {
        let s = self.lookup(id)?;
        match &s.access_token {
            Some(t) if bool::from(t.as_bytes().ct_eq(token)) => Ok((s.owner.clone(), s.ticket.tenant.clone())),
            _ => Err(SessionError::NotFound),
        }
    }

    /// What `auth`'s session `id` is.
    pub fn info(&self, id: &str, auth: &[u8]) -> Result<SessionInfo, SessionError> {
        self.find(id, auth).map(|s| s.info())
    }

    /// `auth`'s sessions whose metadata holds every pair of `metadata`, oldest first.
    pub fn list(&self, auth: &[u8], metadata: &BTreeMap<String, String>) -> Vec<SessionInfo> {
        let mut all: Vec<SessionInfo> = self
            .sessions
            .lock()
            .map(|m| {
                m.values()
                    .filter(|s| owner_matches(s, auth))
                    .filter(|s| metadata.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
                    .map(|s| s.info())
                    .collect()
            })
            .unwrap_or_default();
        all.sort_by(|a, b| a.started_at.cmp(&b.started_at).then_with(|| a.id.cmp(&b.id)));
        all
    }

    /// Moves the end of `auth`'s session `id` to `after` from now, never past its lifetime.
    pub fn set_end(&self, id: &str, auth: &[u8], after: Duration) -> Result<SessionInfo, SessionError> {
        let s = self.find(id, auth)?;
        let life = s.totals.lifetime.saturating_sub(s.created.elapsed());
        if let Ok(mut e) = s.end_at.lock() {
            *e = Some(Instant::now() + after.min(life));
        }
        s.touch();
        Ok(s.info())
    }

    #[allow(clippy::too_many_arguments)]
    async fn open(
        &self,
        kind: Kind,
        language: String,
        totals: Totals,
        call_limits: Limits,
        files: Vec<pb::File>,
        owner: Vec<u8>,
        ticket: &Ticket,
        extras: Extras,
    ) -> Result<Arc<Session>, SessionError> {
        let engine = &self.engine;
        // The caps were checked; a seat whose processes outlived their session stays out of use.
        // Before a spare is taken: a spare dropped on an error here would free its seat
        // before its processes are gone.
        let id = new_id(engine.name())?;
        let work = tokio::sync::OnceCell::new();
        let mut reserve_ok = true;
        // A spare interpreter when one was started for these limits (no files to put first),
        // and it needs no other environment (a spare's started as a plain session's).
        let spare = match (kind, files.is_empty() && !extras.home) {
            (Kind::Python, true) => self.spares.take(&spare_key(&totals, &call_limits)),
            _ => None,
        };
        let (seat, repl) = match spare {
            Some(sp) => {
                reserve_ok = sp.reserve_ok;
                let _ = work.set(sp.work);
                (sp.seat, Some(sp.repl))
            }
            None => {
                let seat = self.seats.take().ok_or_else(|| {
                    self.engine.metrics().exhausted(Exhaustion::Sessions);
                    SessionError::Exhausted("no session seat is free on this executor; try another executor".into())
                })?;
                (seat, None)
            }
        };
        let booted = repl.is_some();
        // The seat's CPU weighs as the session's priority: what its programs leave running
        // between calls (E2B's background commands) holds no run slot (docs/tenants.md).
        let (e, index, weight) = (engine.clone(), seat.index, seat_cpu_weight(ticket.priority));
        if !blocking(move || e.sandbox().set_seat_cpu_weight(index, weight))
            .await
            .unwrap_or(false)
        {
            tracing::debug!(seat = index, "no CPU weights for seats here");
        }
        // With files, /work is made now, so that a file that does not fit is this call's error.
        if !files.is_empty() {
            let (w, ok) = make_work(engine, seat.index, files).await?;
            reserve_ok = ok;
            let _ = work.set(w);
        }
        let (closed, _) = tokio::sync::watch::channel(false);
        let s = Arc::new(Session {
            id,
            kind,
            language,
            owner,
            tenant: ticket.tenant.name.clone(),
            totals,
            call_limits,
            created: Instant::now(),
            started_at: SystemTime::now(),
            end_at: Mutex::new(extras.end_after.map(|d| Instant::now() + d.min(totals.lifetime))),
            access_token: if extras.access_token { Some(random_hex()?) } else { None },
            metadata: extras.metadata,
            template: extras.template,
            home: extras.home,
            last_used: Mutex::new(Instant::now()),
            seat: seat.index,
            ticket: ticket.clone(),
            memory: AtomicU64::new(self.policy.idle_bytes),
            work,
            reserve_missing: std::sync::atomic::AtomicBool::new(!reserve_ok),
            background: std::sync::atomic::AtomicBool::new(false),
            closed,
            state: tokio::sync::Mutex::new(State {
                seat: Some(seat),
                calls: 0,
                cpu_used: Duration::ZERO,
                cpu_at_repl_start: Duration::ZERO,
                repl,
                // A spare was started as epoch 1 (see spares.rs).
                epoch: u64::from(booted),
                next_call: 1,
                abandoned: false,
                reserve_low: false,
            }),
        });
        // Its share of the sessions' memory ceiling from now: at least the idle bytes, which
        // no other session's call can then take while its interpreter starts.
        self.share(&s, crate::sandbox::SeatShare::Hold).await;
        if kind == Kind::Python && !booted {
            let gate = self
                .forked_start_gate()
                .unwrap_or_else(|| StartGate::Slot(s.ticket.clone()));
            boot(self.engine.clone(), s.clone(), self.driver_zygote.clone(), gate);
        }
        {
            let mut all = self.sessions.lock().map_err(|_| ExecError::Internal("lock".into()))?;
            all.insert(s.id.clone(), s.clone());
            self.publish(&all, &s.tenant);
        }
        Ok(s)
    }

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

    /// Reads a file of the session's own directory (`.sandpool/...`): at most `max` bytes
    /// from `offset`; None when it is not there.
    pub async fn state_file(
        &self,
        id: &str,
        auth: &[u8],
        path: &str,
        offset: u64,
        max: u64,
    ) -> Result<Option<Vec<u8>>, SessionError> {
        let s = self.find(id, auth)?;
        let (w, p) = (s.work(&self.engine).await?, format!("{STATE_DIR}/{path}"));
        match blocking(move || w.read_file_at(&p, offset, max)).await? {
            Ok(b) => Ok(Some(b)),
            Err(crate::sandbox::FetchError::NotFound) => Ok(None),
            Err(e) => Err(ExecError::Internal(scrub_host_paths(&e.to_string())).into()),
        }
    }

    async fn call(
        &self,
        id: &str,
        auth: &[u8],
        input: Input,
        stdin: Vec<u8>,
        req_limits: Option<pb::Limits>,
        request_id: &str,
    ) -> Result<pb::RunInSessionResponse, SessionError> {
        let _in_progress = self.engine.admission().request();
        let s = self.find(id, auth)?;
        if input.len() as u64 > s.totals.disk {
            return Err(ExecError::invalid(input.field(), "longer than the session's /work can hold").into());
        }
        let mut closed = s.closed.subscribe();
        let mut st = tokio::select! {
            st = s.state.lock() => st,
            _ = closed.wait_for(|c| *c) => return Err(SessionError::NotFound),
        };
        if *s.closed.borrow() {
            return Err(SessionError::NotFound);
        }
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
        // Back to what it holds: idle, it cannot take room another session's call may need.
        // Unless it runs background processes: they go on growing between calls, so it keeps
        // its grown share, on loan: another session's start or call takes it back when short.
        let after = if s.background.load(Ordering::Relaxed) {
            crate::sandbox::SeatShare::Lend(s.totals.memory)
        } else {
            crate::sandbox::SeatShare::Hold
        };
        self.share(&s, after).await;
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

    async fn run_shell(
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

    /// Where a call's interpreter starts: before the call takes its run slot when it forks
    /// (see [`StartGate`]); else in the call's slot (None).
    fn forked_start_gate(&self) -> Option<StartGate> {
        self.driver_zygote
            .as_ref()
            .map(|_| StartGate::Forked(self.starts.clone()))
    }

    /// Makes sure session `s` has a live interpreter for its next call: kills one a caller
    /// abandoned mid-call or that has died, and starts a new one. With a `gate`, the start
    /// goes through it and this waits until the interpreter is ready (or has ended); without,
    /// the caller holds a run slot. Answers whether the state was reset, and why.
    async fn ensure_repl(&self, s: &Session, st: &mut State, gate: Option<StartGate>) -> Result<Ensured, SessionError> {
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

    async fn run_python(
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
    async fn kill_repl(&self, s: &Session, st: &mut State, r: Repl) {
        if let Some(Ok(o)) = r.kill().await {
            st.cpu_used = st.cpu_at_repl_start + o.cpu;
        }
        self.wait_gone(s).await;
    }

    /// Writes files into a session's /work.
    pub async fn put_files(
        &self,
        req: pb::PutSessionFilesRequest,
        auth: &[u8],
    ) -> Result<pb::PutSessionFilesResponse, SessionError> {
        let _in_progress = self.engine.admission().request();
        let s = self.find(&req.session_id, auth)?;
        s.touch();
        let (files, budget, work) = (req.files, s.totals.disk, s.work(&self.engine).await?);
        let used = blocking(move || {
            check_files(&files, "files", budget)?;
            write_files(&work, &files)?;
            Ok::<_, SessionError>(disk_used(&work))
        })
        .await??;
        Ok(pb::PutSessionFilesResponse { disk_used_bytes: used })
    }

    /// Reads files from a session's /work.
    pub async fn get_files(
        &self,
        req: pb::GetSessionFilesRequest,
        auth: &[u8],
        charge: Option<crate::budget::Charge>,
    ) -> Result<pb::GetSessionFilesResponse, SessionError> {
        let _in_progress = self.engine.admission().request();
        let s = self.find(&req.session_id, auth)?;
        s.touch();
        let paths = validate::fetch_files(&req.paths).map_err(|e| match e {
            ExecError::InvalidArgument { field, message } => {
                ExecError::invalid(field.replacen("fetch_files", "paths", 1), message)
            }
            e => e,
        })?;
        let work = s.work(&self.engine).await?;
        let caps = self.engine.fetch_caps();
        let (files, refused) = blocking(move || crate::fetch::read(&work, paths, caps, charge.as_ref())).await?;
        Ok(pb::GetSessionFilesResponse {
            files,
            errors: refused
                .into_iter()
                .map(|(path, message)| pb::SessionFileError { path, message })
                .collect(),
        })
    }

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

    /// Ends one session (see [`Self::end_all`]); returns how many calls it served.
    async fn end(&self, s: &Arc<Session>, why: &'static str) -> u32 {
        let one = [(s.clone(), why)];
        self.end_all(&one).await.first().copied().unwrap_or(0)
    }

    /// Removes the sessions of `all` (each with why it ends), stops what runs in them, waits
    /// until the host sees none of their processes, then frees their seats; answers how many
    /// calls each served. All at once: one `/proc` scan a round covers every uid, so hundreds
    /// of sessions expiring together cost what one does. A seat whose processes outlived
    /// [`KILL_WAIT`] is never handed on (logged).
    async fn end_all(&self, all: &[(Arc<Session>, &'static str)]) -> Vec<u32> {
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
    async fn reap(&self) {
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
                            Some((s.clone(), "lifetime reached"))
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

/// What a session's interpreter is started with, its lifetime as the wall time: a spare
/// started for the same serves it (see spares.rs). A longer lifetime than the spare's would
/// outlive the spare's wall-time backstop.
fn spare_key(totals: &Totals, call_limits: &Limits) -> Limits {
    Limits {
        wall: totals.lifetime,
        cpu: totals.cpu,
        memory: totals.memory,
        ..*call_limits
    }
}

impl SessionManager {
    /// [`spare_key`] of a session created with the default limits.
    fn default_spare_key(&self) -> Option<Limits> {
        let engine = &self.engine;
        let totals = policy::resolve(self.policy(), engine.policy(), None, engine.work_dir_bytes()).ok()?;
        let call_limits = engine
            .policy()
            .resolve(None, &engine.policy().run_defaults, "call_limits")
            .ok()?;
        Some(spare_key(&totals, &call_limits))
    }
}

/// Starts the interpreter of session `s` (a call of it holds a run slot meanwhile).
async fn start_repl(
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
const BOOT_DELAY: Duration = Duration::from_millis(50);

/// Starts a new Python session's interpreter in the background, so that its first call
/// seldom waits for it: [`BOOT_DELAY`] after create, through `gate` (a start permit for a
/// forked start; a run slot, queued with the creator's tenant and priority, for a cold one),
/// held until the interpreter is ready. A burst of creates starts their interpreters a few
/// at a time beside the other work, and a session closed before its turn (a probe, a create
/// the caller gave up on) costs no interpreter: starting one is most of a session's cost. A
/// call that comes first starts the interpreter itself.
fn boot(engine: Arc<Engine>, s: Arc<Session>, warm: Option<Arc<crate::sandbox::ZygoteConfig>>, gate: StartGate) {
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

/// How often the reaper measures the sessions' memory (one cgroup read per session).
const MEASURE_EVERY: u32 = 8;

async fn reaper(m: Weak<SessionManager>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for round in 0u32.. {
        tick.tick().await;
        let Some(m) = m.upgrade() else { return };
        m.reap().await;
        if round % MEASURE_EVERY == 0 {
            m.measure().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_long_random_and_distinct() {
        let a = new_id("pool-7f9c-x2").unwrap();
        let b = new_id("pool-7f9c-x2").unwrap();
        let (hex, name) = a.split_at(32);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_eq!(name, "-pool-7f9c-x2", "the executor's name follows, for the gateway");
        assert_ne!(a, b);
    }

    #[test]
    fn request_files_stay_out_of_the_session_dir() {
        let f = |p: &str| pb::File {
            path: p.into(),
            content: b"x".to_vec(),
            executable: false,
        };
        let e = check_files(&[f("a.txt"), f("./.sandpool/cwd")], "files", 1 << 20).unwrap_err();
        assert!(e.to_string().starts_with("files[1].path"), "{e}");
        assert!(check_files(&[f("a.txt"), f("src/b.py")], "files", 1 << 20).is_ok());
        let e = check_files(&[f("../x")], "files", 1 << 20).unwrap_err();
        assert!(e.to_string().starts_with("files[0].path"), "{e}");
    }
}
