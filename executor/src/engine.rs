//! The engine: languages, limits, admission and the sandbox, put together to
//! execute requests. The gRPC service, the HTTP API, the judge and the
//! embedded CLI all call it.

use crate::admission::{Admission, AdmissionError, Admit, SlotGuard, Ticket};
use crate::budget::Charge;
use crate::call::Call;
use crate::error::{ExecError, scrub_host_paths};
use crate::languages::{Availability, Language, LanguageTable};
use crate::limits::{LimitPolicy, Limits};
use crate::metrics::{Metrics, Phase};
use crate::task::{blocking, blocking_unless, small_request, until};
use crate::tenants::Priority;
use crate::watchdog::RunWatched;
use crate::{fetch, probe, result_cache, validate, verdict};
use sandpool_proto::v1 as pb;
use sandpool_sandbox::{RunSpec, Runner, WorkDir};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// Static facts about this executor, for `ExecutorInfo`.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: String,
    pub version: String,
}

/// A language's zygote configurations (see `WarmData`).
#[derive(Debug)]
struct WarmConfigs {
    /// `warm.preload`: most runs fork from this one.
    light: Arc<sandpool_sandbox::ZygoteConfig>,
    /// `warm.preload` and `warm.heavy`, for runs that name a heavy module.
    heavy: Option<Arc<sandpool_sandbox::ZygoteConfig>>,
}

/// Engine settings beyond the sandbox's.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub policy: LimitPolicy,
    pub queue_capacity: usize,
    /// Largest file returned by `fetch_files`.
    pub fetch_file_bytes: u64,
    /// Most bytes returned by `fetch_files` in one response, all files together.
    pub fetch_total_bytes: u64,
    /// The byte budget's size (see [`crate::budget`]).
    pub inflight_bytes: u64,
    /// Size of a run's work dir: what a request's files may hold in all.
    pub work_dir_bytes: u64,
    pub identity: Identity,
    /// Where requests with chosen verdicts are recorded (off unless configured).
    pub capture: Option<crate::capture::Capture>,
    /// Warm starts for languages whose entry has `warm` (see docs/warm-starts.md).
    pub warm_starts: bool,
    /// Whether assert tests get the language's prelude when a request does not say.
    pub assert_prelude: bool,
    /// The result cache's bounds (off when None or zero).
    pub result_cache: Option<crate::result_cache::CacheConfig>,
}

/// Executes requests.
#[derive(Debug)]
pub struct Engine {
    sandbox: Box<dyn Runner>,
    languages: LanguageTable,
    availability: BTreeMap<String, Availability>,
    /// What each language's programs can import (see [`crate::probe::packages`]).
    packages: BTreeMap<String, Vec<crate::languages::Package>>,
    policy: LimitPolicy,
    admission: Arc<Admission>,
    metrics: Arc<Metrics>,
    identity: Identity,
    fetch_file_bytes: u64,
    fetch_total_bytes: u64,
    work_dir_bytes: u64,
    /// Bytes held for callers at once, every request together (see [`crate::budget`]).
    budget: crate::budget::ByteBudget,
    capture: Option<crate::capture::Capture>,
    /// Per language with warm starts on: its zygote's configuration.
    warm: BTreeMap<String, WarmConfigs>,
    /// Whether assert tests get the language's prelude when a request does not say.
    assert_prelude: bool,
    /// Identical requests answered without running (off unless configured).
    cache: Option<crate::result_cache::ResultCache>,
    /// Every run in flight, for the liveness check (see [`crate::watchdog`]).
    watchdog: Arc<crate::watchdog::Watchdog>,
    /// Artifacts built once that a language's warm runs share (see [`crate::shared`]).
    shared: crate::shared::Shared,
    /// Per slot, held while the clean-up its last run left is still going (see
    /// [`Engine::release`]); the slot's next holder waits for it.
    settling: Vec<Arc<tokio::sync::Mutex<()>>>,
}

/// Outcome of one phase run through the engine.
#[derive(Debug, Clone)]
pub struct Phased {
    pub result: pb::PhaseResult,
    pub verdict: pb::Verdict,
    /// Set for SANDBOX_ERROR: what failed.
    pub error: Option<String>,
}

impl Engine {
    /// Builds the engine and probes every language inside the sandbox.
    pub async fn new(sandbox: Box<dyn Runner>, languages: LanguageTable, cfg: EngineConfig) -> Self {
        let metrics = Metrics::new();
        let slots = sandbox.slots();
        metrics.slots.set(slots as i64);
        let admission = Admission::new(slots, cfg.queue_capacity);
        // Slots held past what any request may take are stuck: the watchdog says so.
        admission.set_allowance(crate::watchdog::slot_allowance(&cfg.policy));
        let watchdog = crate::watchdog::Watchdog::watching(admission.clone());
        let cache = cfg
            .result_cache
            .and_then(|c| crate::result_cache::ResultCache::new(c, metrics.clone()));
        // Where runs could chmod what they share, nothing is shared (see the trait's doc).
        let shared_dir = sandbox
            .shared_dir()
            .filter(|_| cfg.warm_starts && sandbox.shares_files_read_only());
        if cfg.warm_starts && !sandbox.shares_files_read_only() {
            tracing::info!("runs share the executor's uid: no shared artifacts (precompiled headers, class archives)");
        }
        let shared = crate::shared::Shared::new(shared_dir, languages.iter());
        let budget = crate::budget::ByteBudget::new(cfg.inflight_bytes)
            .counting(metrics.exhausted_counter(crate::metrics::Exhaustion::InflightBytes));
        let mut engine = Engine {
            shared,
            sandbox,
            languages,
            availability: BTreeMap::new(),
            packages: BTreeMap::new(),
            policy: cfg.policy,
            admission,
            metrics,
            identity: cfg.identity,
            fetch_file_bytes: cfg.fetch_file_bytes,
            fetch_total_bytes: cfg.fetch_total_bytes,
            work_dir_bytes: cfg.work_dir_bytes,
            budget,
            capture: cfg.capture,
            warm: BTreeMap::new(),
            watchdog,
            assert_prelude: cfg.assert_prelude,
            cache,
            settling: (0..slots).map(|_| Default::default()).collect(),
        };
        if cfg.warm_starts && engine.sandbox.warm_starts() {
            engine.warm = engine
                .languages
                .iter()
                .filter_map(|l| {
                    let data = l.warm.as_ref()?;
                    let zygote = |preload: Vec<String>| {
                        Some(Arc::new(sandpool_sandbox::ZygoteConfig {
                            name: l.name.clone(),
                            interpreter: l.warm_interpreter()?.to_vec(),
                            env: l.run_env(),
                            preload,
                            command: None,
                        }))
                    };
                    let light = zygote(data.preload.clone())?;
                    let heavy = if data.heavy.is_empty() {
                        None
                    } else {
                        zygote(data.preload.iter().chain(&data.heavy).cloned().collect())
                    };
                    Some((l.name.clone(), WarmConfigs { light, heavy }))
                })
                .collect();
        }
        // Through the engine's one way in (the watchdog), though no request's phase.
        let (availability, packages) = {
            let e = &engine;
            let run: &dyn RunWatched = e;
            let (sandbox, compile_defaults) = (&*e.sandbox, e.policy.compile_defaults);
            let availability = probe::languages(sandbox, run, &e.admission, &e.languages, compile_defaults).await;
            // The plain zygotes of languages that work here; the heavy ones start
            // when a program first names a heavy module.
            let plain = e
                .warm
                .iter()
                .filter(|(name, _)| matches!(availability.get(*name), Some(Availability::Available { .. })))
                .map(|(_, w)| w.light.clone())
                .collect();
            sandbox.start_zygotes(plain);
            let packages = probe::packages(
                sandbox,
                run,
                &e.admission,
                &e.languages,
                &availability,
                compile_defaults,
            )
            .await;
            (availability, packages)
        };
        engine.availability = availability;
        engine.packages = packages;
        engine
    }

    /// The zygote a run of `lang` forks from, unless the request asked for a
    /// cold start: the one with the entry's `warm.heavy` modules too when any
    /// of `texts` (the program and its files) names one of them.
    pub fn warm_for(
        &self,
        lang: &Language,
        cold_start: bool,
        texts: &[&[u8]],
    ) -> Option<Arc<sandpool_sandbox::ZygoteConfig>> {
        if cold_start {
            return None;
        }
        let w = self.warm.get(&lang.name)?;
        match (&w.heavy, &lang.warm) {
            (Some(heavy), Some(data)) if texts.iter().any(|t| data.names_heavy(t)) => Some(heavy.clone()),
            _ => Some(w.light.clone()),
        }
    }

    /// A zygote for `lang`'s program `code`, run as `INTERPRETER -c CODE` (a session's
    /// driver): the language's interpreter, environment and `warm.preload`, and `extra`
    /// besides, with `code` compiled ahead; None where `lang` has no warm starts here.
    pub fn command_zygote(
        &self,
        lang: &str,
        code: &str,
        extra: &[&str],
    ) -> Option<Arc<sandpool_sandbox::ZygoteConfig>> {
        let light = &self.warm.get(lang)?.light;
        let mut preload = light.preload.clone();
        preload.extend(
            extra
                .iter()
                .map(|m| m.to_string())
                .filter(|m| !light.preload.contains(m)),
        );
        Some(Arc::new(sandpool_sandbox::ZygoteConfig {
            name: format!("{lang} -c"),
            preload,
            command: Some(code.to_owned()),
            ..(**light).clone()
        }))
    }

    /// `lang`'s shared artifacts for a run (built on first use, in `slot`), unless the request
    /// asked for a cold start or `lang` has none.
    pub async fn shared_for(
        &self,
        slot: &SlotGuard,
        lang: &Language,
        cold_start: bool,
    ) -> Option<Arc<crate::shared::Ready>> {
        if cold_start {
            return None;
        }
        // The table's entry, not `lang` as renamed for one program's public class (Java): the
        // build compiles the entry's own source with the entry's commands.
        let entry = self.languages.get(&lang.name)?;
        // Through the one way in (the watchdog); the build is no phase of the request it delays.
        self.shared
            .get(&*self.sandbox, self, self.policy.max, slot, entry)
            .await
    }

    /// Whether `lang` has shared artifacts here (with warm starts on), built or not.
    pub fn has_shared(&self, lang: &Language) -> bool {
        self.shared.has(&lang.name)
    }

    /// `lang`'s shared artifacts if built already (never builds them), unless `cold_start`.
    pub fn shared_ready(&self, lang: &Language, cold_start: bool) -> Option<Arc<crate::shared::Ready>> {
        (!cold_start).then(|| self.shared.ready(&lang.name)).flatten()
    }

    /// The sandbox every run goes through.
    pub fn sandbox(&self) -> &dyn Runner {
        &*self.sandbox
    }

    /// The language table.
    pub fn languages(&self) -> &LanguageTable {
        &self.languages
    }

    /// Limit defaults, ceilings and minimums.
    pub fn policy(&self) -> &LimitPolicy {
        &self.policy
    }

    /// Run slots and the wait queue.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Bytes held for callers at once, every request together (see [`crate::budget`]).
    pub fn budget(&self) -> &crate::budget::ByteBudget {
        &self.budget
    }

    /// Where requests with chosen verdicts are recorded, when configured.
    pub fn capture(&self) -> Option<&crate::capture::Capture> {
        self.capture.as_ref()
    }

    /// Identical requests answered without running, when configured.
    pub fn cache(&self) -> Option<&crate::result_cache::ResultCache> {
        self.cache.as_ref()
    }

    /// Whether assert tests get the language's prelude when a request does not say.
    pub fn assert_prelude(&self) -> bool {
        self.assert_prelude
    }

    /// Every run in flight, for the liveness check (see [`crate::watchdog`]).
    pub fn watchdog(&self) -> &Arc<crate::watchdog::Watchdog> {
        &self.watchdog
    }

    /// Size of a run's work dir (a session's disk).
    pub fn work_dir_bytes(&self) -> u64 {
        self.work_dir_bytes
    }

    /// The largest file, and the most bytes in all, one response returns from a work dir.
    pub fn fetch_caps(&self) -> crate::fetch::Caps {
        crate::fetch::Caps {
            file: self.fetch_file_bytes,
            total: self.fetch_total_bytes,
        }
    }

    /// Availability of every language.
    pub fn availability(&self) -> &BTreeMap<String, Availability> {
        &self.availability
    }

    /// True when at least one language works.
    pub fn any_language_available(&self) -> bool {
        self.availability
            .values()
            .any(|a| matches!(a, Availability::Available { .. }))
    }

    /// Finds an available language, or the error the client should get.
    pub fn language(&self, name: &str, field: &str) -> Result<(&Language, &str), ExecError> {
        let Some(lang) = self.languages.get(name) else {
            return Err(ExecError::invalid(
                field,
                format!(
                    "unknown language {name:?}; known: {}",
                    self.languages.names().join(", ")
                ),
            ));
        };
        match self.availability.get(&lang.name) {
            Some(Availability::Available { version }) => Ok((lang, version)),
            Some(Availability::Unavailable { reason }) => {
                Err(ExecError::Unavailable(lang.name.clone(), reason.clone()))
            }
            None => Err(ExecError::Unavailable(lang.name.clone(), "not probed".into())),
        }
    }

    /// The executor's name (its pod's, in a cluster).
    pub fn name(&self) -> &str {
        &self.identity.name
    }

    /// ExecutorInfo for a response.
    pub fn info(&self, toolchain: &str) -> pb::ExecutorInfo {
        pb::ExecutorInfo {
            name: self.identity.name.clone(),
            version: self.identity.version.clone(),
            isolation: self.sandbox.mode().name().to_owned(),
            toolchain: toolchain.to_owned(),
        }
    }

    /// The ticket a request's runs wait with: its tenant, and the priority it asked for in
    /// its message (`field`, zero: unset), else the transport's (HTTP header), else the
    /// tenant's default. More than the tenant may have is PERMISSION_DENIED.
    pub fn ticket(&self, call: &Call, asked: i32, field: &str) -> Result<Ticket, ExecError> {
        let asked = Priority::from_proto(asked)
            .map_err(|v| ExecError::invalid(field, format!("unknown priority {v}")))?
            .or(call.priority);
        let priority = call.tenant.priority(asked)?;
        Ok(Ticket {
            tenant: call.tenant.clone(),
            priority,
        })
    }

    /// Waits for a run slot for a new request, recording the queue time; refused once draining.
    pub async fn acquire(
        &self,
        ticket: &Ticket,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<SlotGuard, ExecError> {
        self.acquire_as(ticket, deadline, Admit::New).await
    }

    /// Waits for a run slot, recording the queue time (also per tenant and priority).
    pub async fn acquire_as(
        &self,
        ticket: &Ticket,
        deadline: Option<tokio::time::Instant>,
        admit: Admit,
    ) -> Result<SlotGuard, ExecError> {
        let t = Instant::now();
        let mut slot = self.admission.acquire_as(ticket, deadline, admit).await;
        if let Ok(s) = &slot
            && let Some(settling) = self.settling.get(s.index())
        {
            // The slot's last run may still be dissolving its work dir (charged to the slot's
            // cgroup); usually long done. The deadline holds here too.
            if until(deadline, settling.lock()).await.is_err() {
                slot = Err(AdmissionError::Deadline);
            }
        }
        let waited = t.elapsed().as_secs_f64();
        self.metrics.observe(Phase::Queue, waited);
        match &slot {
            Ok(_) => self
                .metrics
                .tenant_admitted(&ticket.tenant.name, ticket.priority.name(), waited),
            Err(e) => {
                self.metrics.tenant_refused(&ticket.tenant.name, refusal(e));
                if let AdmissionError::QueueFull { .. } = e {
                    self.metrics.exhausted(crate::metrics::Exhaustion::QueueFull);
                }
            }
        }
        Ok(slot?)
    }

    /// Gives back a finished run's slot, its work dir dropped first. A work dir nobody can
    /// see dissolves on the blocking pool after the caller answers (a detached tmpfs's close
    /// waits for an RCU grace period): the slot is free for admission at once, and its next
    /// holder waits in [`Engine::acquire_as`] until the work dir is gone, so no run sees
    /// another's pages charged to its cgroup. `with` (a drain count) goes with the work dir.
    /// A host directory or an attached mount is removed now, before the response ("nothing
    /// left behind").
    pub(crate) fn release<T: Send + 'static>(&self, work: Option<Arc<WorkDir>>, slot: SlotGuard, with: T) {
        let settling = self
            .settling
            .get(slot.index())
            .and_then(|m| m.clone().try_lock_owned().ok());
        match settling {
            Some(settled) if work.as_ref().is_some_and(|w| w.is_unseen()) => {
                crate::task::drop_later((work, settled, with));
            }
            _ => drop(work),
        }
        drop(slot);
    }

    /// The metrics in Prometheus text format; slot and queue gauges are read from admission now.
    pub fn metrics_text(&self) -> String {
        self.metrics.busy_slots.set(self.admission.busy() as i64);
        self.metrics.queue_length.set(self.admission.queued() as i64);
        for (tenant, running, queued) in self.admission.tenants() {
            self.metrics.tenant_load(&tenant, running, queued);
        }
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.metrics.inflight_bytes.set(gauge(self.budget.in_use()));
        self.metrics.inflight_bytes_limit.set(gauge(self.budget.total()));
        self.metrics.stuck_runs.set(gauge(self.watchdog.stuck_runs() as u64));
        self.metrics
            .stuck_blocking
            .set(gauge(self.watchdog.stuck_blocking().0 as u64));
        self.metrics
            .stuck_slots
            .set(gauge(self.watchdog.stuck_slots().len() as u64));
        self.metrics.encode()
    }

    /// Runs one phase in `work`; sandbox failures become a SANDBOX_ERROR phase.
    pub async fn run_phase(&self, slot: &SlotGuard, work: &WorkDir, spec: &RunSpec, phase: Phase) -> Phased {
        self.run_phase_in(slot.index(), work, spec, phase).await
    }

    /// [`Self::run_phase`] in sandbox identity `index`: a slot the caller holds, or a session's seat.
    pub async fn run_phase_in(&self, index: usize, work: &WorkDir, spec: &RunSpec, phase: Phase) -> Phased {
        match self.run_in(index, work, spec, phase).await {
            Ok(o) => {
                let result = verdict::phase_result(o);
                let verdict = pb::Verdict::try_from(result.verdict).unwrap_or(pb::Verdict::SandboxError);
                Phased {
                    result,
                    verdict,
                    error: None,
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "sandbox failure");
                Phased {
                    result: verdict::sandbox_error_phase(),
                    verdict: pb::Verdict::SandboxError,
                    error: Some(scrub_host_paths(&e.client_message())),
                }
            }
        }
    }

    /// The engine's one way into the sandbox: runs `spec` in sandbox identity `index` (a
    /// slot the caller holds, or a session's seat) with the watchdog tracking it against its
    /// wall time, and its time recorded as `phase` (see [`crate::metrics::Timed`]: a run
    /// dropped before it ends counts only for an interpreter); None for runs that are no
    /// request's phase (start-up probes, shared-artifact builds). The sandbox's own outcome:
    /// [`Self::run_phase_in`] makes it a phase result; a session's interpreter reads its
    /// CPU and how it ended.
    pub async fn run_in(
        &self,
        index: usize,
        work: &WorkDir,
        spec: &RunSpec,
        phase: impl Into<Option<Phase>>,
    ) -> Result<sandpool_sandbox::RunOutcome, sandpool_sandbox::SandboxError> {
        let timed = phase.into().map(|p| self.metrics.time(p));
        let _tracked = self.watchdog.track(spec.limits.wall);
        let res = self.sandbox.run(index, work, spec).await;
        if let Some(t) = timed {
            t.end();
        }
        res
    }

    /// Validates the `files` of a request for `lang` (see [`validate::files`]).
    pub fn validate_files(
        &self,
        files: &[pb::File],
        field: &str,
        lang: &Language,
        code_len: usize,
    ) -> Result<(), ExecError> {
        validate::files(files, field, &lang.source, code_len, self.work_dir_bytes)
    }

    /// Executes one request: compile (if needed), run, fetch files.
    pub async fn execute(
        &self,
        req: pb::ExecuteRequest,
        call: impl Into<Call>,
    ) -> Result<pb::ExecuteResponse, ExecError> {
        let call = call.into();
        let ticket = self.ticket(&call, req.priority, "priority")?;
        let Call {
            deadline,
            caller,
            charge,
            ..
        } = call;
        let _in_progress = self.admission.request();
        let (table_lang, version) = self.language(&req.language, "language")?;
        // Java: named after the code's public class.
        let lang_for_code = table_lang.for_code(&req.code);
        let lang: &Language = &lang_for_code;
        let run_limits = self
            .policy
            .resolve(req.limits.as_ref(), &self.policy.run_defaults, "limits")?;
        let compile_limits = self.policy.resolve(
            req.compile_limits.as_ref(),
            &self.policy.compile_defaults,
            "compile_limits",
        )?;
        let policy = result_cache::policy(req.cache, "cache")?;
        let usage = self.cache.as_ref().and_then(|c| c.usage(policy));
        // Linear and capped, but a request may still hold thousands of paths (and keying
        // hashes up to the whole request): not on the runtime.
        let (source, budget) = (lang.source.clone(), self.work_dir_bytes);
        let (name, toolchain) = (lang.name.clone(), version.to_owned());
        let (req, key) = blocking_unless(small_request(&req), move || {
            let mut req = req;
            req.fetch_files = validate::execute(&req, &source, budget)?;
            let key = usage
                .map(|_| result_cache::execute_key(&mut req, &caller, &name, &toolchain, run_limits, compile_limits));
            Ok::<_, ExecError>((req, key))
        })
        .await??;
        let cached = match (&self.cache, usage, &key) {
            (Some(c), Some(u), Some(k)) => Some((c, u, *k)),
            _ => None,
        };
        // While an identical request runs, this one waits for its answer (up to its deadline).
        let leader = match cached {
            Some((c, u, k)) => match until(deadline, c.begin_execute(k, u)).await? {
                result_cache::Begin::Hit(hit) => return Ok(hit),
                result_cache::Begin::Run(leader) => leader,
            },
            None => None,
        };
        let captured = self.capture.as_ref().map(|_| req.clone());

        let slot = self.acquire(&ticket, deadline).await?;
        let limits = (run_limits, compile_limits);
        let mut work = None;
        let fut = self.execute_in_slot((&slot, &mut work), lang, version, req, limits, charge);
        let res = until(deadline, fut).await;
        self.release(work, slot, _in_progress);
        let res = res?;
        if let Some((c, u, k)) = cached {
            c.put_execute(k, u, &res);
        }
        // Stored first: the requests waiting for this run find it.
        drop(leader);
        let verdict = pb::Verdict::try_from(res.verdict).unwrap_or_default();
        self.metrics.run_finished(&lang.name, verdict.as_str_name());
        if let (Some(c), Some(req)) = (&self.capture, captured) {
            c.execute(verdict, &req, &res, &ticket);
        }
        Ok(res)
    }

    /// Runs `req` in `slot`; the work dir it makes is left in `keep`, for the caller to drop
    /// once it has answered.
    async fn execute_in_slot(
        &self,
        (slot, keep): (&SlotGuard, &mut Option<Arc<WorkDir>>),
        lang: &Language,
        version: &str,
        req: pb::ExecuteRequest,
        (run_limits, compile_limits): (Limits, Limits),
        charge: Option<Charge>,
    ) -> pb::ExecuteResponse {
        let mut resp = pb::ExecuteResponse {
            executor: Some(self.info(version)),
            ..Default::default()
        };
        let fail = |mut resp: pb::ExecuteResponse, msg: String| {
            resp.verdict = pb::Verdict::SandboxError as i32;
            resp.message = msg;
            resp
        };
        let work = match self.sandbox.work_dir(slot.index()) {
            Ok(w) => w,
            Err(e) => return fail(resp, scrub_host_paths(&e.to_string())),
        };
        let texts: Vec<&[u8]> = std::iter::once(req.code.as_bytes())
            .chain(req.files.iter().map(|f| f.content.as_slice()))
            .collect();
        let warm = self.warm_for(lang, req.cold_start, &texts);
        let shared = self.shared_for(slot, lang, req.cold_start).await;
        let compile = lang
            .compile
            .as_ref()
            .map(|c| crate::shared::compile_command(shared.as_deref(), lang, c, Some(req.code.as_bytes())));
        // Up to the work dir's size in writes: off the runtime, unless a few KiB into a tmpfs
        // (a directory on disk may wait on writeback).
        let small = small_request(&req) && work.in_memory();
        let (source, code, files) = (lang.source.clone(), req.code, req.files);
        let written = blocking_unless(small, move || {
            let writes = std::iter::once((source.as_str(), code.as_bytes(), false)).chain(
                files
                    .iter()
                    .map(|f| (f.path.as_str(), f.content.as_slice(), f.executable)),
            );
            for (path, content, exec) in writes {
                work.write_file(path, content, exec).map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(work)
        })
        .await;
        let work = match written {
            Ok(Ok(w)) => &*keep.insert(Arc::new(w)),
            Ok(Err(e)) | Err(ExecError::Internal(e)) => return fail(resp, scrub_host_paths(&e)),
            Err(e) => return fail(resp, e.to_string()),
        };
        if let Some(compile) = compile {
            let spec = RunSpec {
                argv: compile.argv,
                env: compile.env,
                stdin: vec![],
                limits: compile_limits,
                gpu: lang.gpu,
                warm: None,
            };
            let mut c = self.run_phase(slot, work, &spec, Phase::Compile).await;
            c.result.warm |= compile.warm;
            resp.compile = Some(c.result);
            match c.verdict {
                pb::Verdict::Ok => {}
                pb::Verdict::SandboxError => return fail(resp, c.error.unwrap_or_default()),
                _ => {
                    resp.verdict = pb::Verdict::CompileError as i32;
                    return resp;
                }
            }
        }
        let run = crate::shared::run_command(shared.as_deref(), lang);
        let mut argv = run.argv;
        argv.extend(req.args.iter().cloned());
        let spec = RunSpec {
            argv,
            env: run.env,
            stdin: req.stdin,
            limits: run_limits,
            gpu: lang.gpu,
            warm,
        };
        let mut r = self.run_phase(slot, work, &spec, Phase::Run).await;
        r.result.warm |= run.warm;
        resp.run = Some(r.result);
        resp.verdict = r.verdict as i32;
        if let Some(e) = r.error {
            resp.message = e;
        }
        if !req.fetch_files.is_empty() {
            let (caps, fetch, work) = (self.fetch_caps(), req.fetch_files, Arc::clone(work));
            match blocking(move || fetch::read(&work, fetch, caps, charge.as_ref())).await {
                Ok((files, refused)) => {
                    resp.files = files;
                    for (path, why) in refused {
                        let sep = if resp.message.is_empty() { "" } else { "; " };
                        resp.message = format!("{}{sep}fetch {path}: {why}", resp.message);
                    }
                }
                Err(e) => resp.message = e.to_string(),
            }
        }
        resp
    }

    /// The Capabilities message.
    pub fn capabilities(&self) -> pb::Capabilities {
        let languages = self
            .languages
            .iter()
            .map(|l| {
                let (available, version, reason) = match self.availability.get(&l.name) {
                    Some(Availability::Available { version }) => (true, version.clone(), String::new()),
                    Some(Availability::Unavailable { reason }) => (false, String::new(), reason.clone()),
                    None => (false, String::new(), "not probed".into()),
                };
                pb::LanguageInfo {
                    name: l.name.clone(),
                    available,
                    version,
                    unavailable_reason: reason,
                    compiled: l.compile.is_some(),
                    warm_start: self.warm.contains_key(&l.name) || self.shared.is_ready(&l.name),
                    preloaded: self
                        .warm
                        .get(&l.name)
                        .map(|w| w.heavy.as_ref().unwrap_or(&w.light).preload.clone())
                        .unwrap_or_default(),
                    source_file: l.source.clone(),
                    gpu: l.gpu,
                    packages: self
                        .packages
                        .get(&l.name)
                        .into_iter()
                        .flatten()
                        .map(|p| pb::Package {
                            name: p.name.clone(),
                            version: p.version.clone(),
                        })
                        .collect(),
                }
            })
            .collect();
        let features = self
            .sandbox
            .features()
            .0
            .iter()
            .map(|f| pb::IsolationFeature {
                name: f.name.to_owned(),
                available: f.available,
                in_use: f.in_use,
                detail: f.detail.clone(),
            })
            .collect();
        pb::Capabilities {
            languages,
            isolation: Some(pb::Isolation {
                mode: self.sandbox.mode().name().to_owned(),
                features,
                network: self.sandbox.network_isolation().name().to_owned(),
            }),
            default_limits: Some(crate::limits::to_proto(self.policy.run_defaults)),
            max_limits: Some(crate::limits::to_proto(self.policy.max)),
            slots: self.admission.slots() as u32,
            queue_capacity: self.admission.queue_capacity() as u32,
            executor: Some(self.info("")),
            gpu: self.sandbox.has_gpu(),
            // The caller's, filled in by the gRPC service.
            tenant: None,
        }
    }
}

/// A refusal's reason, as the `reason` label of `sandpool_tenant_refused_total` (one of
/// [`crate::metrics::TENANT_REFUSALS`], each exported from the start).
fn refusal(e: &AdmissionError) -> &'static str {
    let [queue_full, deadline, draining] = crate::metrics::TENANT_REFUSALS;
    match e {
        AdmissionError::QueueFull { .. } => queue_full,
        AdmissionError::Deadline => deadline,
        AdmissionError::Draining => draining,
    }
}

impl RunWatched for Engine {
    fn run_watched<'a>(
        &'a self,
        index: usize,
        work: &'a WorkDir,
        spec: &'a RunSpec,
    ) -> futures::future::BoxFuture<'a, Result<sandpool_sandbox::RunOutcome, sandpool_sandbox::SandboxError>> {
        Box::pin(self.run_in(index, work, spec, None))
    }
}
