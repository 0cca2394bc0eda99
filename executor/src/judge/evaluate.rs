//! Judging one request: compile once, run the tests in parallel over free
//! slots, decide each test's verdict, put the response together.

use super::build::{self, Build, Compiled, SourceFile};
use super::program::{self, Case, Expect, Program};
use crate::admission::{AdmissionError, Admit, SlotGuard, Ticket};
use crate::call::{Call, Caller};
use crate::engine::Engine;
use crate::error::ExecError;
use crate::languages::Language;
use crate::limits::Limits;
use crate::metrics::Phase;
use crate::result_cache::{self, ResultCache};
use crate::tenants::Priority;
use futures::StreamExt;
use sandpool_proto::v1 as pb;
use sandpool_sandbox::{RunSpec, WorkDir};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The message of a test not started because `total_timeout` had passed (front ends match it).
pub const SKIPPED_AT_TOTAL_TIMEOUT: &str = "skipped: total_timeout reached before this test started";

/// Judges requests on an engine. Cheap to clone; clones share the admission gate.
#[derive(Debug, Clone)]
pub struct Judge {
    engine: Arc<Engine>,
    /// Each language's warm-up result, made on first use (None: it failed; tests run cold).
    warm: Arc<tokio::sync::Mutex<HashMap<String, Option<Arc<WorkDir>>>>>,
    /// Per tenant and priority: bounds the judge's slot requests (waiting or running) to
    /// the tenant's queue capacity, so tests wait here rather than fill the admission
    /// queue. Per tenant and priority, so one tenant's backlog never waits ahead of
    /// another's, nor a tenant's batch ahead of its own interactive requests.
    gates: Arc<std::sync::Mutex<Gates>>,
}

/// One gate: its size (the tenant's terms may change) and its permits.
type Gate = (usize, Arc<Semaphore>);
/// The gates, by tenant and priority.
type Gates = HashMap<(Arc<str>, Priority), Gate>;

/// What an Evaluate's runs wait for slots as: its ticket, and whether it held one yet.
struct Claim {
    ticket: Ticket,
    /// Once it held a slot, its later runs finish even while the executor drains (see [`Admit`]).
    admitted: AtomicBool,
}

/// The cache a request uses, how, and its key.
type CacheUse<'a> = (&'a ResultCache, result_cache::Use, result_cache::Key);

/// A run slot held by the judge.
struct Held {
    slot: SlotGuard,
    /// A permit of the tenant's judge gate (see [`Judge`]), given back with the slot.
    permit: OwnedSemaphorePermit,
}

impl Held {
    /// Gives the slot and the gate back; `work`, the run's work dir, goes first (see
    /// [`Engine::release`]).
    fn release(self, engine: &Engine, work: WorkDir) {
        engine.release(Some(Arc::new(work)), self.slot, ());
        drop(self.permit);
    }
}

/// The special judge, compiled (or ready to write) once per request.
struct Checker<'a> {
    lang: &'a Language,
    build: Build,
}

/// Per-request settings for the test runs.
struct Runs<'a> {
    lang: &'a Language,
    build: Build,
    program: &'a Program,
    limits: Limits,
    checker: Option<Checker<'a>>,
    stop_on_failure: bool,
    total_deadline: Option<Instant>,
    deadline: Option<Instant>,
    stopped: AtomicBool,
    admitted: &'a Claim,
    /// The zygote tests fork from (None: cold starts).
    warm: Option<std::sync::Arc<sandpool_sandbox::ZygoteConfig>>,
    /// The language's shared artifacts, when the tests use them.
    shared: Option<Arc<crate::shared::Ready>>,
}

fn test_result(index: usize, verdict: pb::Verdict, message: impl Into<String>) -> pb::TestResult {
    pb::TestResult {
        index: index as u32,
        passed: verdict == pb::Verdict::Ok,
        verdict: verdict as i32,
        message: message.into(),
        ..Default::default()
    }
}

/// What the judge decided of one test's output.
struct Decision {
    verdict: pb::Verdict,
    message: String,
    /// A limit (the special judge's own) decided it, not the output alone.
    limit_ended: bool,
}

impl Decision {
    fn new(verdict: pb::Verdict, message: impl Into<String>) -> Self {
        Decision {
            verdict,
            message: message.into(),
            limit_ended: false,
        }
    }
}

impl Judge {
    /// A judge on `engine`.
    pub fn new(engine: Arc<Engine>) -> Self {
        Judge {
            engine,
            warm: Default::default(),
            gates: Default::default(),
        }
    }

    /// The engine judged on.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The gate of `ticket`'s tenant and priority.
    fn gate(&self, ticket: &Ticket) -> Arc<Semaphore> {
        let a = self.engine.admission();
        let size = a
            .slots()
            .max(ticket.tenant.max_queue.unwrap_or(a.queue_capacity()))
            .max(1);
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        let gate = gates
            .entry((ticket.tenant.name.clone(), ticket.priority))
            .or_insert_with(|| (size, Arc::new(Semaphore::new(size))));
        if gate.0 != size {
            // New terms: holders of the old gate's permits keep them; newcomers use this one.
            *gate = (size, Arc::new(Semaphore::new(size)));
        }
        gate.1.clone()
    }

    /// A slot for a run of one request; `admitted` is that request's claim: once it held a
    /// slot, its later runs finish even while the executor drains (see [`Admit`]).
    async fn hold(&self, deadline: Option<Instant>, admitted: &Claim) -> Result<Held, ExecError> {
        let admit = if admitted.admitted.load(Ordering::SeqCst) {
            Admit::Continuing
        } else {
            Admit::New
        };
        if admit == Admit::New && self.engine.admission().is_draining() {
            return Err(AdmissionError::Draining.into());
        }
        let permit = self.gate(&admitted.ticket).acquire_owned();
        let permit = match deadline {
            Some(d) => tokio::time::timeout_at(d, permit)
                .await
                .map_err(|_| ExecError::Admission(AdmissionError::Deadline))?,
            None => permit.await,
        }
        .map_err(|_| ExecError::Admission(AdmissionError::Draining))?;
        let slot = self.engine.acquire_as(&admitted.ticket, deadline, admit).await?;
        admitted.admitted.store(true, Ordering::SeqCst);
        Ok(Held { slot, permit })
    }

    /// Judges `req`. Errors are for the request as a whole (bad input, deadline).
    pub async fn evaluate(
        &self,
        req: pb::EvaluateRequest,
        call: impl Into<Call>,
    ) -> Result<pb::EvaluateResponse, ExecError> {
        let call = call.into();
        // Before the cache: a priority the tenant may not have is refused, answered or not.
        let ticket = self.engine.ticket(&call, req.priority, "priority")?;
        let Call { deadline, caller, .. } = call;
        let (req, cached) = self.cache_key(req, &caller).await?;
        // While an identical request runs, this one waits for its answer (up to its deadline).
        let leader = match &cached {
            Some((c, u, k)) => match crate::task::until(deadline, c.begin_evaluate(*k, *u, &req.id)).await? {
                result_cache::Begin::Hit(hit) => return Ok(hit),
                result_cache::Begin::Run(leader) => leader,
            },
            None => None,
        };
        let captured = self.engine.capture().map(|_| req.clone());
        let fut = self.evaluate_inner(req, deadline, &ticket);
        let res = match deadline {
            Some(d) => tokio::time::timeout_at(d, fut)
                .await
                .map_err(|_| ExecError::DeadlineExceeded)?,
            None => fut.await,
        };
        if let (Some((c, u, k)), Ok(resp)) = (&cached, &res) {
            c.put_evaluate(*k, *u, resp);
        }
        // Stored first: the requests waiting for this run find it.
        drop(leader);
        if let (Some(c), Some(req), Ok(resp)) = (self.engine.capture(), captured, &res) {
            c.evaluate(&req, resp, &ticket);
        }
        res
    }

    /// `req`'s result-cache key when the cache is on and the request uses it. A request
    /// the judge will reject gets no key (its error comes from judging it).
    async fn cache_key(
        &self,
        req: pb::EvaluateRequest,
        caller: &Caller,
    ) -> Result<(pb::EvaluateRequest, Option<CacheUse<'_>>), ExecError> {
        let engine = &*self.engine;
        // Checked even with the cache off: an unknown policy is a mistake either way.
        let policy = result_cache::policy(req.cache, "cache")?;
        let Some((cache, usage)) = engine.cache().and_then(|c| Some((c, c.usage(policy)?))) else {
            return Ok((req, None));
        };
        let resolved = || -> Result<_, ExecError> {
            let (lang, version) = engine.language(&req.language, "language")?;
            let opts = req.options.as_ref();
            let run = engine.policy().resolve(
                opts.and_then(|o| o.run_limits.as_ref()),
                &engine.policy().run_defaults,
                "options.run_limits",
            )?;
            let compile = engine.policy().resolve(
                opts.and_then(|o| o.compile_limits.as_ref()),
                &engine.policy().compile_defaults,
                "options.compile_limits",
            )?;
            // The special judge's toolchain decides verdicts too.
            let checker = match &req.special_judge {
                Some(sj) => engine.language(&sj.language, "special_judge.language")?.1,
                None => "",
            };
            Ok((lang.name.clone(), format!("{version}\n{checker}"), run, compile))
        };
        let Ok((name, toolchain, run, compile)) = resolved() else {
            return Ok((req, None));
        };
        // Hashes up to the whole request: off the runtime.
        let caller = caller.clone();
        let (req, key) = crate::task::blocking(move || {
            let mut req = req;
            let key = result_cache::evaluate_key(&mut req, &caller, &name, &toolchain, run, compile);
            (req, key)
        })
        .await?;
        Ok((req, Some((cache, usage, key))))
    }

    async fn evaluate_inner(
        &self,
        req: pb::EvaluateRequest,
        deadline: Option<Instant>,
        ticket: &Ticket,
    ) -> Result<pb::EvaluateResponse, ExecError> {
        let engine = &*self.engine;
        let _in_progress = engine.admission().request();
        let (table_lang, version) = engine.language(&req.language, "language")?;
        let opts = req.options.clone().unwrap_or_default();
        let admitted = Claim {
            ticket: ticket.clone(),
            admitted: AtomicBool::new(false),
        };
        let run_limits = engine.policy().resolve(
            opts.run_limits.as_ref(),
            &engine.policy().run_defaults,
            "options.run_limits",
        )?;
        let compile_limits = engine.policy().resolve(
            opts.compile_limits.as_ref(),
            &engine.policy().compile_defaults,
            "options.compile_limits",
        )?;
        let checker_lang = match &req.special_judge {
            None => None,
            Some(sj) => {
                if !matches!(req.tests, Some(pb::evaluate_request::Tests::Stdio(_))) {
                    return Err(ExecError::invalid("special_judge", "applies to stdio tests only"));
                }
                if sj.code.trim().is_empty() {
                    return Err(ExecError::invalid("special_judge.code", "must not be empty"));
                }
                Some(
                    engine
                        .language(&sj.language, "special_judge.language")?
                        .0
                        .for_code(&sj.code),
                )
            }
        };
        let program = program::build(&req, table_lang, engine.assert_prelude())?;
        // Java: named after the program's public class.
        let lang_for_code = table_lang.for_code(&program.full);
        let lang: &Language = &lang_for_code;
        engine.validate_files(&opts.files, "options.files", lang, req.completion.len())?;

        let mut resp = pb::EvaluateResponse {
            id: req.id.clone(),
            extracted_code: program.extracted.clone(),
            full_code: program.full.clone(),
            executor: Some(engine.info(version)),
            ..Default::default()
        };
        let skipped_all = |resp: &mut pb::EvaluateResponse, why: &str| {
            resp.tests = (0..program.cases.len())
                .map(|i| with_io(test_result(i, pb::Verdict::Skipped, why), &program.cases[i], &opts))
                .collect();
        };

        let mut files: Vec<SourceFile> = vec![(lang.source.clone(), program.full.clone().into_bytes(), false)];
        files.extend(
            opts.files
                .iter()
                .map(|f| (f.path.clone(), f.content.clone(), f.executable)),
        );
        let build = match self
            .compile(lang, files, compile_limits, deadline, &admitted, opts.cold_start)
            .await?
        {
            Compiled::Ok(b, phase) => {
                resp.compile = phase;
                b
            }
            Compiled::Failed(phase) => {
                resp.compile = Some(phase);
                resp.verdict = pb::Verdict::CompileError as i32;
                resp.message = "compilation failed".into();
                skipped_all(&mut resp, "not run: compilation failed");
                return Ok(self.finish(lang, resp));
            }
            Compiled::SandboxError(msg, phase) => {
                resp.compile = phase;
                resp.verdict = pb::Verdict::SandboxError as i32;
                resp.message = format!("executor failed while compiling: {msg}");
                skipped_all(&mut resp, "not run: executor failed while compiling");
                return Ok(self.finish(lang, resp));
            }
        };
        let checker = match (checker_lang.as_deref(), &req.special_judge) {
            (Some(cl), Some(sj)) => {
                let files = vec![(cl.source.clone(), sj.code.clone().into_bytes(), false)];
                match self
                    .compile(
                        cl,
                        files,
                        engine.policy().compile_defaults,
                        deadline,
                        &admitted,
                        opts.cold_start,
                    )
                    .await?
                {
                    Compiled::Ok(b, _) => Some(Checker { lang: cl, build: b }),
                    Compiled::Failed(p) => {
                        return Err(ExecError::invalid(
                            "special_judge.code",
                            format!(
                                "does not compile: {}",
                                String::from_utf8_lossy(&p.stderr)
                                    .chars()
                                    .take(2000)
                                    .collect::<String>()
                            ),
                        ));
                    }
                    Compiled::SandboxError(msg, _) => {
                        resp.verdict = pb::Verdict::SandboxError as i32;
                        resp.message = format!("executor failed while compiling the special judge: {msg}");
                        skipped_all(&mut resp, "not run: executor failed");
                        return Ok(self.finish(lang, resp));
                    }
                }
            }
            _ => None,
        };

        // Like ScaleBox, total_timeout covers the tests, not compiling them.
        let total_deadline = (opts.total_timeout_ms > 0)
            .then(|| Instant::now().checked_add(std::time::Duration::from_millis(opts.total_timeout_ms)))
            .flatten();
        let slots = engine.admission().slots().max(1);
        let parallelism = match opts.parallelism as usize {
            0 => slots,
            p => p.min(slots),
        };
        let runs = Runs {
            lang,
            build,
            program: &program,
            limits: run_limits,
            checker,
            stop_on_failure: !opts.run_all_cases,
            total_deadline,
            deadline,
            stopped: AtomicBool::new(false),
            admitted: &admitted,
            // As for Execute: the program's files may be what imports a heavy module.
            warm: engine.warm_for(
                lang,
                opts.cold_start,
                &std::iter::once(program.full.as_bytes())
                    .chain(opts.files.iter().map(|f| f.content.as_slice()))
                    .collect::<Vec<_>>(),
            ),
            shared: engine.shared_ready(lang, opts.cold_start),
        };
        // Futures are lazy: building them all first starts nothing; buffer_unordered
        // starts them in index order, `parallelism` at a time.
        let tests: Vec<_> = (0..program.cases.len())
            .map(|i| self.run_test(&runs, i, &program.cases[i]))
            .collect();
        let mut results: Vec<pb::TestResult> = futures::stream::iter(tests)
            .buffer_unordered(parallelism)
            .collect::<Vec<Result<pb::TestResult, ExecError>>>()
            .await
            .into_iter()
            .collect::<Result<_, _>>()?;
        results.sort_by_key(|t| t.index);
        resp.tests = results
            .into_iter()
            .map(|t| {
                let case = &program.cases[t.index as usize];
                with_io(t, case, &opts)
            })
            .collect();
        let (verdict, message) = overall(&resp.tests);
        resp.accepted = verdict == pb::Verdict::Ok;
        resp.verdict = verdict as i32;
        resp.message = message;
        Ok(self.finish(lang, resp))
    }

    fn finish(&self, lang: &Language, resp: pb::EvaluateResponse) -> pb::EvaluateResponse {
        let v = pb::Verdict::try_from(resp.verdict).unwrap_or_default();
        self.engine.metrics().run_finished(&lang.name, v.as_str_name());
        tracing::debug!(id = %resp.id, verdict = v.as_str_name(), "evaluated");
        resp
    }

    async fn compile(
        &self,
        lang: &Language,
        files: Vec<SourceFile>,
        limits: Limits,
        deadline: Option<Instant>,
        admitted: &Claim,
        cold_start: bool,
    ) -> Result<Compiled, ExecError> {
        if lang.compile.is_none() {
            // Shared artifacts stand in for the warm-up (Go: a shared build cache instead of a
            // copy of the warm-up's in every test's work dir); built here on first use.
            if !cold_start && self.engine.has_shared(lang) {
                let ready = match self.engine.shared_ready(lang, false) {
                    Some(r) => Some(r),
                    None => {
                        let held = self.hold(deadline, admitted).await?;
                        self.engine.shared_for(&held.slot, lang, false).await
                    }
                };
                if ready.is_some() {
                    return Ok(Compiled::Ok(Build::Sources { seed: None, files }, None));
                }
            }
            let seed = self.warm(lang, deadline, admitted).await?;
            return Ok(Compiled::Ok(Build::Sources { seed, files }, None));
        }
        let held = self.hold(deadline, admitted).await?;
        let c = build::compile(&self.engine, &held.slot, lang, files, limits, cold_start).await;
        drop(held);
        Ok(c)
    }

    /// The work dir `lang`'s warm-up left, running it on first use; concurrent first uses wait for one run.
    async fn warm(
        &self,
        lang: &Language,
        deadline: Option<Instant>,
        admitted: &Claim,
    ) -> Result<Option<Arc<WorkDir>>, ExecError> {
        let Some(program) = &lang.judge.warm_up else {
            return Ok(None);
        };
        let mut warm = self.warm.lock().await;
        if let Some(w) = warm.get(&lang.name) {
            return Ok(w.clone());
        }
        let held = self.hold(deadline, admitted).await?;
        let dir = match build::warm_up(&self.engine, &held.slot, lang, program).await {
            Ok(w) => Some(Arc::new(w)),
            Err(e) => {
                // Tests still run, only slower; the next executor start tries again.
                tracing::warn!(language = %lang.name, error = %e, "warm-up failed");
                None
            }
        };
        drop(held);
        warm.insert(lang.name.clone(), dir.clone());
        Ok(dir)
    }

    /// Runs test `i` and decides its verdict.
    async fn run_test(&self, runs: &Runs<'_>, i: usize, case: &Case) -> Result<pb::TestResult, ExecError> {
        // The test skipped, if the request stopped (a limit decides only the total_timeout skip).
        let skipped = || {
            let (why, limit_ended) = if runs.stopped.load(Ordering::SeqCst) {
                ("skipped: an earlier test failed and run_all_cases is false", false)
            } else if runs.total_deadline.is_some_and(|d| Instant::now() >= d) {
                (SKIPPED_AT_TOTAL_TIMEOUT, true)
            } else {
                return None;
            };
            Some(pb::TestResult {
                limit_ended,
                ..test_result(i, pb::Verdict::Skipped, why)
            })
        };
        if let Some(t) = skipped() {
            return Ok(t);
        }
        // Draining refuses only a request that never ran: it gets UNAVAILABLE as a whole.
        let held = match self.hold(runs.deadline, runs.admitted).await {
            Ok(h) => h,
            Err(e @ ExecError::Admission(AdmissionError::QueueFull { .. })) => {
                return Ok(test_result(i, pb::Verdict::SandboxError, e.to_string()));
            }
            Err(e) => return Err(e),
        };
        if let Some(t) = skipped() {
            return Ok(t);
        }
        let work = match build::prepare(&self.engine, &held.slot, &runs.build, vec![]).await {
            Ok(w) => w,
            Err(e) => return Ok(test_result(i, pb::Verdict::SandboxError, e)),
        };
        let command = crate::shared::run_command(runs.shared.as_deref(), runs.lang);
        let spec = RunSpec {
            argv: command.argv,
            env: command.env,
            stdin: case.stdin.clone(),
            limits: runs.limits,
            gpu: runs.lang.gpu,
            warm: runs.warm.clone(),
        };
        let phased = self.engine.run_phase(&held.slot, &work, &spec, Phase::Run).await;
        held.release(&self.engine, work);
        let mut run = phased.result;
        run.warm |= command.warm;
        let mut t = match phased.verdict {
            pb::Verdict::Ok => {
                let d = self.judge_output(runs, case, &run).await?;
                pb::TestResult {
                    limit_ended: d.limit_ended,
                    ..test_result(i, d.verdict, d.message)
                }
            }
            pb::Verdict::SandboxError => test_result(i, pb::Verdict::SandboxError, phased.error.unwrap_or_default()),
            v => test_result(i, v, ""),
        };
        if matches!(case.expect, Expect::Json(_) | Expect::Sentinel) {
            program::strip_marker(&mut run.stdout, &runs.program.nonce);
        }
        t.run = Some(run);
        if !t.passed && runs.stop_on_failure {
            runs.stopped.store(true, Ordering::SeqCst);
        }
        Ok(t)
    }

    /// The verdict of a run that exited 0; never from anything but the judge's own checks.
    async fn judge_output(&self, runs: &Runs<'_>, case: &Case, run: &pb::PhaseResult) -> Result<Decision, ExecError> {
        let wrong = |m: &str| Ok(Decision::new(pb::Verdict::WrongAnswer, m));
        match &case.expect {
            Expect::Stdout(expected) => match &runs.checker {
                None if runs.program.comparison.matches(&run.stdout, expected) => {
                    Ok(Decision::new(pb::Verdict::Ok, ""))
                }
                None => wrong("output differs from the expected output"),
                Some(c) => self.special_judge(runs, c, case, &run.stdout).await,
            },
            Expect::Json(expected) => {
                let Some(line) = program::harness_result(&run.stdout, &runs.program.nonce) else {
                    return wrong("the function's result was not reported (did the program exit early?)");
                };
                match serde_json::from_slice::<serde_json::Value>(line) {
                    Ok(v) if super::compare::json_matches(&v, expected) => Ok(Decision::new(pb::Verdict::Ok, "")),
                    Ok(v) => wrong(&format!("returned {}", truncate(&v.to_string(), 200))),
                    Err(_) => wrong("the function's result is not JSON"),
                }
            }
            Expect::Sentinel if program::sentinel_seen(&run.stdout, &runs.program.nonce) => {
                Ok(Decision::new(pb::Verdict::Ok, ""))
            }
            Expect::Sentinel => wrong("exited 0 before every test ran (completion marker missing)"),
            Expect::ExitZero => Ok(Decision::new(pb::Verdict::Ok, "")),
        }
    }

    /// Runs the checker on one test in its own sandbox: exit 0 passes.
    async fn special_judge(
        &self,
        runs: &Runs<'_>,
        checker: &Checker<'_>,
        case: &Case,
        answer: &[u8],
    ) -> Result<Decision, ExecError> {
        let held = match self.hold(runs.deadline, runs.admitted).await {
            Ok(h) => h,
            Err(e @ ExecError::Admission(AdmissionError::QueueFull { .. })) => {
                return Ok(Decision::new(pb::Verdict::SandboxError, format!("special judge: {e}")));
            }
            Err(e) => return Err(e),
        };
        let extra: Vec<SourceFile> = vec![
            ("stdin.txt".into(), case.input.clone(), false),
            ("stdout.txt".into(), case.expected.clone(), false),
            ("answer.txt".into(), answer.to_vec(), false),
        ];
        let work = match build::prepare(&self.engine, &held.slot, &checker.build, extra).await {
            Ok(w) => w,
            Err(e) => return Ok(Decision::new(pb::Verdict::SandboxError, format!("special judge: {e}"))),
        };
        let spec = RunSpec {
            argv: checker.lang.run.clone(),
            env: checker.lang.run_env(),
            stdin: vec![],
            limits: self.engine.policy().run_defaults,
            gpu: checker.lang.gpu,
            warm: None,
        };
        let p = self.engine.run_phase(&held.slot, &work, &spec, Phase::Run).await;
        held.release(&self.engine, work);
        let stderr = String::from_utf8_lossy(&p.result.stderr);
        Ok(match p.verdict {
            pb::Verdict::Ok => Decision::new(pb::Verdict::Ok, ""),
            pb::Verdict::SandboxError => Decision::new(
                pb::Verdict::SandboxError,
                format!("special judge: {}", p.error.unwrap_or_default()),
            ),
            pb::Verdict::RuntimeError if p.result.signal == 0 => Decision::new(
                pb::Verdict::WrongAnswer,
                format!(
                    "special judge rejected the answer (exit {}): {}",
                    p.result.exit_code,
                    truncate(stderr.trim(), 500)
                ),
            ),
            v => Decision {
                limit_ended: true,
                ..Decision::new(
                    pb::Verdict::WrongAnswer,
                    format!(
                        "special judge ended with {}: {}",
                        v.as_str_name(),
                        truncate(stderr.trim(), 500)
                    ),
                )
            },
        })
    }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

fn with_io(mut t: pb::TestResult, case: &Case, opts: &pb::EvaluateOptions) -> pb::TestResult {
    if !opts.omit_test_io {
        t.input = case.input.clone();
        t.expected = case.expected.clone();
    }
    t
}

/// The response's verdict: OK when every test passed; else the first definite
/// failure (by index), else SANDBOX_ERROR if the executor failed a test, else SKIPPED.
pub fn overall(tests: &[pb::TestResult]) -> (pb::Verdict, String) {
    let v = |t: &pb::TestResult| pb::Verdict::try_from(t.verdict).unwrap_or(pb::Verdict::SandboxError);
    if !tests.is_empty() && tests.iter().all(|t| t.passed) {
        return (pb::Verdict::Ok, String::new());
    }
    let msg = |t: &pb::TestResult| format!("test {}: {}", t.index, v(t).as_str_name());
    if let Some(t) = tests
        .iter()
        .find(|t| !t.passed && !matches!(v(t), pb::Verdict::SandboxError | pb::Verdict::Skipped))
    {
        return (v(t), msg(t));
    }
    if let Some(t) = tests.iter().find(|t| v(t) == pb::Verdict::SandboxError) {
        return (pb::Verdict::SandboxError, format!("{}: {}", msg(t), t.message));
    }
    match tests.iter().find(|t| !t.passed) {
        Some(t) => (pb::Verdict::Skipped, format!("{}: {}", msg(t), t.message)),
        None => (pb::Verdict::SandboxError, "no test ran".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definite_failures_win_over_sandbox_errors_and_skips() {
        let t = |i, v| test_result(i, v, "");
        assert_eq!(
            overall(&[t(0, pb::Verdict::Ok), t(1, pb::Verdict::Ok)]).0,
            pb::Verdict::Ok
        );
        assert_eq!(
            overall(&[t(0, pb::Verdict::SandboxError), t(1, pb::Verdict::WrongAnswer)]).0,
            pb::Verdict::WrongAnswer
        );
        assert_eq!(
            overall(&[
                t(0, pb::Verdict::Ok),
                t(1, pb::Verdict::Skipped),
                t(2, pb::Verdict::SandboxError)
            ])
            .0,
            pb::Verdict::SandboxError
        );
        assert_eq!(
            overall(&[t(0, pb::Verdict::Ok), t(1, pb::Verdict::Skipped)]).0,
            pb::Verdict::Skipped
        );
        assert_eq!(
            overall(&[t(0, pb::Verdict::TimeLimitExceeded), t(1, pb::Verdict::RuntimeError)]).0,
            pb::Verdict::TimeLimitExceeded
        );
        assert_ne!(overall(&[]).0, pb::Verdict::Ok);
    }
}
