//! Pause and resume (docs/sessions.md, "Pause and resume"): a session's /work is archived by
//! `tar` run inside its own seat, its bytes put in the session store with a record of the
//! session beside them, and the session ended; resuming takes a fresh seat, extracts the
//! archive with `tar` inside it, and cold-starts the interpreter under the same id.
//!
//! The executor never reads what the session wrote: it hands the archive's bytes from the
//! sandbox's stdout to the store, and from the store to the sandbox's stdin. The record is
//! the executor's own (who may resume it, the limits, the counters).

use super::call::Input;
use super::caps::Creating;
use super::record::{Extras, Kind, Session, SessionInfo, State};
use super::startup::Ensured;
use super::{SessionError, SessionManager, policy::Totals};
use crate::admission::{Admit, Ticket};
use crate::call::Call;
use crate::error::ExecError;
use crate::limits::Limits;
use crate::metrics::Phase;
use crate::sandbox::{RunSpec, WorkDir};
use sandpool_proto::v1 as pb;
use sandpool_store::{BlobKey, Mode, PutOptions, Store, StoreConfig, StoreError};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// The record's format; a store written by a later one is refused, not misread.
const RECORD_VERSION: u32 = 1;
/// Longest an archive or an extraction may take.
const TAR_WALL: Duration = Duration::from_secs(120);
/// Room an archive gets beyond /work's size (tar's headers: 512 bytes a file and a block
/// at the end).
const TAR_HEADROOM: u64 = 64 << 20;
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where paused sessions are kept, and for how long ([`SessionManager::use_store`]).
#[derive(Debug)]
pub(super) struct StoreSlot {
    cfg: StoreConfig,
    ttl: Duration,
    store: tokio::sync::OnceCell<Arc<Store>>,
    /// What the data plane may look up here ([`SessionManager::paused_in_store`]).
    lookups: super::lookups::Lookups,
    /// When the next sweep is due ([`SessionManager::sweep_store_when_due`]).
    next_sweep: std::sync::Mutex<Option<std::time::Instant>>,
    /// A sweep runs now.
    sweeping: std::sync::atomic::AtomicBool,
}

/// A session this executor paused: enough to answer its calls (FAILED_PRECONDITION for its
/// owner) and to resume it implicitly (auto-resume) without its caller's tenant.
#[derive(Debug, Clone)]
pub(super) struct Paused {
    owner: Vec<u8>,
    ticket: Ticket,
    auto_resume: bool,
    /// Paused by this executor's drain: its calls here are told to retry elsewhere.
    drained: bool,
    /// SHA-256 of its data-plane secrets ([`Record::token_sha256`]): a data-plane call that
    /// carries one resumes it when `auto_resume` ([`SessionManager::resume_by_access`]).
    tokens: Vec<[u8; 32]>,
}

/// A resume's claim on a paused session's blob, given back when dropped unless the resume took
/// the blob (`store` taken).
struct Claim {
    store: Option<Arc<Store>>,
    key: BlobKey,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let Some(store) = self.store.take() else { return };
        let key = self.key.clone();
        // Drop cannot wait; the runtime is there (a resume runs on it).
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = store.release(&key).await {
                    tracing::warn!(%key, error = %e, "giving back a resume's claim failed");
                }
            });
        }
    }
}

/// How long a resume's claim on a paused session holds before another executor may take it
/// over (its taker died mid-resume): past any extraction ([`TAR_WALL`]).
const CLAIM_STALE: Duration = Duration::from_secs(600);

/// What the store keeps beside a paused session's archive: the executor's, never the session's.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Record {
    v: u32,
    pub(super) id: String,
    tenant: String,
    /// SHA-256 of who may resume it ([`stable_owner`]), hex.
    owner_sha256: String,
    pub(super) language: String,
    pub(super) mode: Mode,
    lifetime_ms: u64,
    idle_ms: u64,
    max_calls: u32,
    memory: u64,
    cpu_ms: u64,
    disk: u64,
    call_wall_ms: u64,
    call_cpu_ms: u64,
    call_memory: u64,
    call_output: u64,
    call_processes: u32,
    call_file_size: u64,
    calls: u32,
    cpu_used_ms: u64,
    template: String,
    metadata: BTreeMap<String, String>,
    home: bool,
    auto_resume: bool,
    /// It had a data-plane secret (E2B): a resumed one gets a fresh one, since the record is
    /// not encrypted and so never holds the secret itself. Absent in older records: none.
    #[serde(default)]
    access_token: bool,
    /// SHA-256 (hex) of the secrets given so far, the last [`MAX_EARLIER_TOKENS`]: still taken
    /// after the resume (an E2B client that kept its handle, `sbx.connect()`).
    #[serde(default)]
    token_sha256: Vec<String>,
    /// Paused by its executor's drain (docs/sessions.md, "Surviving the pod"): its next call
    /// on any executor resumes it, whatever `auto_resume` says.
    #[serde(default)]
    drained: bool,
    /// On an open executor, the owner sealed under the session's access token
    /// ([`super::owner_seal`]), so that a data-plane call carrying the token resumes it
    /// anywhere. Absent for tenants' sessions (their owner is the tenant) and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner_sealed: Option<String>,
    /// [`Extras::pause_on_timeout`] (E2B's `autoPause`), kept for its next end.
    #[serde(default)]
    pause_on_timeout: Option<Mode>,
    /// [`Extras::end_after`], milliseconds: the end a resumed session gets again.
    #[serde(default)]
    end_after_ms: Option<u64>,
    /// A snapshot's: the session it was taken of (E2B's `list_snapshots(sandbox_id)`).
    /// Absent in pauses and in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) source: Option<String>,
}

impl Record {
    /// The record beside a stored blob, when this executor reads it.
    pub(super) fn of(meta: &sandpool_store::Meta) -> Option<Record> {
        let r: Record = serde_json::from_value(meta.record.clone()?).ok()?;
        (r.v == RECORD_VERSION).then_some(r)
    }

    /// Whether it is session `id` of `auth` (of `ticket`'s tenant).
    pub(super) fn owned_by(&self, id: &str, ticket: &Ticket, auth: &[u8]) -> bool {
        self.id == id && bool::from(self.owner_sha256.as_bytes().ct_eq(owner_hash(ticket, auth).as_bytes()))
    }

    /// What its holder sees of the paused session `meta` keeps: started when it was paused,
    /// ending when the store lets it go.
    pub(super) fn info(&self, meta: &sandpool_store::Meta) -> SessionInfo {
        SessionInfo {
            id: self.id.clone(),
            language: self.language.clone(),
            template: self.template.clone(),
            metadata: self.metadata.clone(),
            access_token: None,
            started_at: meta.created(),
            end_at: meta.created() + Duration::from_secs(meta.ttl_secs),
            totals: self.totals(),
            paused: true,
        }
    }
}

/// The archive's member holding a full pause's interpreter state (the driver's
/// `STATE_OUT`): /work's members all start with `./`, so none is this one.
const STATE_MEMBER: &str = "sandpool-state";
/// Extraction puts it at the driver's `STATE_IN` (the transform leaves link targets alone).
const STATE_EXTRACT: &str = "--transform=s,^sandpool-state$,.sandpool/state,SH";
/// Longest path below /work that extraction can create (PATH_MAX less its NUL).
const MAX_PATH: usize = 4095;
/// The exit of [`LONG_PATHS_FIRST`] that found such a path (tar's own are 0 to 2).
const LONG_PATH_EXIT: i32 = 3;
/// Runs before an archive's `tar` (its arguments follow): finds a path under /work longer
/// than [`MAX_PATH`] (`.` matches a newline in find's regexes too) and exits 3 naming it.
const LONG_PATHS_FIRST: &str = r#"cd /work || exit 2
long=$(find . -regextype posix-extended \( -path ./.sandpool -prune \) -o \( -regex '.{4096,}' -print -quit \) | head -c 200)
if [ -n "$long" ]; then printf '%s' "$long" >&2; exit 3; fi
exec tar "$@""#;

/// Names reported as not kept, at most; and their length.
const MAX_NOT_KEPT: usize = 1000;
const MAX_NAME_CHARS: usize = 200;

pub(super) fn record_mode(mode: pb::PauseMode) -> Mode {
    match mode {
        pb::PauseMode::Full => Mode::Full,
        _ => Mode::Filesystem,
    }
}

/// What a full pause's interpreter said it saved (its own answer: bounded, never trusted
/// for more than a list of names to report back to the session's owner).
#[derive(Debug, Default)]
pub(super) struct Saved {
    written: bool,
    not_kept: Vec<String>,
}

#[derive(serde::Deserialize)]
struct SaveAnswer {
    #[serde(default)]
    saved: bool,
    #[serde(default)]
    not_kept: Vec<String>,
}

impl Record {
    /// The record of `meta`'s blob if it is `id`'s and `ticket`'s `auth` owns it; else NOT_FOUND.
    pub(super) fn owned(
        meta: &sandpool_store::Meta,
        id: &str,
        ticket: &Ticket,
        auth: &[u8],
    ) -> Result<Record, SessionError> {
        let rec: Record = meta
            .record
            .clone()
            .and_then(|r| serde_json::from_value(r).ok())
            .ok_or_else(|| ExecError::Internal(format!("the stored session {id} has no record this executor reads")))?;
        if rec.v != RECORD_VERSION {
            return Err(ExecError::Internal(format!("the stored session's record is version {}", rec.v)).into());
        }
        let owned = bool::from(rec.owner_sha256.as_bytes().ct_eq(owner_hash(ticket, auth).as_bytes()));
        if rec.id != id || !owned {
            return Err(SessionError::NotFound);
        }
        Ok(rec)
    }

    pub(super) fn kind(&self) -> Result<Kind, SessionError> {
        match self.language.as_str() {
            "python" => Ok(Kind::Python),
            "bash" => Ok(Kind::Bash),
            other => Err(ExecError::Internal(format!("the stored session's language {other:?}")).into()),
        }
    }

    pub(super) fn totals(&self) -> Totals {
        Totals {
            lifetime: Duration::from_millis(self.lifetime_ms),
            idle: Duration::from_millis(self.idle_ms),
            calls: self.max_calls,
            memory: self.memory,
            cpu: Duration::from_millis(self.cpu_ms),
            disk: self.disk,
        }
    }

    pub(super) fn call_limits(&self) -> Limits {
        Limits {
            wall: Duration::from_millis(self.call_wall_ms),
            cpu: Duration::from_millis(self.call_cpu_ms),
            memory: self.call_memory,
            output: self.call_output,
            processes: self.call_processes,
            file_size: self.call_file_size,
        }
    }
}

/// The proto's name for a stored pause mode.
fn proto_mode(m: Mode) -> pb::PauseMode {
    match m {
        Mode::Full => pb::PauseMode::Full,
        Mode::Filesystem => pb::PauseMode::Filesystem,
    }
}

/// How many earlier data-plane secrets a resumed session still takes.
const MAX_EARLIER_TOKENS: usize = 8;

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// The 32 bytes a hex SHA-256 names; None for anything else.
fn unhex32(h: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if h.len() != 64 {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Who owns a session, the same on every executor: an authenticated tenant (its caller bytes
/// carry an identity that is per process; the tenant is already the store key's), or the
/// `authorization` an open executor's caller sent.
fn stable_owner(ticket: &Ticket, owner: &[u8]) -> Vec<u8> {
    match ticket.tenant.authenticated {
        true => [b"tenant\0".as_slice(), ticket.tenant.name.as_bytes()].concat(),
        false => owner.to_vec(),
    }
}

pub(super) fn owner_hash(ticket: &Ticket, owner: &[u8]) -> String {
    hex(&Sha256::digest(stable_owner(ticket, owner)))
}

pub(super) fn store_error(e: StoreError) -> SessionError {
    match e {
        StoreError::NotFound(_) => SessionError::NotFound,
        StoreError::BlobTooLarge { .. } | StoreError::QuotaExceeded { .. } => SessionError::Exhausted(e.to_string()),
        // The store is down or hung, not this executor: a retry (here or on another
        // executor sharing the store) may find it back.
        StoreError::TimedOut { .. } | StoreError::Backend(_) => {
            SessionError::Retry(format!("the session store is unavailable, retry: {e}"))
        }
        other => ExecError::Internal(format!("session store: {other}")).into(),
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// A run of `tar` (found in the sandbox's PATH) in a seat: no interpreter, the session's memory.
fn tar_spec(args: &[&str], stdin: Vec<u8>, memory: u64, output: u64, file_size: u64) -> RunSpec {
    let mut argv = vec!["tar".to_owned()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    RunSpec {
        argv,
        env: vec![("PATH".into(), PATH.into()), ("LC_ALL".into(), "C".into())],
        stdin,
        limits: Limits {
            wall: TAR_WALL,
            cpu: TAR_WALL,
            memory,
            output,
            processes: 4,
            file_size,
        },
        gpu: false,
        warm: None,
    }
}

/// Why a tar run failed, for the caller.
fn tar_failed(what: &str, r: &crate::engine::Phased) -> SessionError {
    let stderr = String::from_utf8_lossy(&r.result.stderr);
    let detail = r
        .error
        .clone()
        .unwrap_or_else(|| stderr.trim().chars().take(500).collect());
    ExecError::Internal(format!(
        "{what} failed ({:?}, exit {}): {detail}",
        r.verdict, r.result.exit_code
    ))
    .into()
}

impl SessionManager {
    /// Keeps paused sessions in the store `cfg` names, for `ttl` (opened on first use).
    pub fn use_store(&self, cfg: StoreConfig, ttl: Duration) {
        let _ = self.store.set(StoreSlot {
            cfg,
            ttl,
            store: tokio::sync::OnceCell::new(),
            lookups: super::lookups::Lookups::default(),
            next_sweep: std::sync::Mutex::new(None),
            sweeping: std::sync::atomic::AtomicBool::new(false),
        });
    }

    /// Sweeps the store (what its TTL has passed, orphans, stale claims) in the background
    /// once every `store_sweep` of the policy, never two at once: without it nothing a TTL
    /// ends would ever be deleted.
    pub(super) fn sweep_store_when_due(self: &Arc<Self>) {
        let (Some(slot), Some(every)) = (self.store.get(), self.policy.store_sweep) else {
            return;
        };
        let now = std::time::Instant::now();
        {
            let Ok(mut next) = slot.next_sweep.lock() else { return };
            match *next {
                // The first one a while after start, not at once with every pod of a rollout.
                None => {
                    *next = Some(now + every.min(Duration::from_secs(60)));
                    return;
                }
                Some(t) if now < t => return,
                Some(_) => *next = Some(now + every),
            }
        }
        if slot.sweeping.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let m = self.clone();
        tokio::spawn(async move {
            if let Ok((store, _)) = m.store().await {
                match store.sweep(std::time::SystemTime::now()).await {
                    Ok(r) => tracing::info!(report = ?r, "swept the session store"),
                    Err(e) => tracing::warn!(error = %e, "sweeping the session store failed"),
                }
            }
            if let Some(slot) = m.store.get() {
                slot.sweeping.store(false, std::sync::atomic::Ordering::Release);
            }
        });
    }

    /// Whether sessions can be paused here (a store is configured).
    pub fn has_store(&self) -> bool {
        self.store.get().is_some()
    }

    pub(super) async fn store(&self) -> Result<(&Arc<Store>, Duration), SessionError> {
        let slot = self.store.get().ok_or_else(|| {
            ExecError::Unavailable(
                "sessions".into(),
                "this executor has no session store, so sessions cannot be paused".into(),
            )
        })?;
        let store = slot
            .store
            .get_or_try_init(|| async { Store::open(slot.cfg.clone()).await.map(Arc::new) })
            .await
            .map_err(store_error)?;
        Ok((store, slot.ttl))
    }

    /// The error a call on a session that is not live gets: `session paused` for the owner of
    /// one this executor paused, else NOT_FOUND.
    pub(super) fn not_live(&self, id: &str, auth: &[u8]) -> SessionError {
        match self.paused_entry(id, auth) {
            Some(p) if p.drained => super::drain::drained_here(),
            Some(_) => SessionError::Paused,
            None => SessionError::NotFound,
        }
    }

    fn paused_entry(&self, id: &str, auth: &[u8]) -> Option<Paused> {
        let p = self.paused.lock().ok()?.get(id).cloned()?;
        bool::from(p.owner.as_slice().ct_eq(auth)).then_some(p)
    }

    /// Whether `auth`'s paused session `id` asked to be resumed by its next call.
    pub(super) fn auto_resumes(&self, id: &str, auth: &[u8]) -> Option<Ticket> {
        self.paused_entry(id, auth).filter(|p| p.auto_resume).map(|p| p.ticket)
    }

    /// Whether this executor paused `id` (whoever asks).
    pub(super) fn paused_here(&self, id: &str) -> bool {
        self.paused.lock().is_ok_and(|p| p.contains_key(id))
    }

    /// Whether the store holds `id` of `ticket`'s tenant paused so that its next call resumes
    /// it (by a drain, or with `auto_resume`); false when it holds none.
    pub(super) async fn resumes_implicitly(&self, id: &str, ticket: &Ticket) -> Result<bool, SessionError> {
        let (store, _) = self.store().await?;
        let Ok(key) = BlobKey::paused(&ticket.tenant.name, id) else {
            return Ok(false);
        };
        let meta = match store.head(&key).await {
            Ok(m) => m,
            Err(StoreError::NotFound(_)) => return Ok(false),
            Err(e) => return Err(store_error(e)),
        };
        let rec: Option<Record> = meta.record.and_then(|r| serde_json::from_value(r).ok());
        Ok(rec.is_some_and(|r| r.drained || r.auto_resume))
    }

    /// Resumes paused session `id` for a data-plane call carrying one of its secrets (E2B's
    /// traffic resume): one this executor paused with auto-resume, or one any executor
    /// sharing the store paused by its drain or with auto-resume ([`Self::paused_in_store`]);
    /// then answers as [`Self::by_access`]. Any other id or secret: NOT_FOUND.
    pub async fn resume_by_access(
        &self,
        id: &str,
        token: &[u8],
    ) -> Result<(Vec<u8>, Arc<crate::tenants::Tenant>), SessionError> {
        let h = Sha256::digest(token);
        let local = self.paused.lock().ok().and_then(|m| m.get(id).cloned());
        let (owner, ticket) = match local {
            Some(p) => {
                let held = p.tokens.iter().any(|t| bool::from(t.as_slice().ct_eq(h.as_slice())));
                // Paused by this executor's drain: the call goes to one that stays.
                if held && p.drained {
                    return Err(super::drain::drained_here());
                }
                if !p.auto_resume || !held {
                    return Err(SessionError::NotFound);
                }
                (p.owner, p.ticket)
            }
            // An executor going away resumes nothing; another may hold it or resume it.
            None if self.engine.admission().is_draining() => return Err(super::drain::not_here_while_draining()),
            None => self.paused_in_store(id, token).await?,
        };
        let _in_progress = self.engine.admission().request();
        self.resume_as(id, &owner, &ticket).await?;
        self.by_access(id, token)
    }

    /// A session another executor paused into the shared store so that its next call
    /// resumes it (its drain, or auto-resume), under one of the tenants this executor serves,
    /// whose record holds `token_sha256` among its secrets' hashes: its owner and ticket here.
    /// A data-plane call names no tenant, so each is looked up (a store HEAD each). An open
    /// executor's sessions are owned by their caller's `authorization`, which a data-plane
    /// call does not carry: the record holds it sealed under the access token
    /// ([`super::owner_seal`]), which the call presents.
    /// Bounded ([`super::lookups`]): an id no executor makes costs no read, and the reads
    /// share a token bucket; past it the call is told to retry.
    async fn paused_in_store(&self, id: &str, token: &[u8]) -> Result<(Vec<u8>, Ticket), SessionError> {
        let Some(slot) = self.store.get() else {
            return Err(SessionError::NotFound);
        };
        let token_sha256 = Sha256::digest(token);
        let token_sha256 = token_sha256.as_slice();
        let tenants: Vec<Arc<crate::tenants::Tenant>> = match self.tenants.get() {
            Some(t) if !t.is_open() => t.table().tenants().filter(|t| t.authenticated).cloned().collect(),
            // Open: the anonymous tenant's, each owned by what its caller sent.
            Some(_) => vec![crate::tenants::Tenant::anonymous()],
            None => return Err(SessionError::NotFound),
        };
        if !super::lookups::session_shaped(id) {
            return Err(SessionError::NotFound);
        }
        if !slot.lookups.take() {
            return Err(SessionError::Retry(
                "too many calls for sandboxes this executor does not hold: retry shortly".into(),
            ));
        }
        let (store, _) = self.store().await?;
        for tenant in tenants {
            let Ok(key) = BlobKey::paused(&tenant.name, id) else {
                continue;
            };
            self.engine.metrics().session_store_lookups.inc();
            let meta = match store.head(&key).await {
                Ok(m) => m,
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(store_error(e)),
            };
            let Some(rec) = Record::of(&meta) else {
                continue;
            };
            let held = rec
                .token_sha256
                .iter()
                .filter_map(|t| unhex32(t))
                .fold(false, |any, t| any | bool::from(t.ct_eq(token_sha256)));
            if rec.id != id || rec.tenant != *tenant.name || !(rec.drained || rec.auto_resume) || !held {
                continue;
            }
            let Ok(priority) = tenant.priority(None) else {
                continue;
            };
            let ticket = Ticket { tenant, priority };
            let owner = match ticket.tenant.authenticated {
                true => crate::call::Caller::of(&ticket.tenant, None).into_bytes(),
                // Opened with the call's token, and still the owner the record names.
                false => match rec
                    .owner_sealed
                    .as_deref()
                    .and_then(|s| super::owner_seal::open(token, s))
                {
                    Some(o) if bool::from(rec.owner_sha256.as_bytes().ct_eq(owner_hash(&ticket, &o).as_bytes())) => o,
                    _ => continue,
                },
            };
            return Ok((owner, ticket));
        }
        Err(SessionError::NotFound)
    }

    /// Pauses a session (see the module's doc).
    pub async fn pause(
        &self,
        req: pb::PauseSessionRequest,
        auth: &[u8],
    ) -> Result<pb::PauseSessionResponse, SessionError> {
        let _in_progress = self.engine.admission().request();
        let mode = match pb::PauseMode::try_from(req.mode) {
            Ok(pb::PauseMode::Unspecified | pb::PauseMode::Filesystem) => pb::PauseMode::Filesystem,
            Ok(pb::PauseMode::Full) => pb::PauseMode::Full,
            Err(_) => return Err(ExecError::invalid("mode", format!("unknown pause mode {}", req.mode)).into()),
        };
        let s = self.find(&req.session_id, auth)?;
        if mode == pb::PauseMode::Full && s.kind != Kind::Python {
            return Err(ExecError::invalid(
                "mode",
                "FULL keeps a Python interpreter's state; a bash session pauses in FILESYSTEM mode",
            )
            .into());
        }
        self.pause_live(&s, mode).await
    }

    /// Pauses the idle sessions past `--session-pause-after-idle-ms`, each in a task of its
    /// own; one that fails stays live (and ends at its idle timeout as before).
    pub(super) fn auto_pause(self: &Arc<Self>) {
        let Some(after) = self.policy.pause_after_idle else {
            return;
        };
        if self.store.get().is_none() {
            return;
        }
        let due: Vec<Arc<Session>> = self
            .sessions
            .lock()
            .map(|m| {
                m.values()
                    .filter(|s| s.idle_for() >= after && s.state.try_lock().is_ok())
                    .filter(|s| !s.pausing.swap(true, std::sync::atomic::Ordering::Relaxed))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for s in due {
            let m = self.clone();
            tokio::spawn(async move {
                let t = std::time::Instant::now();
                match m.pause_live(&s, super::drain::keep_most(s.kind)).await {
                    // `ms`: what bench/sessions.py reports as the idle pauses' latency.
                    Ok(p) => {
                        let ms = t.elapsed().as_millis() as u64;
                        tracing::info!(session = %&s.id[..8], bytes = p.stored_bytes, ms, "idle session paused")
                    }
                    Err(e) => {
                        tracing::warn!(session = %&s.id[..8], error = %e, "pausing an idle session failed");
                        s.pausing.store(false, std::sync::atomic::Ordering::Relaxed);
                        s.touch();
                    }
                }
            });
        }
    }

    pub(super) async fn pause_live(
        &self,
        s: &Arc<Session>,
        mode: pb::PauseMode,
    ) -> Result<pb::PauseSessionResponse, SessionError> {
        let auth = s.owner.as_slice();
        let (store, ttl) = self.store().await?;
        let key = BlobKey::paused(&s.tenant, &s.id).map_err(store_error)?;
        let mut closed = s.closed.subscribe();
        // No call runs while /work is archived.
        let st = tokio::select! {
            st = s.state.lock() => st,
            _ = closed.wait_for(|c| *c) => return Err(self.not_live(&s.id, auth)),
        };
        if *s.closed.borrow() {
            return Err(self.not_live(&s.id, auth));
        }
        let mut st = st;
        let (archive, saved) = self.archive(s, &mut st, mode).await?;
        let record = record(s, &st, record_mode(mode), self.engine.admission().is_draining());
        let tokens: Vec<[u8; 32]> = record.token_sha256.iter().filter_map(|h| unhex32(h)).collect();
        let record = serde_json::to_value(&record).map_err(|e| ExecError::Internal(format!("record: {e}")))?;
        let opts = PutOptions {
            mode: record_mode(mode),
            ttl,
            session: Some(s.id.clone()),
            record: Some(record),
        };
        let meta = store.put(&key, opts, archive.as_slice()).await.map_err(store_error)?;
        if let Ok(mut p) = self.paused.lock() {
            p.insert(
                s.id.clone(),
                Paused {
                    owner: s.owner.clone(),
                    ticket: s.ticket.clone(),
                    auto_resume: s.auto_resume,
                    drained: self.engine.admission().is_draining(),
                    tokens,
                },
            );
        }
        // From here its calls see it paused; ending it kills what it runs and frees its seat.
        s.closed.send_replace(true);
        drop(st);
        self.end(s, "paused").await;
        Ok(pb::PauseSessionResponse {
            mode: mode as i32,
            stored_bytes: meta.size,
            lost_names: saved.map(|s| s.not_kept).unwrap_or_default(),
        })
    }

    /// Asks the session's interpreter to write what it can keep of its state (full mode).
    /// No live interpreter: nothing to keep. An interpreter that does not answer loses it all
    /// (`*`), /work is still paused.
    async fn save_state(&self, s: &Arc<Session>, st: &mut State) -> Result<Saved, SessionError> {
        if st.abandoned || !st.repl.as_ref().is_some_and(|r| r.alive()) {
            return Ok(Saved::default());
        }
        let limits = Limits {
            wall: TAR_WALL,
            cpu: TAR_WALL,
            output: s.call_limits.output.max(1 << 20),
            ..s.call_limits
        };
        let request = serde_json::json!({"kind": "save", "max_bytes": self.engine.work_dir_bytes()});
        let resp = {
            let _permit = self.engine.acquire_as(&s.ticket, None, Admit::Continuing).await?;
            self.share(s, crate::sandbox::SeatShare::Grow(s.totals.memory)).await;
            let resp = self
                .run_python(
                    s,
                    st,
                    Input::Request(request),
                    Vec::new(),
                    limits,
                    Some(Ensured::default()),
                )
                .await;
            // Back to its idle share, should the pause fail after this and leave it live.
            self.share(s, super::caps::idle_share(s)).await;
            resp?
        };
        let answer = (resp.verdict == pb::Verdict::Ok as i32)
            .then(|| serde_json::from_str::<SaveAnswer>(&resp.display).ok())
            .flatten();
        Ok(match answer {
            Some(a) => Saved {
                written: a.saved,
                not_kept: a
                    .not_kept
                    .into_iter()
                    .take(MAX_NOT_KEPT)
                    .map(|n| n.chars().take(MAX_NAME_CHARS).collect())
                    .collect(),
            },
            None => Saved {
                written: false,
                not_kept: vec!["*".into()],
            },
        })
    }

    /// Archives `s`'s /work in `mode` (its call state `st` held, so no call runs meanwhile):
    /// `tar` inside its seat under a run slot. Pause, snapshot and fork all come here.
    /// A seat runs one sandboxed run at a time: the interpreter goes first (its state is not
    /// kept in this mode), and the session's next call starts a fresh one.
    pub(super) async fn archive(
        &self,
        s: &Arc<Session>,
        st: &mut State,
        mode: pb::PauseMode,
    ) -> Result<(Vec<u8>, Option<Saved>), SessionError> {
        // Full mode: the interpreter writes what it can keep into .sandpool (archived below).
        let saved = match mode {
            pb::PauseMode::Full => Some(self.save_state(s, st).await?),
            _ => None,
        };
        // A seat runs one sandboxed run at a time: the interpreter goes first. A pause that
        // fails after this leaves the session live, its next call starting a fresh interpreter.
        if let Some(r) = st.repl.take() {
            let _ = r.kill().await;
        }
        let work = s.work(&self.engine).await?;
        let _permit = self.engine.acquire_as(&s.ticket, None, Admit::Continuing).await?;
        let limit = self.engine.work_dir_bytes().saturating_mul(2) + TAR_HEADROOM;
        // Links stay links; the session's own directory (requests, replies, the reserve)
        // stays out, but for the interpreter's state in full mode: a member named without
        // `./`, so never one of /work's (see STATE_MEMBER).
        let mut args = vec![
            "--create",
            "--file=-",
            "--directory=/work",
            "--exclude=./.sandpool",
            "--numeric-owner",
            // Holes stay holes: a sparse file's apparent size would otherwise be stored,
            // so a /work holding nearly nothing could fill the archive's bound, the
            // executor's memory and the tenant's store (extraction keeps them sparse).
            "--sparse",
            ".",
        ];
        if saved.as_ref().is_some_and(|s| s.written) {
            args.extend(["--directory=/work/.sandpool", STATE_MEMBER]);
        }
        let mut spec = tar_spec(&args, Vec::new(), s.totals.memory, limit, 0);
        // A path tar could archive but not extract (the kernel takes at most PATH_MAX
        // bytes a call) would leave a paused session that never resumes: refused first.
        spec.argv
            .splice(0..1, ["sh", "-c", LONG_PATHS_FIRST, "sh"].map(String::from));
        // The seat's share is what it held idle (its files' pages, plus a little): `sh`,
        // `find` and `tar` start in room above that, given back when they end ("Cannot fork"
        // lost a session in a drain on the real node otherwise).
        let held = s.memory.load(std::sync::atomic::Ordering::Relaxed);
        let want = s.totals.memory.min(held.saturating_add(EXTRACT_SLACK));
        self.share(s, crate::sandbox::SeatShare::Grow(want)).await;
        let r = self.engine.run_phase_in(s.seat, &work, &spec, Phase::Run).await;
        self.share(s, super::caps::idle_share(s)).await;
        if r.result.exit_code == LONG_PATH_EXIT && r.result.stdout.is_empty() {
            let path: String = String::from_utf8_lossy(&r.result.stderr).chars().take(200).collect();
            return Err(SessionError::Exhausted(format!(
                "a path in /work is longer than a resume can restore ({MAX_PATH} bytes), so it cannot be paused: {path}...; shorten it and try again"
            )));
        }
        if r.result.stdout_truncated {
            return Err(SessionError::Exhausted(format!(
                "the archive of /work passed {limit} bytes; remove files and try again"
            )));
        }
        if r.verdict != pb::Verdict::Ok {
            return Err(tar_failed("archiving /work", &r));
        }
        Ok((r.result.stdout, saved))
    }

    /// Resumes `call`'s paused session (see the module's doc); a live one answers as it is.
    pub async fn resume(
        &self,
        req: pb::ResumeSessionRequest,
        call: Call,
    ) -> Result<pb::ResumeSessionResponse, SessionError> {
        let _in_progress = self.engine.admission().request();
        let ticket = self.engine.ticket(&call, 0, "priority")?;
        let auth = call.caller.into_bytes();
        let s = match self.find(&req.session_id, &auth) {
            Ok(s) => s,
            Err(SessionError::NotFound | SessionError::Paused) => {
                self.resume_as(&req.session_id, &auth, &ticket).await?
            }
            Err(e) => return Err(e),
        };
        let calls = s.state.lock().await.calls;
        Ok(pb::ResumeSessionResponse {
            session_id: s.id.clone(),
            executor_address: self.advertise.clone(),
            language: s.language.clone(),
            session_limits: Some(s.totals.to_proto()),
            call_limits: Some(crate::limits::to_proto(s.call_limits)),
            calls_left: s.totals.calls.saturating_sub(calls),
            executor: Some(self.engine.info("")),
        })
    }

    /// Resumes paused session `id` of `ticket`'s tenant for `auth`, its owner.
    pub(super) async fn resume_as(&self, id: &str, auth: &[u8], ticket: &Ticket) -> Result<Arc<Session>, SessionError> {
        // One resume of `id` at a time here: a second caller finds it live after. Other
        // sessions' resumes do not wait for this one.
        let _one = self.resuming.lock(id).await;
        if let Ok(s) = self.find(id, auth) {
            return Ok(s);
        }
        let (store, _) = self.store().await?;
        // Another tenant's key is another key: its session is not found.
        let key = BlobKey::paused(&ticket.tenant.name, id).map_err(|_| SessionError::NotFound)?;
        let meta = store.head(&key).await.map_err(store_error)?;
        let rec = Record::owned(&meta, id, ticket, auth)?;
        let kind = rec.kind()?;
        self.engine.language(&rec.language, "language")?;
        // Fetched only under the run slot its extraction takes (`create::open`), so resumes
        // at once hold at most a slot's worth of archives in memory.
        let archive = Stored::Blob {
            store: store.clone(),
            key: key.clone(),
        };
        let _creating: Creating<'_> = self.admit(ticket)?;
        // Exactly one executor resumes it: the loser is told to retry (and finds it live on
        // the winner, through the gateway).
        store.claim(&key, CLAIM_STALE).await.map_err(|e| match e {
            StoreError::Claimed(_) => {
                SessionError::Retry(format!("session {id} is being resumed by another executor: retry"))
            }
            e => store_error(e),
        })?;
        // Given back however this resume ends short of taking the blob: an error, or its
        // caller going away mid-extraction (the call's future dropped), which used to leave
        // the session unresumable until the claim went stale.
        let mut claim = Claim {
            store: Some(store.clone()),
            key: key.clone(),
        };
        let (totals, call_limits) = (rec.totals(), rec.call_limits());
        let extras = Extras {
            access_token: rec.access_token,
            metadata: rec.metadata,
            template: rec.template,
            home: rec.home,
            end_after: rec.end_after_ms.map(Duration::from_millis),
            auto_resume: rec.auto_resume,
            earlier_tokens: rec.token_sha256.iter().filter_map(|h| unhex32(h)).collect(),
            pause_on_timeout: rec.pause_on_timeout.map(proto_mode),
        };
        let opened = self
            .open(
                kind,
                rec.language,
                totals,
                call_limits,
                Vec::new(),
                auth.to_vec(),
                ticket,
                extras,
                Some((Some(id.to_owned()), archive)),
            )
            .await;
        // On an error it is left paused, for the next taker (the claim given back on drop).
        let s = opened?;
        // Taken: from here the claim goes with the blob (deleted below).
        claim.store = None;
        {
            let mut st = s.state.lock().await;
            st.calls = rec.calls;
            st.cpu_used = Duration::from_millis(rec.cpu_used_ms);
            st.cpu_at_repl_start = st.cpu_used;
        }
        if let Ok(mut p) = self.paused.lock() {
            p.remove(id);
        }
        // Live again: its state is the session's now; a later pause stores it anew.
        if let Err(e) = store.delete(&key).await {
            tracing::warn!(session = %&id[..8.min(id.len())], error = %e, "deleting a resumed session's archive failed");
        }
        tracing::info!(session = %&id[..8.min(id.len())], seat = s.seat, "session resumed");
        Ok(s)
    }

    /// Deletes `auth`'s paused session `id` (of `ticket`'s tenant); None when there is none.
    pub(super) async fn close_paused(&self, id: &str, auth: &[u8], ticket: &Ticket) -> Result<u32, SessionError> {
        let local = self.paused_entry(id, auth);
        let ticket = local.as_ref().map(|p| &p.ticket).unwrap_or(ticket);
        if self.store.get().is_none() {
            return Err(SessionError::NotFound);
        }
        let (store, _) = self.store().await?;
        let key = BlobKey::paused(&ticket.tenant.name, id).map_err(|_| SessionError::NotFound)?;
        let meta = store.head(&key).await.map_err(store_error)?;
        let rec: Option<Record> = meta.record.and_then(|r| serde_json::from_value(r).ok());
        let owned = rec.as_ref().is_some_and(|r| {
            r.id == id && bool::from(r.owner_sha256.as_bytes().ct_eq(owner_hash(ticket, auth).as_bytes()))
        });
        if !owned {
            return Err(SessionError::NotFound);
        }
        // Not while another executor resumes it (it holds the claim): that one may already
        // have read the archive, and the session would live on after this close's OK. The
        // claim goes with the blob.
        store.claim(&key, CLAIM_STALE).await.map_err(|e| match e {
            StoreError::Claimed(_) => SessionError::Retry(format!("session {id} is being resumed: retry the close")),
            e => store_error(e),
        })?;
        store
            .delete_session(&ticket.tenant.name, id)
            .await
            .map_err(store_error)?;
        if let Ok(mut p) = self.paused.lock() {
            p.remove(id);
        }
        tracing::info!(session = %&id[..8.min(id.len())], "paused session closed");
        Ok(rec.map(|r| r.calls).unwrap_or(0))
    }
}

/// The executor's record of `s` (call state `st`), kept beside its archive.
pub(super) fn record(s: &Session, st: &State, mode: Mode, drained: bool) -> Record {
    Record {
        v: RECORD_VERSION,
        id: s.id.clone(),
        tenant: s.tenant.to_string(),
        owner_sha256: owner_hash(&s.ticket, &s.owner),
        owner_sealed: match (&s.access_token, s.ticket.tenant.authenticated) {
            (Some(token), false) => super::owner_seal::seal(token.as_bytes(), &s.owner),
            _ => None,
        },
        language: s.language.clone(),
        mode,
        lifetime_ms: ms(s.totals.lifetime),
        idle_ms: ms(s.totals.idle),
        max_calls: s.totals.calls,
        memory: s.totals.memory,
        cpu_ms: ms(s.totals.cpu),
        disk: s.totals.disk,
        call_wall_ms: ms(s.call_limits.wall),
        call_cpu_ms: ms(s.call_limits.cpu),
        call_memory: s.call_limits.memory,
        call_output: s.call_limits.output,
        call_processes: s.call_limits.processes,
        call_file_size: s.call_limits.file_size,
        calls: st.calls,
        cpu_used_ms: ms(st.cpu_used),
        template: s.template.clone(),
        metadata: s.metadata.clone(),
        home: s.home,
        auto_resume: s.auto_resume,
        access_token: s.access_token.is_some(),
        drained,
        pause_on_timeout: s.pause_on_timeout.map(record_mode),
        end_after_ms: s.end_after.map(ms),
        source: None,
        token_sha256: {
            let mut all: Vec<String> = s.earlier_tokens.iter().map(|h| hex(h)).collect();
            all.extend(s.access_token.as_ref().map(|t| hex(&Sha256::digest(t.as_bytes()))));
            let skip = all.len().saturating_sub(MAX_EARLIER_TOKENS);
            all.split_off(skip)
        },
    }
}

/// An archive to restore: a blob in the store, not yet read, or bytes in memory (a fork's).
pub(super) enum Stored {
    Blob { store: Arc<Store>, key: BlobKey },
    Bytes(Arc<Vec<u8>>),
}

impl Stored {
    /// The archive's bytes (read before a run slot is taken: a slow or hung store holds
    /// the session's seat then, not a slot other calls wait for).
    pub(super) async fn fetch(&self) -> Result<Vec<u8>, SessionError> {
        match self {
            Stored::Blob { store, key } => {
                let mut archive = Vec::new();
                store.get_into(key, &mut archive).await.map_err(store_error)?;
                Ok(archive)
            }
            Stored::Bytes(b) => Ok(b.as_ref().clone()),
        }
    }
}

/// What an extraction's share holds beyond its files: tar itself.
const EXTRACT_SLACK: u64 = 32 << 20;

/// Extracts `archive` ([`Stored::fetch`]) into `work` by tar inside the seat; call with a
/// run slot held. Answers the archive's size.
pub(super) async fn extract(
    engine: &Arc<crate::engine::Engine>,
    seat: usize,
    work: &WorkDir,
    archive: Vec<u8>,
    memory: u64,
) -> Result<u64, SessionError> {
    let archive_len = archive.len() as u64;
    let spec = tar_spec(
        &[
            "--extract",
            "--file=-",
            "--directory=/work",
            "--no-same-owner",
            "--preserve-permissions",
            "--exclude=./.sandpool",
            // A full pause's interpreter state, where the next driver start reads it.
            STATE_EXTRACT,
        ],
        archive,
        memory,
        64 << 10,
        engine.work_dir_bytes(),
    );
    // The files it writes are charged to the seat's memory: its share grows first, as a
    // call's does (a fresh seat holds the idle floor), but only to what the files can take
    // (a file's pages round its size up: four times the archive, beside tar itself), and is
    // settled to what the seat holds as soon as tar ends. Several seats extract at once (a
    // fork): a share left grown to the session's memory took the room of the next ones,
    // whose tar then started in a cgroup too small to start in (exit 126, its report lost).
    let want = memory.min(archive_len.saturating_mul(4).saturating_add(EXTRACT_SLACK));
    let share = |share| {
        let e = engine.clone();
        crate::task::blocking(move || e.sandbox().seat_share(seat, share))
    };
    let _ = share(crate::sandbox::SeatShare::Grow(want)).await;
    let r = engine.run_phase_in(seat, work, &spec, Phase::Run).await;
    let _ = share(crate::sandbox::SeatShare::Hold).await;
    if r.verdict != pb::Verdict::Ok {
        return Err(tar_failed("restoring /work", &r));
    }
    Ok(archive_len)
}
