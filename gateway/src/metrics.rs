//! Prometheus metrics: requests by kind and outcome, retries, upstream errors, outstanding
//! requests per backend, backends known, request durations.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// `session` or `stateless`.
    kind: String,
    /// The status class answered (`2xx`...), or `error` when no response came.
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

/// The `kind`s of requests (`crate::proxy`).
pub const KINDS: [&str; 3] = ["session", "stateless", "list"];
/// The `outcome`s of requests: the status class answered, or `error` when no response came.
const OUTCOMES: [&str; 5] = ["2xx", "3xx", "4xx", "5xx", "error"];
/// The `reason`s of upstream errors: a [`crate::proxy::Failure`], or a refusal that was
/// retried elsewhere (`status_429`, `status_503`: [`crate::proxy::decide`]).
pub const UPSTREAM_ERRORS: [&str; 5] = ["connect", "reset", "other", "status_429", "status_503"];

/// The gateway's metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    pub retries: Counter,
    upstream_errors: Family<ReasonLabels, Counter>,
    outstanding: Family<BackendLabels, Gauge>,
    pub backends: Gauge,
    duration: Family<KindLabels, Histogram, fn() -> Histogram>,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 20))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sandpool_gateway");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by kind (session|stateless) and outcome (status class, or error)",
            requests.clone(),
        );
        let retries = Counter::default();
        registry.register(
            "retries",
            "Stateless requests sent again to another backend after one refused them",
            retries.clone(),
        );
        let upstream_errors = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "upstream_errors",
            "Failed attempts to get a response from a backend, by reason",
            upstream_errors.clone(),
        );
        let outstanding = Family::<BackendLabels, Gauge>::default();
        registry.register(
            "outstanding",
            "Requests sent to each backend whose responses have not ended",
            outstanding.clone(),
        );
        let backends = Gauge::default();
        registry.register("backends", "Backends known", backends.clone());
        let duration = Family::<KindLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        registry.register(
            "request_duration_seconds",
            "From a request's arrival to the end of its response body, by kind",
            duration.clone(),
        );
        // Known label values are exported from the start, so a dashboard shows 0, not "no
        // data", and an alert's series exists before the first error.
        for kind in KINDS {
            for outcome in OUTCOMES {
                let _ = requests.get_or_create(&RequestLabels {
                    kind: kind.into(),
                    outcome: outcome.into(),
                });
            }
            let _ = duration.get_or_create(&KindLabels { kind: kind.into() });
        }
        for reason in UPSTREAM_ERRORS {
            let _ = upstream_errors.get_or_create(&ReasonLabels { reason: reason.into() });
        }
        Metrics {
            registry,
            requests,
            retries,
            upstream_errors,
            outstanding,
            backends,
            duration,
        }
    }

    /// Counts a request answered with `status` (None: no response) and its duration.
    pub fn request_done(&self, kind: &str, status: Option<u16>, seconds: f64) {
        let outcome = match status {
            Some(s) => format!("{}xx", s / 100),
            None => "error".into(),
        };
        self.requests
            .get_or_create(&RequestLabels {
                kind: kind.into(),
                outcome,
            })
            .inc();
        self.duration
            .get_or_create(&KindLabels { kind: kind.into() })
            .observe(seconds);
    }

    pub fn upstream_error(&self, reason: &str) {
        self.upstream_errors
            .get_or_create(&ReasonLabels { reason: reason.into() })
            .inc();
    }

    pub fn set_outstanding(&self, backend: &str, n: u64) {
        self.outstanding
            .get_or_create(&BackendLabels {
                backend: backend.into(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Drops a backend's series once it is no longer in the set (pods come and go).
    pub fn forget_backend(&self, backend: &str) {
        self.outstanding.remove(&BackendLabels {
            backend: backend.into(),
        });
    }

    /// The text exposition.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        out
    }
}
