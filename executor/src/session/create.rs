//! Creating a session: the request checked, the caps passed, a seat (or a spare interpreter)
//! taken, /work made when files come with it, and its interpreter's start set going.

use super::caps::Creating;
use super::files::{check_files, make_work};
use super::record::{Extras, Kind, Session, SessionInfo, State};
use super::registry::{new_id, random_hex};
use super::seats::seat_cpu_weight;
use super::startup::{StartGate, boot};
use super::{SessionError, SessionManager, policy, policy::Totals};
use crate::admission::{Admit, Ticket};
use crate::call::Call;
use crate::error::ExecError;
use crate::limits::Limits;
use crate::metrics::Exhaustion;
use crate::task::blocking;
use sandpool_proto::v1 as pb;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

impl SessionManager {
    /// Opens a session.
    pub async fn create(
        &self,
        req: pb::CreateSessionRequest,
        call: Call,
    ) -> Result<pb::CreateSessionResponse, SessionError> {
        let extras = Extras {
            auto_resume: req.auto_resume,
            ..Extras::default()
        };
        self.create_with(req, call, extras).await.map(|(r, _)| r)
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
        if !req.from_snapshot.is_empty() {
            let s = self.create_from_snapshot(&req, &ticket, auth, extras).await?;
            tracing::info!(session = %&s.id[..8], snapshot = %req.from_snapshot, seat = s.seat, request_id = %req.request_id, "session created from a snapshot");
            return Ok((self.created(&s), s.info()));
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
        let _creating = self.admit(&ticket)?;
        let s = self
            .open(kind, language, totals, call_limits, files, auth, &ticket, extras, None)
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

    /// Counts a create (or a resume) against the caps (the executor's, its tenant's, the
    /// memory budget) until the guard drops; refused with the cap named.
    pub(super) fn admit(&self, ticket: &Ticket) -> Result<Creating<'_>, SessionError> {
        // A draining executor starts no session (its ports stay open while it pauses the live
        // ones): UNAVAILABLE, so the client makes it on one that stays.
        if self.engine.admission().is_draining() {
            return Err(ExecError::Admission(crate::admission::AdmissionError::Draining).into());
        }
        // Counted before waiting for a slot, so a burst of creates cannot pass the cap; uncounted
        // by the guard's drop, also when the caller goes away mid-create.
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
        Ok(Creating {
            counts: &self.creating,
            tenant,
        })
    }

    /// A new session, or with `resumed` (an archive of /work, and the id of the paused session
    /// it opens again, or none for a new session from a snapshot or a fork) one whose archive
    /// is extracted in its fresh seat before anything else runs there.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn open(
        &self,
        kind: Kind,
        language: String,
        totals: Totals,
        call_limits: Limits,
        files: Vec<pb::File>,
        owner: Vec<u8>,
        ticket: &Ticket,
        extras: Extras,
        resumed: Option<(Option<String>, super::pause::Stored)>,
    ) -> Result<Arc<Session>, SessionError> {
        let engine = &self.engine;
        // The caps were checked; a seat whose processes outlived their session stays out of use.
        // Before a spare is taken: a spare dropped on an error here would free its seat
        // before its processes are gone.
        let (id, archive) = match resumed {
            Some((Some(id), archive)) => (id, Some(archive)),
            Some((None, archive)) => (new_id(engine.name())?, Some(archive)),
            None => (new_id(engine.name())?, None),
        };
        let work = tokio::sync::OnceCell::new();
        let mut reserve_ok = true;
        // A spare interpreter when one was started for these limits (no files to put first),
        // and it needs no other environment (a spare's started as a plain session's).
        let spare = match (kind, files.is_empty() && !extras.home && archive.is_none()) {
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
        let mut restored = None;
        if let Some(archive) = archive {
            let (w, ok) = make_work(engine, seat.index, Vec::new()).await?;
            let bytes = archive.fetch().await?;
            let _permit = engine.acquire_as(ticket, None, Admit::Continuing).await?;
            restored = Some(super::pause::extract(engine, seat.index, &w, bytes, totals.memory).await?);
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
            end_after: extras.end_after,
            pause_on_timeout: extras.pause_on_timeout,
            access_token: if extras.access_token { Some(random_hex()?) } else { None },
            earlier_tokens: extras.earlier_tokens,
            metadata: extras.metadata,
            template: extras.template,
            home: extras.home,
            auto_resume: extras.auto_resume,
            last_used: Mutex::new(Instant::now()),
            seat: seat.index,
            ticket: ticket.clone(),
            memory: AtomicU64::new(self.policy.idle_bytes),
            work,
            reserve_missing: std::sync::atomic::AtomicBool::new(!reserve_ok),
            background: std::sync::atomic::AtomicBool::new(false),
            pausing: std::sync::atomic::AtomicBool::new(false),
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
        // no other session's call can then take while its interpreter starts. A restored
        // Python session's interpreter loads its saved names as it starts: its share grows for
        // that to what the archive can unpickle into (the interpreter, and four times the
        // archive), not on loan (a loan taken back while it loaded killed it between calls:
        // seen on the real node after forks and drains), and its first call's end settles it.
        let share = match (restored, kind) {
            (Some(bytes), Kind::Python) => crate::sandbox::SeatShare::Grow(
                s.totals
                    .memory
                    .min(RESTORE_BASE.saturating_add(bytes.saturating_mul(4))),
            ),
            _ => crate::sandbox::SeatShare::Hold,
        };
        self.share(&s, share).await;
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
}

/// What a restored Python interpreter's share holds beside four times its archive while it
/// loads its saved names: the interpreter, the driver and cloudpickle (an idle one holds
/// about 38 MiB on cgroup v1).
const RESTORE_BASE: u64 = 64 << 20;

/// What a session's interpreter is started with, its lifetime as the wall time: a spare
/// started for the same serves it (see spares.rs). A longer lifetime than the spare's would
/// outlive the spare's wall-time backstop.
pub(super) fn spare_key(totals: &Totals, call_limits: &Limits) -> Limits {
    Limits {
        wall: totals.lifetime,
        cpu: totals.cpu,
        memory: totals.memory,
        ..*call_limits
    }
}

impl SessionManager {
    /// [`spare_key`] of a session created with the default limits.
    pub(super) fn default_spare_key(&self) -> Option<Limits> {
        let engine = &self.engine;
        let totals = policy::resolve(self.policy(), engine.policy(), None, engine.work_dir_bytes()).ok()?;
        let call_limits = engine
            .policy()
            .resolve(None, &engine.policy().run_defaults, "call_limits")
            .ok()?;
        Some(spare_key(&totals, &call_limits))
    }
}
