//! The result cache: an identical request is answered with the response stored
//! for it, without running anything. Off unless `--result-cache-entries` is set.
//!
//! - **Key**: SHA-256 over the request's protobuf encoding, with the fields that
//!   cannot change the result cleared (caller ids, the cache policy itself) and
//!   the limits replaced by the resolved ones (so "0 = default" and the default
//!   spelled out are one entry), plus the language's name and probed toolchain
//!   version. Any field added to the requests later is part of the key unless
//!   cleared here: the safe default.
//! - **What is stored**: never SANDBOX_ERROR (the executor's failure, not the
//!   program's) nor anything else a retry could change for reasons of the
//!   executor. Verdicts that depend on timing or memory pressure
//!   (TIME_LIMIT_EXCEEDED, WALL_TIME_LIMIT_EXCEEDED, MEMORY_LIMIT_EXCEEDED, a
//!   killed compiler, a test skipped at `total_timeout`, a special judge ended by
//!   a limit) are stored and answered only for requests with
//!   `CACHE_POLICY_INCLUDE_LIMITS`, or for all with `--result-cache-limit-verdicts`.
//! - **Bounds**: at most `entries` responses and `bytes` bytes (their encoded
//!   size plus a fixed overhead); the least recently used go first.
//! - **In flight**: a request identical to one running now waits for that run
//!   ([`Begin`], [`Leader`]) and is answered from what it stored.
//!
//! The cache assumes programs are deterministic given their inputs: a program that
//! reads the clock or a random source gets the first run's answer; such callers
//! send `CACHE_POLICY_BYPASS`.

use crate::call::Caller;
use crate::error::ExecError;
use crate::limits::{Limits, to_proto};
use crate::metrics::Metrics;
use lru::LruCache;
use prost::Message;
use sandpool_proto::v1 as pb;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// What each stored entry costs beyond its response's encoded size (key, list links, Arc).
const ENTRY_OVERHEAD: u64 = 160;

/// Result cache settings (from the executor's flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Most responses kept; 0 turns the cache off.
    pub entries: usize,
    /// Most bytes kept, responses' encoded sizes plus overhead.
    pub bytes: u64,
    /// Store and answer limit verdicts for every request, not only those that ask.
    pub limit_verdicts: bool,
}

/// A request's key: SHA-256 of its canonical encoding.
pub type Key = [u8; 32];

/// How one request uses the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Use {
    /// Limit verdicts may be answered and stored.
    limits: bool,
}

/// Whether a response may be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Never (the executor failed somewhere).
    Never,
    /// Only for requests that accept limit verdicts.
    LimitDependent,
    /// Always.
    Stable,
}

#[derive(Debug, Clone)]
enum Stored {
    Execute(Arc<pb::ExecuteResponse>),
    Evaluate(Arc<pb::EvaluateResponse>),
}

#[derive(Debug)]
struct Entry {
    value: Stored,
    bytes: u64,
    limit_dependent: bool,
}

#[derive(Debug)]
struct Inner {
    lru: LruCache<Key, Entry>,
    bytes: u64,
}

/// The executor's result cache; shared by every front end through the engine.
#[derive(Debug)]
pub struct ResultCache {
    cfg: CacheConfig,
    inner: Mutex<Inner>,
    /// Keys being run now, each with a receiver that closes when its run ends: an
    /// identical request arriving meanwhile waits for it rather than running too.
    inflight: Mutex<HashMap<Key, watch::Receiver<()>>>,
    metrics: Arc<Metrics>,
}

/// What a request does after looking in the cache.
#[derive(Debug)]
pub enum Begin<'a, T> {
    /// Answered from the cache.
    Hit(T),
    /// Run it; while the [`Leader`] (if any) lives, identical requests wait for this run.
    /// Store the response before dropping it.
    Run(Option<Leader<'a>>),
}

/// The one run of a key that identical requests wait for; dropping it (after storing the
/// response, or when the run failed or was cancelled) lets them go on.
#[derive(Debug)]
pub struct Leader<'a> {
    cache: &'a ResultCache,
    key: Key,
    _done: watch::Sender<()>,
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        // Removed before the sender closes: a waiter woken by the close that finds nothing
        // stored runs by itself rather than queueing behind another leader.
        lock(&self.cache.inflight).remove(&self.key);
    }
}

/// Locks `m`; a panic while holding one of these locks leaves consistent state (no
/// operation here panics half-way): keep serving rather than poisoning every later request.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Which request kind an entry or a metric is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Execute,
    Evaluate,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Execute => "execute",
            Kind::Evaluate => "evaluate",
        }
    }
}

/// The policy of a request, checked: an unknown value is the request's error.
pub fn policy(value: i32, field: &str) -> Result<pb::CachePolicy, ExecError> {
    pb::CachePolicy::try_from(value).map_err(|_| ExecError::invalid(field, format!("unknown cache policy {value}")))
}

impl ResultCache {
    /// The cache `cfg` describes; None when it is off.
    pub fn new(cfg: CacheConfig, metrics: Arc<Metrics>) -> Option<Self> {
        let cap = std::num::NonZeroUsize::new(cfg.entries)?;
        if cfg.bytes == 0 {
            return None;
        }
        Some(ResultCache {
            cfg,
            inner: Mutex::new(Inner {
                lru: LruCache::new(cap),
                bytes: 0,
            }),
            inflight: Mutex::new(HashMap::new()),
            metrics,
        })
    }

    /// How a request with `policy` uses the cache; None when it bypasses it.
    pub fn usage(&self, policy: pb::CachePolicy) -> Option<Use> {
        match policy {
            pb::CachePolicy::Bypass => None,
            pb::CachePolicy::Default => Some(Use {
                limits: self.cfg.limit_verdicts,
            }),
            pb::CachePolicy::IncludeLimits => Some(Use { limits: true }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// The stored response for `key`, if `usage` may have it.
    fn peek(&self, key: &Key, usage: Use) -> Option<Stored> {
        match self.lock().lru.get(key) {
            Some(e) if usage.limits || !e.limit_dependent => Some(e.value.clone()),
            _ => None,
        }
    }

    /// Looks `key` up: the stored response, or the go-ahead to run. While an identical
    /// request runs, this waits for it and then looks again; if that run stored nothing this
    /// request may have, it runs too (without making others wait for it).
    async fn begin(&self, kind: Kind, key: Key, usage: Use) -> Begin<'_, Stored> {
        let waiting = {
            if let Some(v) = self.peek(&key, usage) {
                self.metrics.cache_lookup(kind.as_str(), true);
                return Begin::Hit(v);
            }
            let mut inflight = lock(&self.inflight);
            match inflight.get(&key) {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = watch::channel(());
                    inflight.insert(key, rx);
                    self.metrics.cache_lookup(kind.as_str(), false);
                    return Begin::Run(Some(Leader {
                        cache: self,
                        key,
                        _done: tx,
                    }));
                }
            }
        };
        let mut waiting = waiting;
        // Nothing is ever sent: this returns when the leader's sender closes.
        let _ = waiting.changed().await;
        let hit = self.peek(&key, usage);
        self.metrics.cache_lookup(kind.as_str(), hit.is_some());
        match hit {
            Some(v) => Begin::Hit(v),
            None => Begin::Run(None),
        }
    }

    fn put(&self, key: Key, usage: Use, class: Class, value: Stored, encoded: usize) {
        let limit_dependent = match class {
            Class::Never => return,
            Class::LimitDependent if !usage.limits => return,
            Class::LimitDependent => true,
            Class::Stable => false,
        };
        let bytes = encoded as u64 + ENTRY_OVERHEAD;
        if bytes > self.cfg.bytes {
            return;
        }
        let mut evicted = 0u64;
        let (entries, total) = {
            let mut inner = self.lock();
            let entry = Entry {
                value,
                bytes,
                limit_dependent,
            };
            if let Some((old_key, old)) = inner.lru.push(key, entry) {
                inner.bytes -= old.bytes;
                // `push` hands back the entry it replaced (same key) or the one it evicted.
                if old_key != key {
                    evicted += 1;
                }
            }
            inner.bytes += bytes;
            while inner.bytes > self.cfg.bytes {
                let Some((_, old)) = inner.lru.pop_lru() else {
                    break;
                };
                inner.bytes -= old.bytes;
                evicted += 1;
            }
            (inner.lru.len(), inner.bytes)
        };
        self.metrics.cache_stored(evicted, entries, total);
    }

    /// An Execute request's stored response (marked cached), or the go-ahead to run it.
    pub async fn begin_execute(&self, key: Key, usage: Use) -> Begin<'_, pb::ExecuteResponse> {
        match self.begin(Kind::Execute, key, usage).await {
            Begin::Hit(Stored::Execute(r)) => {
                let mut r = (*r).clone();
                r.cached = true;
                Begin::Hit(r)
            }
            // Keys of the two kinds hash different domains; never expected.
            Begin::Hit(Stored::Evaluate(_)) => Begin::Run(None),
            Begin::Run(l) => Begin::Run(l),
        }
    }

    /// Stores an Execute response if the rules allow it.
    pub fn put_execute(&self, key: Key, usage: Use, resp: &pb::ExecuteResponse) {
        let class = classify_execute(resp);
        if class == Class::Never {
            return;
        }
        let encoded = resp.encoded_len();
        self.put(key, usage, class, Stored::Execute(Arc::new(resp.clone())), encoded);
    }

    /// An Evaluate request's stored response (marked cached, carrying `id`), or the go-ahead to run it.
    pub async fn begin_evaluate(&self, key: Key, usage: Use, id: &str) -> Begin<'_, pb::EvaluateResponse> {
        match self.begin(Kind::Evaluate, key, usage).await {
            Begin::Hit(Stored::Evaluate(r)) => {
                let mut r = (*r).clone();
                r.cached = true;
                r.id = id.to_owned();
                Begin::Hit(r)
            }
            Begin::Hit(Stored::Execute(_)) => Begin::Run(None),
            Begin::Run(l) => Begin::Run(l),
        }
    }

    /// Stores an Evaluate response if the rules allow it.
    pub fn put_evaluate(&self, key: Key, usage: Use, resp: &pb::EvaluateResponse) {
        let class = classify_evaluate(resp);
        if class == Class::Never {
            return;
        }
        let encoded = resp.encoded_len();
        self.put(key, usage, class, Stored::Evaluate(Arc::new(resp.clone())), encoded);
    }
}

fn verdict(v: i32) -> pb::Verdict {
    pb::Verdict::try_from(v).unwrap_or(pb::Verdict::Unspecified)
}

/// A verdict that timing or memory pressure on the machine can change.
fn limit_verdict(v: pb::Verdict) -> bool {
    matches!(
        v,
        pb::Verdict::TimeLimitExceeded | pb::Verdict::WallTimeLimitExceeded | pb::Verdict::MemoryLimitExceeded
    )
}

/// A phase ended by a limit, or (a compiler's failure reports COMPILE_ERROR) killed by a signal.
fn limit_phase(p: &pb::PhaseResult) -> bool {
    limit_verdict(verdict(p.verdict)) || (verdict(p.verdict) == pb::Verdict::CompileError && p.signal != 0)
}

/// Whether an Execute response may be stored.
pub fn classify_execute(r: &pb::ExecuteResponse) -> Class {
    let v = verdict(r.verdict);
    if matches!(v, pb::Verdict::SandboxError | pb::Verdict::Unspecified) {
        return Class::Never;
    }
    let phases = [&r.compile, &r.run];
    if phases
        .iter()
        .filter_map(|p| p.as_ref())
        .any(|p| verdict(p.verdict) == pb::Verdict::SandboxError)
    {
        return Class::Never;
    }
    // A compile killed by its limit reports its own verdict in `compile`, COMPILE_ERROR overall.
    let compile_killed = r
        .compile
        .as_ref()
        .is_some_and(|p| limit_phase(p) || (v == pb::Verdict::CompileError && p.signal != 0));
    if limit_verdict(v) || compile_killed {
        Class::LimitDependent
    } else {
        Class::Stable
    }
}

/// Whether an Evaluate response may be stored.
pub fn classify_evaluate(r: &pb::EvaluateResponse) -> Class {
    let v = verdict(r.verdict);
    if r.error.is_some() || matches!(v, pb::Verdict::SandboxError | pb::Verdict::Unspecified) {
        return Class::Never;
    }
    // Overall verdicts prefer a definite failure to a test the executor failed: look at every test.
    if r.tests.iter().any(|t| verdict(t.verdict) == pb::Verdict::SandboxError) {
        return Class::Never;
    }
    let test_limited = |t: &pb::TestResult| {
        limit_verdict(verdict(t.verdict))
            // The judge says so in a typed field: a skip at total_timeout, a special judge at its limits.
            || t.limit_ended
            || t.run.as_ref().is_some_and(limit_phase)
    };
    let compile_killed = r.compile.as_ref().is_some_and(|p| p.signal != 0 || limit_phase(p));
    if limit_verdict(v) || compile_killed || r.tests.iter().any(test_limited) {
        Class::LimitDependent
    } else {
        Class::Stable
    }
}

fn digest(domain: &str, caller: &Caller, language: &str, toolchain: &str, encoded: &[u8]) -> Key {
    let mut h = Sha256::new();
    // Length-prefixed parts: no two different tuples hash the same bytes. The caller is
    // part of the key, so one caller's answers are never another's (nor is the fact that
    // someone ran this program).
    for part in [
        domain.as_bytes(),
        caller.as_bytes(),
        language.as_bytes(),
        toolchain.as_bytes(),
        encoded,
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize().into()
}

/// The key of an Execute request, with its limits resolved to `run` and `compile`.
///
/// Clears (and restores) what cannot change the result; encodes the rest.
pub fn execute_key(
    req: &mut pb::ExecuteRequest,
    caller: &Caller,
    language: &str,
    toolchain: &str,
    run: Limits,
    compile: Limits,
) -> Key {
    let id = std::mem::take(&mut req.request_id);
    let cache = std::mem::take(&mut req.cache);
    let limits = req.limits.replace(to_proto(run));
    let compile_limits = req.compile_limits.replace(to_proto(compile));
    let encoded = req.encode_to_vec();
    req.request_id = id;
    req.cache = cache;
    req.limits = limits;
    req.compile_limits = compile_limits;
    digest("sandpool.v1.ExecuteRequest", caller, language, toolchain, &encoded)
}

/// The key of an Evaluate request, with its limits resolved to `run` and `compile`;
/// `toolchain` names every toolchain the request uses (the special judge's too).
pub fn evaluate_key(
    req: &mut pb::EvaluateRequest,
    caller: &Caller,
    language: &str,
    toolchain: &str,
    run: Limits,
    compile: Limits,
) -> Key {
    let id = std::mem::take(&mut req.id);
    let cache = std::mem::take(&mut req.cache);
    let had_options = req.options.is_some();
    let opts = req.options.get_or_insert_with(Default::default);
    let limits = opts.run_limits.replace(to_proto(run));
    let compile_limits = opts.compile_limits.replace(to_proto(compile));
    let encoded = req.encode_to_vec();
    req.id = id;
    req.cache = cache;
    if had_options {
        if let Some(o) = req.options.as_mut() {
            o.run_limits = limits;
            o.compile_limits = compile_limits;
        }
    } else {
        req.options = None;
    }
    digest("sandpool.v1.EvaluateRequest", caller, language, toolchain, &encoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> Limits {
        Limits {
            wall: Duration::from_secs(1),
            cpu: Duration::from_secs(1),
            memory: 1 << 28,
            output: 1 << 20,
            processes: 16,
            file_size: 1 << 20,
        }
    }

    fn cache(entries: usize, bytes: u64, limit_verdicts: bool) -> ResultCache {
        ResultCache::new(
            CacheConfig {
                entries,
                bytes,
                limit_verdicts,
            },
            Metrics::new(),
        )
        .expect("cache on")
    }

    impl ResultCache {
        /// The stored response without waiting or counting.
        fn get_execute(&self, key: &Key, usage: Use) -> Option<pb::ExecuteResponse> {
            match self.peek(key, usage)? {
                Stored::Execute(r) => Some(pb::ExecuteResponse {
                    cached: true,
                    ..(*r).clone()
                }),
                Stored::Evaluate(_) => None,
            }
        }
    }

    #[tokio::test]
    async fn identical_requests_wait_for_the_one_running() {
        let c = cache(8, 1 << 20, false);
        let u = c.usage(pb::CachePolicy::Default).expect("on");
        let Begin::Run(Some(leader)) = c.begin_execute([1; 32], u).await else {
            panic!("the first request must lead");
        };
        let waiter = c.begin_execute([1; 32], u);
        tokio::pin!(waiter);
        assert!(
            futures::poll!(&mut waiter).is_pending(),
            "an identical request did not wait"
        );
        c.put_execute([1; 32], u, &ok_response("x"));
        drop(leader);
        match waiter.await {
            Begin::Hit(r) => assert_eq!(r.run.map(|p| p.stdout), Some(b"x".to_vec())),
            Begin::Run(_) => panic!("the waiter ran although the leader stored its response"),
        }

        // A leader that stores nothing (a SANDBOX_ERROR, a cancelled run) lets its waiters run
        // at once, none of them leading.
        let Begin::Run(Some(leader)) = c.begin_execute([2; 32], u).await else {
            panic!("the first request must lead");
        };
        let waiter = c.begin_execute([2; 32], u);
        tokio::pin!(waiter);
        assert!(futures::poll!(&mut waiter).is_pending());
        drop(leader);
        assert!(matches!(waiter.await, Begin::Run(None)));
        // ... and the next request leads again.
        assert!(matches!(c.begin_execute([2; 32], u).await, Begin::Run(Some(_))));
    }

    fn ok_response(stdout: &str) -> pb::ExecuteResponse {
        pb::ExecuteResponse {
            verdict: pb::Verdict::Ok as i32,
            run: Some(pb::PhaseResult {
                verdict: pb::Verdict::Ok as i32,
                stdout: stdout.as_bytes().to_vec(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn off_unless_entries_and_bytes_are_set() {
        let off = |entries, bytes| {
            ResultCache::new(
                CacheConfig {
                    entries,
                    bytes,
                    limit_verdicts: false,
                },
                Metrics::new(),
            )
            .is_none()
        };
        assert!(off(0, 1 << 20));
        assert!(off(10, 0));
        assert!(!off(10, 1 << 20));
    }

    #[test]
    fn keys_ignore_ids_and_policy_but_not_inputs_or_resolved_limits() {
        let base = pb::ExecuteRequest {
            language: "python".into(),
            code: "print(1)".into(),
            stdin: b"x".to_vec(),
            request_id: "a".into(),
            ..Default::default()
        };
        let key = |r: &pb::ExecuteRequest, l: Limits| {
            execute_key(&mut r.clone(), &Caller::default(), "python", "Python 3", l, limits())
        };
        let k = key(&base, limits());
        let same = pb::ExecuteRequest {
            request_id: "b".into(),
            cache: pb::CachePolicy::IncludeLimits as i32,
            ..base.clone()
        };
        assert_eq!(key(&same, limits()), k);
        // Limits left to the default and the same limits spelled out are one request.
        let spelled = pb::ExecuteRequest {
            limits: Some(to_proto(limits())),
            ..base.clone()
        };
        assert_eq!(key(&spelled, limits()), k);
        let other_stdin = pb::ExecuteRequest {
            stdin: b"y".to_vec(),
            ..base.clone()
        };
        assert_ne!(key(&other_stdin, limits()), k);
        let more_memory = Limits {
            memory: 1 << 29,
            ..limits()
        };
        assert_ne!(key(&base, more_memory), k);
        assert_ne!(
            execute_key(
                &mut base.clone(),
                &Caller::default(),
                "python",
                "Python 3.12",
                limits(),
                limits()
            ),
            k
        );
        // Another caller's identical request is another entry.
        let other = Caller::from_authorization(Some(b"Bearer someone-else"));
        assert_ne!(
            execute_key(&mut base.clone(), &other, "python", "Python 3", limits(), limits()),
            k
        );
        // Keying restores what it cleared.
        let mut r = base.clone();
        execute_key(&mut r, &Caller::default(), "python", "Python 3", limits(), limits());
        assert_eq!(r, base);
    }

    #[test]
    fn evaluate_keys_restore_the_request_and_ignore_the_id() {
        let base = pb::EvaluateRequest {
            id: "1".into(),
            language: "python".into(),
            completion: "print(1)".into(),
            ..Default::default()
        };
        let mut r = base.clone();
        let k = evaluate_key(&mut r, &Caller::default(), "python", "v", limits(), limits());
        assert_eq!(r, base);
        let mut other_id = pb::EvaluateRequest {
            id: "2".into(),
            ..base.clone()
        };
        assert_eq!(
            evaluate_key(&mut other_id, &Caller::default(), "python", "v", limits(), limits()),
            k
        );
        let mut with_opts = pb::EvaluateRequest {
            options: Some(pb::EvaluateOptions {
                run_all_cases: true,
                ..Default::default()
            }),
            ..base.clone()
        };
        let before = with_opts.clone();
        assert_ne!(
            evaluate_key(&mut with_opts, &Caller::default(), "python", "v", limits(), limits()),
            k
        );
        assert_eq!(with_opts, before);
    }

    #[test]
    fn sandbox_errors_are_never_stored_and_limit_verdicts_only_when_asked() {
        let c = cache(10, 1 << 20, false);
        let usage = c.usage(pb::CachePolicy::Default).expect("default uses the cache");
        let err = pb::ExecuteResponse {
            verdict: pb::Verdict::SandboxError as i32,
            ..Default::default()
        };
        c.put_execute([1; 32], usage, &err);
        assert!(c.get_execute(&[1; 32], usage).is_none());

        let tle = pb::ExecuteResponse {
            verdict: pb::Verdict::TimeLimitExceeded as i32,
            ..Default::default()
        };
        c.put_execute([2; 32], usage, &tle);
        assert!(c.get_execute(&[2; 32], usage).is_none());
        let asks = c.usage(pb::CachePolicy::IncludeLimits).expect("uses the cache");
        c.put_execute([2; 32], asks, &tle);
        // Stored for requests that ask; a default request does not get it.
        assert!(c.get_execute(&[2; 32], usage).is_none());
        assert_eq!(
            c.get_execute(&[2; 32], asks).map(|r| r.verdict),
            Some(pb::Verdict::TimeLimitExceeded as i32)
        );
        assert!(c.usage(pb::CachePolicy::Bypass).is_none());

        let hit = {
            c.put_execute([3; 32], usage, &ok_response("hi"));
            c.get_execute(&[3; 32], usage).expect("stored")
        };
        assert!(hit.cached);
        assert_eq!(hit.run.map(|p| p.stdout), Some(b"hi".to_vec()));
    }

    #[test]
    fn a_killed_compiler_is_a_limit_verdict() {
        let killed = pb::ExecuteResponse {
            verdict: pb::Verdict::CompileError as i32,
            compile: Some(pb::PhaseResult {
                verdict: pb::Verdict::TimeLimitExceeded as i32,
                signal: 9,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(classify_execute(&killed), Class::LimitDependent);
        let rejected = pb::ExecuteResponse {
            verdict: pb::Verdict::CompileError as i32,
            compile: Some(pb::PhaseResult {
                verdict: pb::Verdict::RuntimeError as i32,
                exit_code: 1,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(classify_execute(&rejected), Class::Stable);
    }

    #[test]
    fn evaluate_rules_look_at_every_test() {
        let t = |v: pb::Verdict, msg: &str| pb::TestResult {
            verdict: v as i32,
            passed: v == pb::Verdict::Ok,
            message: msg.into(),
            ..Default::default()
        };
        let resp = |tests: Vec<pb::TestResult>| pb::EvaluateResponse {
            verdict: pb::Verdict::WrongAnswer as i32,
            tests,
            ..Default::default()
        };
        let wa = t(pb::Verdict::WrongAnswer, "");
        assert_eq!(classify_evaluate(&resp(vec![wa.clone()])), Class::Stable);
        assert_eq!(
            classify_evaluate(&resp(vec![wa.clone(), t(pb::Verdict::SandboxError, "x")])),
            Class::Never
        );
        // The judge's typed flag decides, whatever its message says (issue 24 item 9).
        let limited = |v: pb::Verdict, msg: &str| pb::TestResult {
            limit_ended: true,
            ..t(v, msg)
        };
        assert_eq!(
            classify_evaluate(&resp(vec![wa.clone(), limited(pb::Verdict::Skipped, "reworded skip")])),
            Class::LimitDependent
        );
        assert_eq!(
            classify_evaluate(&resp(vec![limited(pb::Verdict::WrongAnswer, "checker stopped")])),
            Class::LimitDependent
        );
        assert_eq!(
            classify_evaluate(&resp(vec![t(
                pb::Verdict::WrongAnswer,
                "special judge ended with TIME_LIMIT_EXCEEDED: "
            )])),
            Class::Stable,
            "a message alone no longer says anything"
        );
        assert_eq!(
            classify_evaluate(&resp(vec![wa, t(pb::Verdict::MemoryLimitExceeded, "")])),
            Class::LimitDependent
        );
    }

    #[test]
    fn bounded_by_entries_and_bytes_least_recently_used_first() {
        let c = cache(2, 1 << 20, false);
        let u = c.usage(pb::CachePolicy::Default).expect("on");
        c.put_execute([1; 32], u, &ok_response("1"));
        c.put_execute([2; 32], u, &ok_response("2"));
        // Touch 1: 2 is now the least recently used.
        assert!(c.get_execute(&[1; 32], u).is_some());
        c.put_execute([3; 32], u, &ok_response("3"));
        assert!(c.get_execute(&[2; 32], u).is_none());
        assert!(c.get_execute(&[1; 32], u).is_some());
        assert!(c.get_execute(&[3; 32], u).is_some());

        let big = ok_response(&"x".repeat(1000));
        let one = big.encoded_len() as u64 + ENTRY_OVERHEAD;
        let c = cache(100, 2 * one + one / 2, false);
        for k in 1..=3u8 {
            c.put_execute([k; 32], u, &big);
        }
        assert!(
            c.get_execute(&[1; 32], u).is_none(),
            "the oldest goes past the byte bound"
        );
        assert!(c.get_execute(&[2; 32], u).is_some());
        assert!(c.get_execute(&[3; 32], u).is_some());
        assert!(c.lock().bytes <= 2 * one + one / 2);
        // A response larger than the whole cache is not stored (and evicts nothing).
        let huge = ok_response(&"x".repeat(4000));
        c.put_execute([9; 32], u, &huge);
        assert!(c.get_execute(&[9; 32], u).is_none());
        assert!(c.get_execute(&[2; 32], u).is_some());
    }
}
