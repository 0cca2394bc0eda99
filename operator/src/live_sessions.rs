//! Live sessions on a pool's executor pods, read from the custom metrics API
//! (`custom.metrics.k8s.io`): the `sandpool_sessions` pods metric the HPA recipe
//! (`manifests/examples/hpa-sessions.yaml`) scales on, which prometheus-adapter serves from
//! what Prometheus scraped off the executors.
//!
//! The operator asks the API server, never the pods: their NetworkPolicy admits only the
//! pool's clients and metrics scrapers, and a status field is not worth widening that.
//!
//! Optional by design. Without an adapter (404, 503), without its rule for the metric
//! (404) or without RBAC (403), the live counts are unknown and the status leaves them out;
//! nothing here fails or holds up a reconcile for long ([`TIMEOUT`]).
//!
//! [`summarize`] (pure) turns the API's answer into the counts; [`fetch`] is the request.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Deserialize;

use crate::labels;
use crate::units;

/// The executors' gauge of open sessions, as the adapter rule names it.
pub const METRIC: &str = "sandpool_sessions";
/// How long a reconcile waits for the metrics API: the counts are a convenience, and the
/// reconcile has conditions to write.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// Open sessions on a pool's pods, as the metrics API reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LiveSessions {
    /// Sessions open on the reporting pods together.
    pub open: i64,
    /// The most sessions open on one reporting pod.
    pub open_per_pod_max: i64,
    /// Pods the metrics API answered for.
    pub reporting_pods: i32,
}

/// Why the live counts could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The metrics API took longer than [`TIMEOUT`].
    #[error("the custom metrics API did not answer within {0:?}")]
    Timeout(Duration),
    /// The request could not be built (a namespace or pool name no URI takes).
    #[error("building the custom metrics request: {0}")]
    Request(#[source] http::Error),
    /// The API server (or the adapter behind it) refused or failed the request.
    #[error("reading {METRIC} from the custom metrics API: {0}")]
    Api(#[source] kube::Error),
    /// The answer was not a `MetricValueList`.
    #[error("the custom metrics API's answer is not a MetricValueList: {0}")]
    Parse(#[source] serde_json::Error),
}

impl FetchError {
    /// Whether the metric is simply not on offer here: the API is not served or has no such
    /// metric (404), the adapter is down or not installed (503), or the operator may not read
    /// it (403). These are configurations, not faults, and are expected every reconcile.
    pub fn unavailable(&self) -> bool {
        matches!(self, FetchError::Api(kube::Error::Api(status)) if matches!(status.code, 403 | 404 | 503))
    }
}

/// `custom.metrics.k8s.io/v1beta1` `MetricValueList`, only the fields read here.
#[derive(Debug, Deserialize)]
struct MetricValueList {
    #[serde(default)]
    items: Vec<MetricValue>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetricValue {
    #[serde(default)]
    described_object: DescribedObject,
    /// A Kubernetes quantity (`12`, `1500m`).
    #[serde(default)]
    value: String,
}

#[derive(Debug, Default, Deserialize)]
struct DescribedObject {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

/// The request's path and query: every pod the pool's Deployment selects (the same labels
/// as its selector, [`labels::selector_string`]), in the pool's namespace.
pub fn request_uri(namespace: &str, pool: &str) -> String {
    format!(
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/*/{METRIC}?labelSelector={}",
        // Encoded, so the selector's `=`, `,` and `/` reach the API server as data.
        form_urlencoded::byte_serialize(labels::selector_string(pool).as_bytes()).collect::<String>()
    )
}

/// The counts in a `MetricValueList` body for pods in `namespace`, optionally only those
/// named in `only` (the pool's pods, when the reconcile listed them: an adapter that ignored
/// the label selector must not add another pool's sessions). A pod reported twice counts
/// once (its last value); an item that is not a pod or whose value is not a quantity is
/// skipped. `None` when no pod of the pool reported: no evidence is not "0 open".
pub fn summarize(
    body: &str,
    namespace: &str,
    only: Option<&BTreeSet<String>>,
) -> Result<Option<LiveSessions>, serde_json::Error> {
    let list: MetricValueList = serde_json::from_str(body)?;
    let mut per_pod: BTreeMap<&str, i64> = BTreeMap::new();
    for item in &list.items {
        let object = &item.described_object;
        let is_pod = object.kind.is_empty() || object.kind == "Pod";
        let here = object.namespace.is_empty() || object.namespace == namespace;
        let ours = only.is_none_or(|names| names.contains(&object.name));
        if !is_pod || !here || !ours || object.name.is_empty() {
            continue;
        }
        let Ok(value) = units::quantity(&item.value) else {
            continue;
        };
        per_pod.insert(&object.name, whole_sessions(value));
    }
    if per_pod.is_empty() {
        return Ok(None);
    }
    Ok(Some(LiveSessions {
        open: per_pod.values().fold(0i64, |sum, n| sum.saturating_add(*n)),
        open_per_pod_max: per_pod.values().copied().max().unwrap_or(0),
        reporting_pods: i32::try_from(per_pod.len()).unwrap_or(i32::MAX),
    }))
}

/// A pod's sessions, to the nearest whole one: an adapter rule that averages series may
/// answer `1500m`, and a session count is a whole number.
fn whole_sessions(value: units::Milli) -> i64 {
    let rounded = value.milli().saturating_add(500) / 1000;
    i64::try_from(rounded).unwrap_or(i64::MAX)
}

/// Reads the live session counts of `pool`'s pods in `namespace` (see [`summarize`] for
/// `only`), giving up after [`TIMEOUT`].
pub async fn fetch(
    client: &kube::Client,
    namespace: &str,
    pool: &str,
    only: Option<&BTreeSet<String>>,
) -> Result<Option<LiveSessions>, FetchError> {
    let request = http::Request::get(request_uri(namespace, pool))
        .body(Vec::new())
        .map_err(FetchError::Request)?;
    // request_text, not request: kube's `request` logs a body it cannot parse at warn, and
    // a broken adapter must not fill the log every reconcile.
    let body = tokio::time::timeout(TIMEOUT, client.request_text(request))
        .await
        .map_err(|_| FetchError::Timeout(TIMEOUT))?
        .map_err(FetchError::Api)?;
    summarize(&body, namespace, only).map_err(FetchError::Parse)
}

#[cfg(test)]
mod tests;
