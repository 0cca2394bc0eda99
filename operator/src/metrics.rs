//! Prometheus metrics of the reconcile loop, and each pool's readiness.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::crd::SandboxPool;

/// Labels of [`Metrics::reconcile_errors`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Short error class, e.g. `api` or `conflict`.
    pub error: String,
}

/// The error classes of [`Metrics::reconcile_errors`] (`crate::reconcile::Error::class`),
/// each exported from the start: a dashboard shows 0, not "no data", and an alert's series
/// exists before the first failure.
pub const RECONCILE_ERRORS: [&str; 6] = [
    "missing_namespace",
    "conflict",
    "api",
    "serialize",
    "status",
    "namespace",
];

/// Labels of [`Metrics::child_writes`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// Kind of the child object.
    pub kind: String,
    /// `created`, `updated` or `deleted`.
    pub outcome: String,
}

/// Labels of [`Metrics::pool_sessions_open`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    /// The pool's namespace.
    pub namespace: String,
    /// The pool's name.
    pub pool: String,
}

/// `sandpool_operator_pool_ready`: 1 per pool whose Ready condition is True, 0 per pool
/// that is not (or has no status yet). Read from the controller's cache at each scrape, so
/// a deleted pool's series goes with it; no series while this replica does not lead.
#[derive(Clone, Debug, Default)]
pub struct PoolReadiness {
    store: Arc<Mutex<Option<Store<SandboxPool>>>>,
}

impl PoolReadiness {
    /// Reports the pools of `store` (the leader's controller cache); `None` reports none.
    pub fn watch(&self, store: Option<Store<SandboxPool>>) {
        *self.store.lock().unwrap_or_else(|e| e.into_inner()) = store;
    }
}

impl Collector for PoolReadiness {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let family = Family::<PoolLabels, Gauge>::default();
        if let Some(store) = self.store.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            for pool in store.state() {
                let ready = pool.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == crate::status::READY && c.status == "True")
                });
                let labels = PoolLabels {
                    namespace: pool.namespace().unwrap_or_default(),
                    pool: pool.name_any(),
                };
                family.get_or_create(&labels).set(i64::from(ready));
            }
        }
        let metric = encoder.encode_descriptor(
            "pool_ready",
            "1 while a pool's Ready condition is True, else 0 (reported by the leader only)",
            None,
            family.metric_type(),
        )?;
        family.encode(metric)
    }
}

/// A family described (`# HELP`, `# TYPE`) even while it has no series: a scrape names every
/// metric the operator exports, also one that is absent on purpose until it is known.
#[derive(Debug)]
struct Described<M>(M);

impl<M: EncodeMetric> EncodeMetric for Described<M> {
    fn encode(&self, encoder: prometheus_client::encoding::MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        self.0.metric_type()
    }
}

/// Every metric the operator exports.
#[derive(Clone)]
pub struct Metrics {
    /// Reconciles started.
    pub reconciles: Counter,
    /// Reconciles that failed, by error class.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// Reconcile duration in seconds.
    pub reconcile_duration: Histogram,
    /// Writes to child objects (unchanged children are not counted).
    pub child_writes: Family<WriteLabels, Counter>,
    /// Status writes.
    pub status_writes: Counter,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge,
    /// Sessions open on a pool's pods, as the custom metrics API reported them at the last
    /// reconcile; no series while that API does not report them (never a stale value).
    pub pool_sessions_open: Family<PoolLabels, Gauge>,
    /// Each pool's readiness, from the controller's cache.
    pub pool_ready: PoolReadiness,
}

impl Default for Metrics {
    fn default() -> Self {
        let reconcile_errors = Family::default();
        for error in RECONCILE_ERRORS {
            let _ = reconcile_errors.get_or_create(&ErrorLabels {
                error: error.to_owned(),
            });
        }
        Self {
            reconciles: Counter::default(),
            reconcile_errors,
            // Up to 2 minutes: under a fill of 1,000 pools on a loaded API server a reconcile
            // takes tens of seconds, and a p99 in the +Inf bucket says nothing.
            reconcile_duration: Histogram::new([
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
            ]),
            child_writes: Family::default(),
            status_writes: Counter::default(),
            leader: Gauge::default(),
            pool_sessions_open: Family::default(),
            pool_ready: PoolReadiness::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric under the `sandpool_operator` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("sandpool_operator");
        r.register("reconciles", "Reconciles started", self.reconciles.clone());
        r.register(
            "reconcile_errors",
            "Reconciles that failed, by error class",
            self.reconcile_errors.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile",
            self.reconcile_duration.clone(),
        );
        r.register(
            "child_writes",
            "Writes to objects owned by pools, by kind and outcome",
            self.child_writes.clone(),
        );
        r.register(
            "status_writes",
            "Writes to SandboxPool status",
            self.status_writes.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader lease",
            self.leader.clone(),
        );
        r.register(
            "pool_sessions_open",
            "Sessions open on a pool's executor pods, from the custom metrics API (absent when it does not report them)",
            Described(self.pool_sessions_open.clone()),
        );
        r.register_collector(Box::new(self.pool_ready.clone()));
    }

    /// Records a pool's open sessions, or removes its series when they are unknown.
    pub fn set_pool_sessions_open(&self, namespace: &str, pool: &str, open: Option<i64>) {
        let labels = PoolLabels {
            namespace: namespace.to_owned(),
            pool: pool.to_owned(),
        };
        match open {
            Some(open) => {
                self.pool_sessions_open.get_or_create(&labels).set(open);
            }
            None => {
                self.pool_sessions_open.remove(&labels);
            }
        }
    }

    /// Records a finished reconcile.
    pub fn observe(&self, elapsed: Duration, error: Option<&str>) {
        self.reconcile_duration.observe(elapsed.as_secs_f64());
        if let Some(error) = error {
            self.reconcile_errors
                .get_or_create(&ErrorLabels {
                    error: error.to_owned(),
                })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    #[test]
    fn metrics_are_exported_with_their_names() {
        let metrics = Metrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.reconciles.inc();
        metrics.observe(Duration::from_millis(20), Some("api"));
        metrics.observe(Duration::from_secs(45), None);
        metrics
            .child_writes
            .get_or_create(&WriteLabels {
                kind: "Deployment".to_owned(),
                outcome: "created".to_owned(),
            })
            .inc();
        let mut text = String::new();
        encode(&mut text, &registry).expect("metrics encode");
        assert!(text.contains("sandpool_operator_reconciles_total 1"), "{text}");
        assert!(
            text.contains("sandpool_operator_reconcile_errors_total{error=\"api\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sandpool_operator_reconcile_errors_total{error=\"conflict\"} 0"),
            "every error class is exported from the start: {text}"
        );
        assert!(
            text.contains("sandpool_operator_reconcile_duration_seconds_count 2"),
            "{text}"
        );
        // A slow reconcile under load still lands in a finite bucket.
        assert!(
            text.contains("sandpool_operator_reconcile_duration_seconds_bucket{le=\"30.0\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sandpool_operator_reconcile_duration_seconds_bucket{le=\"60.0\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("sandpool_operator_child_writes_total{kind=\"Deployment\",outcome=\"created\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn open_sessions_are_a_gauge_per_pool_and_vanish_when_unknown() {
        let metrics = Metrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let text = |registry: &Registry| {
            let mut text = String::new();
            encode(&mut text, registry).expect("metrics encode");
            text
        };
        let out = text(&registry);
        assert!(
            out.contains("# TYPE sandpool_operator_pool_sessions_open gauge"),
            "described: {out}"
        );
        assert!(
            !out.contains("sandpool_operator_pool_sessions_open{"),
            "with no series: {out}"
        );
        metrics.set_pool_sessions_open("evals", "agents", Some(310));
        metrics.set_pool_sessions_open("evals", "python", Some(0));
        let out = text(&registry);
        assert!(
            out.contains("sandpool_operator_pool_sessions_open{namespace=\"evals\",pool=\"agents\"} 310"),
            "{out}"
        );
        metrics.set_pool_sessions_open("evals", "agents", None);
        let out = text(&registry);
        assert!(!out.contains("pool=\"agents\""), "{out}");
        assert!(out.contains("pool=\"python\"} 0"), "{out}");
    }

    #[test]
    fn pool_readiness_follows_the_cache_and_forgets_deleted_pools() {
        use kube::runtime::reflector::store;
        use kube::runtime::watcher::Event;
        use serde_json::json;

        let pool = |name: &str, ready: Option<&str>| -> SandboxPool {
            let mut value = json!({
                "apiVersion": "sandpool.dev/v1alpha1",
                "kind": "SandboxPool",
                "metadata": {"name": name, "namespace": "evals"},
                "spec": {},
            });
            if let Some(ready) = ready {
                value["status"] = json!({"conditions": [{
                    "type": "Ready", "status": ready, "reason": "R", "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }]});
            }
            serde_json::from_value(value).expect("pool parses")
        };
        let metrics = Metrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let text = |registry: &Registry| {
            let mut text = String::new();
            encode(&mut text, registry).expect("metrics encode");
            text
        };
        // Not leading: the metric is described, with no series.
        let out = text(&registry);
        assert!(out.contains("# TYPE sandpool_operator_pool_ready gauge"), "{out}");
        assert!(!out.contains("sandpool_operator_pool_ready{"), "{out}");

        let (reader, mut writer) = store::<SandboxPool>();
        metrics.pool_ready.watch(Some(reader));
        writer.apply_watcher_event(&Event::Apply(pool("up", Some("True"))));
        writer.apply_watcher_event(&Event::Apply(pool("down", Some("False"))));
        writer.apply_watcher_event(&Event::Apply(pool("new", None)));
        let out = text(&registry);
        assert!(
            out.contains("sandpool_operator_pool_ready{namespace=\"evals\",pool=\"up\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("sandpool_operator_pool_ready{namespace=\"evals\",pool=\"down\"} 0"),
            "{out}"
        );
        assert!(
            out.contains("sandpool_operator_pool_ready{namespace=\"evals\",pool=\"new\"} 0"),
            "{out}"
        );

        writer.apply_watcher_event(&Event::Delete(pool("down", Some("False"))));
        let out = text(&registry);
        assert!(!out.contains("pool=\"down\""), "{out}");

        metrics.pool_ready.watch(None);
        assert!(!text(&registry).contains("sandpool_operator_pool_ready{"));
    }
}
