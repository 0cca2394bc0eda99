//! Prometheus metrics: runs by language and verdict, phase latencies, slots.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    language: String,
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    protocol: &'static str,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Why a request was refused for want of one of the executor's resources (gRPC
/// RESOURCE_EXHAUSTED, HTTP 429 or 503): the `reason` label of
/// `sandpool_resource_exhausted_total`. A caller's own limits (a session's calls, CPU time
/// or full /work; an oversize request) are not the executor's saturation and are not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhaustion {
    /// The admission queue is full (`--queue`).
    QueueFull,
    /// The byte budget of requests and replies in flight (`--max-inflight-bytes`).
    InflightBytes,
    /// The executor holds its sessions (`--max-sessions`, or no session seat is free).
    Sessions,
    /// The sessions hold their memory budget (`--session-memory-bytes`).
    SessionMemory,
    /// The caller's tenant holds its sessions (its `max_sessions`).
    TenantSessions,
}

impl Exhaustion {
    /// Every reason, each exported from the start (0 until it happens).
    pub const ALL: [Exhaustion; 5] = [
        Exhaustion::QueueFull,
        Exhaustion::InflightBytes,
        Exhaustion::Sessions,
        Exhaustion::SessionMemory,
        Exhaustion::TenantSessions,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Exhaustion::QueueFull => "queue_full",
            Exhaustion::InflightBytes => "inflight_bytes",
            Exhaustion::Sessions => "sessions",
            Exhaustion::SessionMemory => "session_memory",
            Exhaustion::TenantSessions => "tenant_sessions",
        }
    }
}

/// The `reason` labels of `sandpool_tenant_refused_total` (see `crate::engine`).
pub const TENANT_REFUSALS: [&str; 3] = ["queue_full", "deadline", "draining"];

/// The phases of `sandpool_phase_duration_seconds`.
const PHASES: [&str; 3] = ["queue", "compile", "run"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantPriorityLabels {
    tenant: String,
    priority: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantReasonLabels {
    tenant: String,
    reason: String,
}

/// Per-tenant metrics (docs/tenants.md). Tenant names come from the tenants file, so the
/// label sets are bounded by it.
#[derive(Debug)]
struct TenantMetrics {
    admitted: Family<TenantPriorityLabels, Counter>,
    refused: Family<TenantReasonLabels, Counter>,
    queue_wait: Family<TenantPriorityLabels, Histogram, fn() -> Histogram>,
    running: Family<TenantLabels, Gauge>,
    queued: Family<TenantLabels, Gauge>,
    sessions: Family<TenantLabels, Gauge>,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

/// The executor's metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    runs: Family<RunLabels, Counter>,
    phases: Family<PhaseLabels, Histogram, fn() -> Histogram>,
    pub busy_slots: Gauge,
    pub queue_length: Gauge,
    pub slots: Gauge,
    /// Stateful sessions alive (each holds a seat, and a slot only while a call runs).
    pub sessions: Gauge,
    /// Sessions this executor holds at most (`--max-sessions`).
    pub session_capacity: Gauge,
    /// Memory the sessions hold, as last measured, and their budget (`--session-memory-bytes`).
    pub session_memory: Gauge,
    pub session_memory_budget: Gauge,
    /// Bytes charged to the byte budget now, and its size (see `crate::budget`).
    pub inflight_bytes: Gauge,
    pub inflight_bytes_limit: Gauge,
    cache_hits: Family<CacheLabels, Counter>,
    cache_misses: Family<CacheLabels, Counter>,
    cache_evictions: Counter,
    cache_entries: Gauge,
    cache_bytes: Gauge,
    tenants: TenantMetrics,
    /// Tenants file changes swapped in, and refused (see `crate::tenants::Tenants::watch`).
    pub tenants_reloads: Counter,
    pub tenants_reload_errors: Counter,
    http_requests: Family<HttpLabels, Counter>,
    /// What the watchdog finds stuck now (see `crate::watchdog`): runs far past their limits,
    /// blocking-pool work far past its bound, run slots held past their allowance; and how
    /// often liveness turned NOT_SERVING.
    pub stuck_runs: Gauge,
    pub stuck_blocking: Gauge,
    pub stuck_slots: Gauge,
    pub not_serving: Counter,
    exhausted: Family<ReasonLabels, Counter>,
    session_drain: Family<OutcomeLabels, Counter>,
    /// Store reads made to find a paused sandbox for an E2B data-plane call
    /// (`session::lookups` bounds them).
    pub session_store_lookups: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// What a drain did with a live session (`sandpool_session_drain_total{outcome}`).
const DRAIN_OUTCOMES: [&str; 3] = ["paused", "failed", "timed_out"];

/// A pipeline phase whose latency is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Queue,
    Compile,
    Run,
    /// A session's Python interpreter, from its start to its end (its kill, mostly: at the
    /// session's end, or a call past its wall time).
    Interpreter,
}

impl Phase {
    /// Whether a run of this phase that is dropped before it ends (its kill) is recorded too.
    /// A request's phases are latencies of results: one whose caller went away or whose
    /// deadline passed mid-run is not, as a queue wait the caller left is not. An
    /// interpreter's life nearly always ends in a kill (the session's end), so it is.
    fn counts_when_dropped(self) -> bool {
        self == Phase::Interpreter
    }
}

/// Times a phase from [`Metrics::time`]: recorded by [`Timed::end`], or when dropped for
/// a phase that [counts when dropped](Phase::counts_when_dropped).
#[must_use = "the phase is recorded by `end` (or when dropped, for an interpreter)"]
pub struct Timed<'a> {
    metrics: &'a Metrics,
    phase: Phase,
    started: std::time::Instant,
    ended: bool,
}

impl Timed<'_> {
    /// The run ended: records its time.
    pub fn end(mut self) {
        self.ended = true;
    }
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        if self.ended || self.phase.counts_when_dropped() {
            self.metrics.observe(self.phase, self.started.elapsed().as_secs_f64());
        }
    }
}

impl Metrics {
    /// Registers every metric under the `sandpool` prefix.
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::with_prefix("sandpool");
        let runs = Family::<RunLabels, Counter>::default();
        let phases = Family::<PhaseLabels, Histogram>::new_with_constructor(latency_histogram as fn() -> Histogram);
        let (busy_slots, queue_length, slots) = (Gauge::default(), Gauge::default(), Gauge::default());
        registry.register("runs", "Executions by language and final verdict", runs.clone());
        registry.register(
            "phase_duration_seconds",
            "Latency per phase (queue, compile, run; interpreter: a session interpreter's life)",
            phases.clone(),
        );
        registry.register("busy_slots", "Run slots in use", busy_slots.clone());
        registry.register("queue_length", "Requests waiting for a run slot", queue_length.clone());
        registry.register("slots", "Run slots in total", slots.clone());
        let sessions = Gauge::default();
        registry.register(
            "sessions",
            "Stateful sessions alive (each holds a run slot only while a call of it runs)",
            sessions.clone(),
        );
        let (session_capacity, session_memory, session_memory_budget) =
            (Gauge::default(), Gauge::default(), Gauge::default());
        registry.register(
            "session_capacity",
            "Sessions this executor holds at most (--max-sessions)",
            session_capacity.clone(),
        );
        registry.register(
            "session_memory_bytes",
            "Memory the open sessions hold, measured from their cgroups (each at least --session-idle-bytes)",
            session_memory.clone(),
        );
        registry.register(
            "session_memory_budget_bytes",
            "Memory the sessions may hold together (--session-memory-bytes)",
            session_memory_budget.clone(),
        );
        let (inflight_bytes, inflight_bytes_limit) = (Gauge::default(), Gauge::default());
        registry.register(
            "inflight_bytes",
            "Bytes held for callers now: request bodies, streamed requests, files read for replies",
            inflight_bytes.clone(),
        );
        registry.register(
            "inflight_bytes_limit",
            "Most bytes held for callers at once (--max-inflight-bytes)",
            inflight_bytes_limit.clone(),
        );
        let (cache_hits, cache_misses) = (Family::default(), Family::default());
        let (cache_evictions, cache_entries, cache_bytes) = (Counter::default(), Gauge::default(), Gauge::default());
        registry.register(
            "result_cache_hits",
            "Requests answered from the result cache, by kind (execute, evaluate)",
            cache_hits.clone(),
        );
        registry.register(
            "result_cache_misses",
            "Requests the result cache could not answer, by kind",
            cache_misses.clone(),
        );
        registry.register(
            "result_cache_evictions",
            "Responses dropped from the result cache to stay within its bounds",
            cache_evictions.clone(),
        );
        registry.register(
            "result_cache_entries",
            "Responses in the result cache",
            cache_entries.clone(),
        );
        registry.register(
            "result_cache_bytes",
            "Bytes the result cache holds (encoded responses and overhead)",
            cache_bytes.clone(),
        );
        let tenants = TenantMetrics {
            admitted: Family::default(),
            refused: Family::default(),
            queue_wait: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            running: Family::default(),
            queued: Family::default(),
            sessions: Family::default(),
        };
        registry.register(
            "tenant_admitted",
            "Runs given a slot, by tenant and priority (an Evaluate's compile and each test count)",
            tenants.admitted.clone(),
        );
        registry.register(
            "tenant_refused",
            "Slot requests refused, by tenant and reason (queue_full, deadline, draining)",
            tenants.refused.clone(),
        );
        registry.register(
            "tenant_queue_wait_seconds",
            "Time runs waited for a slot, by tenant and priority",
            tenants.queue_wait.clone(),
        );
        registry.register(
            "tenant_running",
            "Runs holding a slot now, by tenant",
            tenants.running.clone(),
        );
        registry.register(
            "tenant_queued",
            "Requests waiting for a slot now, by tenant",
            tenants.queued.clone(),
        );
        registry.register(
            "tenant_sessions",
            "Sessions open now, by tenant",
            tenants.sessions.clone(),
        );
        let (tenants_reloads, tenants_reload_errors) = (Counter::default(), Counter::default());
        registry.register(
            "tenants_reloads",
            "Changes of the tenants file swapped in while running",
            tenants_reloads.clone(),
        );
        registry.register(
            "tenants_reload_errors",
            "Changes of the tenants file refused (the old table stayed); see the log",
            tenants_reload_errors.clone(),
        );
        let http_requests = Family::default();
        registry.register(
            "http_requests",
            "HTTP API requests answered, by protocol (sandboxfusion, scalebox, piston) and status code",
            http_requests.clone(),
        );
        let (stuck_runs, stuck_blocking, stuck_slots, not_serving) =
            (Gauge::default(), Gauge::default(), Gauge::default(), Counter::default());
        registry.register(
            "watchdog_stuck_runs",
            "Runs far past their wall-time limit now (liveness is NOT_SERVING while any is)",
            stuck_runs.clone(),
        );
        registry.register(
            "watchdog_stuck_blocking",
            "File and process work on the blocking pool far past its bound now (liveness is NOT_SERVING while any is)",
            stuck_blocking.clone(),
        );
        registry.register(
            "watchdog_stuck_slots",
            "Run slots held past their allowance (longer than any request may take) now (liveness is NOT_SERVING while any is)",
            stuck_slots.clone(),
        );
        registry.register(
            "watchdog_not_serving",
            "Times the watchdog turned liveness NOT_SERVING (a stuck run, run slot or blocking-pool work)",
            not_serving.clone(),
        );
        let exhausted = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "resource_exhausted",
            "Requests refused for want of an executor resource (RESOURCE_EXHAUSTED, HTTP 429/503), by reason \
             (queue_full, inflight_bytes, sessions, session_memory, tenant_sessions)",
            exhausted.clone(),
        );
        // Known label values are exported from the start, so a dashboard shows 0, not "no
        // data", and a rule's series exists before the first refusal.
        for reason in Exhaustion::ALL {
            let _ = exhausted.get_or_create(&ReasonLabels { reason: reason.label() });
        }
        let session_drain = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "session_drain",
            "Live sessions at shutdown, by what the drain did with each: paused (resumed by its next call on \
             any executor), failed or timed_out (lost)",
            session_drain.clone(),
        );
        for outcome in DRAIN_OUTCOMES {
            let _ = session_drain.get_or_create(&OutcomeLabels { outcome });
        }
        let session_store_lookups = Counter::default();
        registry.register(
            "session_store_lookups",
            "Store reads made to find a paused sandbox for an E2B data-plane call (one per tenant served, \
             bounded by a token bucket)",
            session_store_lookups.clone(),
        );
        for phase in PHASES {
            let _ = phases.get_or_create(&PhaseLabels {
                phase: phase.to_owned(),
            });
        }
        Arc::new(Metrics {
            exhausted,
            session_drain,
            session_store_lookups,
            stuck_runs,
            stuck_blocking,
            stuck_slots,
            not_serving,
            http_requests,
            registry,
            tenants,
            tenants_reloads,
            tenants_reload_errors,
            runs,
            phases,
            busy_slots,
            queue_length,
            slots,
            sessions,
            session_capacity,
            session_memory,
            session_memory_budget,
            inflight_bytes,
            inflight_bytes_limit,
            cache_hits,
            cache_misses,
            cache_evictions,
            cache_entries,
            cache_bytes,
        })
    }

    /// Counts one finished execution.
    pub fn run_finished(&self, language: &str, verdict: &str) {
        self.runs
            .get_or_create(&RunLabels {
                language: language.to_owned(),
                verdict: verdict.to_owned(),
            })
            .inc();
    }

    /// Counts one result-cache lookup of a `kind` request.
    pub fn cache_lookup(&self, kind: &str, hit: bool) {
        let family = if hit { &self.cache_hits } else { &self.cache_misses };
        family.get_or_create(&CacheLabels { kind: kind.to_owned() }).inc();
    }

    /// Records a store into the result cache: entries evicted by it, and the cache's size after.
    pub fn cache_stored(&self, evicted: u64, entries: usize, bytes: u64) {
        self.cache_evictions.inc_by(evicted);
        self.cache_entries.set(entries as i64);
        self.cache_bytes.set(bytes as i64);
    }

    /// Counts one live session a drain `outcome` ("paused", "failed", "timed_out").
    pub fn session_drained(&self, outcome: &'static str) {
        self.session_drain.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// Counts a request refused for want of `reason`.
    pub fn exhausted(&self, reason: Exhaustion) {
        self.exhausted_counter(reason).inc();
    }

    /// The counter of `reason`'s refusals, for a component that counts them itself.
    pub fn exhausted_counter(&self, reason: Exhaustion) -> Counter {
        self.exhausted
            .get_or_create(&ReasonLabels { reason: reason.label() })
            .clone()
    }

    /// Exports `tenants`' admission series from the start: 0 runs admitted at each priority
    /// and 0 refused for each reason (a tenant added later gets them when the file reloads).
    pub fn tenants_known<'a>(&self, tenants: impl IntoIterator<Item = &'a str>) {
        for tenant in tenants {
            for priority in crate::tenants::Priority::ALL {
                let l = TenantPriorityLabels {
                    tenant: tenant.to_owned(),
                    priority: priority.name().to_owned(),
                };
                let _ = self.tenants.admitted.get_or_create(&l);
            }
            for reason in TENANT_REFUSALS {
                let l = TenantReasonLabels {
                    tenant: tenant.to_owned(),
                    reason: reason.to_owned(),
                };
                let _ = self.tenants.refused.get_or_create(&l);
            }
        }
    }

    /// Counts a run of `tenant` given a slot at `priority` after `waited` seconds.
    pub fn tenant_admitted(&self, tenant: &str, priority: &str, waited: f64) {
        let l = TenantPriorityLabels {
            tenant: tenant.to_owned(),
            priority: priority.to_owned(),
        };
        self.tenants.admitted.get_or_create(&l).inc();
        self.tenants.queue_wait.get_or_create(&l).observe(waited);
    }

    /// Counts a slot request of `tenant` refused for `reason`.
    pub fn tenant_refused(&self, tenant: &str, reason: &str) {
        let l = TenantReasonLabels {
            tenant: tenant.to_owned(),
            reason: reason.to_owned(),
        };
        self.tenants.refused.get_or_create(&l).inc();
    }

    /// Sets `tenant`'s runs and waiting requests now.
    pub fn tenant_load(&self, tenant: &str, running: usize, queued: usize) {
        let l = TenantLabels {
            tenant: tenant.to_owned(),
        };
        self.tenants.running.get_or_create(&l).set(running as i64);
        self.tenants.queued.get_or_create(&l).set(queued as i64);
    }

    /// Sets `tenant`'s open sessions now.
    pub fn tenant_sessions(&self, tenant: &str, sessions: usize) {
        let l = TenantLabels {
            tenant: tenant.to_owned(),
        };
        self.tenants.sessions.get_or_create(&l).set(sessions as i64);
    }

    /// Counts an HTTP API request of `protocol` answered with `code`.
    pub fn http_request(&self, protocol: &'static str, code: u16) {
        self.http_requests.get_or_create(&HttpLabels { protocol, code }).inc();
    }

    /// Times `phase` from now (see [`Timed`]).
    pub fn time(&self, phase: Phase) -> Timed<'_> {
        Timed {
            metrics: self,
            phase,
            started: std::time::Instant::now(),
            ended: false,
        }
    }

    /// Records a phase's duration.
    pub fn observe(&self, phase: Phase, seconds: f64) {
        let phase = match phase {
            Phase::Queue => "queue",
            Phase::Compile => "compile",
            Phase::Run => "run",
            Phase::Interpreter => "interpreter",
        };
        self.phases
            .get_or_create(&PhaseLabels {
                phase: phase.to_owned(),
            })
            .observe(seconds);
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(m: &Metrics, phase: &str) -> usize {
        let line = format!("sandpool_phase_duration_seconds_count{{phase=\"{phase}\"}} ");
        m.encode()
            .lines()
            .find_map(|l| l.strip_prefix(&line)?.parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn a_dropped_run_counts_only_for_an_interpreter() {
        let m = Metrics::new();
        m.time(Phase::Run).end();
        drop(m.time(Phase::Run));
        assert_eq!(count(&m, "run"), 1, "an ended run counts, one its caller left does not");
        drop(m.time(Phase::Interpreter));
        m.time(Phase::Interpreter).end();
        assert_eq!(
            count(&m, "interpreter"),
            2,
            "an interpreter's life counts, killed or ended"
        );
    }

    #[test]
    fn known_label_values_are_exported_from_the_start_and_refusals_count_by_reason() {
        let m = Metrics::new();
        m.tenants_known(["anonymous"]);
        let text = m.encode();
        for reason in [
            "queue_full",
            "inflight_bytes",
            "sessions",
            "session_memory",
            "tenant_sessions",
        ] {
            assert!(
                text.contains(&format!("sandpool_resource_exhausted_total{{reason=\"{reason}\"}} 0")),
                "{text}"
            );
        }
        assert!(
            text.contains("sandpool_tenant_refused_total{tenant=\"anonymous\",reason=\"queue_full\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("sandpool_tenant_admitted_total{tenant=\"anonymous\",priority=\"batch\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("sandpool_phase_duration_seconds_count{phase=\"compile\"} 0"),
            "{text}"
        );

        m.exhausted(Exhaustion::Sessions);
        m.exhausted_counter(Exhaustion::InflightBytes).inc_by(2);
        let text = m.encode();
        assert!(
            text.contains("sandpool_resource_exhausted_total{reason=\"sessions\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sandpool_resource_exhausted_total{reason=\"inflight_bytes\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("sandpool_resource_exhausted_total{reason=\"queue_full\"} 0"),
            "{text}"
        );
    }
}
