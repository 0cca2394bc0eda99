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

/// The executor's metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    runs: Family<RunLabels, Counter>,
    phases: Family<PhaseLabels, Histogram>,
    pub busy_slots: Gauge,
    pub queue_length: Gauge,
    pub slots: Gauge,
    /// Stateful sessions alive (each holds a slot).
    pub sessions: Gauge,
    /// Bytes charged to the byte budget now, and its size (see `crate::budget`).
    pub inflight_bytes: Gauge,
    pub inflight_bytes_limit: Gauge,
    cache_hits: Family<CacheLabels, Counter>,
    cache_misses: Family<CacheLabels, Counter>,
    cache_evictions: Counter,
    cache_entries: Gauge,
    cache_bytes: Gauge,
}

/// A pipeline phase whose latency is recorded.
#[derive(Debug, Clone, Copy)]
pub enum Phase {
    Queue,
    Compile,
    Run,
}

impl Metrics {
    /// Registers every metric under the `sandpool` prefix.
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::with_prefix("sandpool");
        let runs = Family::<RunLabels, Counter>::default();
        let phases = Family::<PhaseLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 18))
        });
        let (busy_slots, queue_length, slots) = (Gauge::default(), Gauge::default(), Gauge::default());
        registry.register("runs", "Executions by language and final verdict", runs.clone());
        registry.register(
            "phase_duration_seconds",
            "Latency per phase (queue, compile, run)",
            phases.clone(),
        );
        registry.register("busy_slots", "Run slots in use", busy_slots.clone());
        registry.register("queue_length", "Requests waiting for a run slot", queue_length.clone());
        registry.register("slots", "Run slots in total", slots.clone());
        let sessions = Gauge::default();
        registry.register(
            "sessions",
            "Stateful sessions alive, each holding a run slot",
            sessions.clone(),
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
        Arc::new(Metrics {
            registry,
            runs,
            phases,
            busy_slots,
            queue_length,
            slots,
            sessions,
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

    /// Records a phase's duration.
    pub fn observe(&self, phase: Phase, seconds: f64) {
        let phase = match phase {
            Phase::Queue => "queue",
            Phase::Compile => "compile",
            Phase::Run => "run",
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
