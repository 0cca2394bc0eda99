//! Backends from a Service: its EndpointSlices' ready endpoints (and its terminating ones,
//! which still hold sessions while they drain), watched, the set swapped whole on each change.

use crate::backends::Backends;
use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The label EndpointSlices carry naming their Service.
const SERVICE_LABEL: &str = "kubernetes.io/service-name";

/// The executors of a Service's endpoints, each as (pod name, `host:port`), sorted by name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Discovered {
    /// Ready: any request may go there.
    pub live: Vec<(String, String)>,
    /// Terminating (their pods are being deleted): only the calls of the sessions they
    /// hold, which they answer until their drain has paused them into the store.
    pub draining: Vec<(String, String)>,
}

/// The executors of `slices`' endpoints with the port named `port_name`: ready ones live,
/// terminating ones draining, the rest (starting, failing their probe) left out. An endpoint
/// without a pod reference is named by its address (no session id can name it, but
/// stateless requests can go there).
pub fn backends_of<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>, port_name: &str) -> Discovered {
    let (mut live, mut draining) = (BTreeMap::new(), BTreeMap::new());
    for slice in slices {
        let port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or_default() == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok());
        let Some(port) = port else {
            continue;
        };
        for ep in &slice.endpoints {
            let conditions = ep.conditions.as_ref();
            let terminating = conditions.and_then(|c| c.terminating) == Some(true);
            // A nil `ready` means unknown, which the API says to read as ready.
            let ready = conditions.and_then(|c| c.ready) != Some(false);
            let out = match (terminating, ready) {
                (true, _) => &mut draining,
                (false, true) => &mut live,
                (false, false) => continue,
            };
            let Some(ip) = ep.addresses.first() else {
                continue;
            };
            let addr = if ip.contains(':') {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            };
            let name = ep
                .target_ref
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_else(|| addr.clone());
            out.entry(name).or_insert(addr);
        }
    }
    // A name both live and terminating (two slices disagreeing for a moment) is live.
    draining.retain(|name, _| !live.contains_key(name));
    Discovered {
        live: live.into_iter().collect(),
        draining: draining.into_iter().collect(),
    }
}

fn apply(backends: &Backends, d: Discovered) {
    backends.replace_with_draining(d.live, d.draining);
}

/// Watches `service`'s EndpointSlices in `namespace` and keeps `backends` at their ready
/// (and terminating) endpoints, until the task is dropped. Watch errors are retried with backoff; the set
/// in place stays meanwhile.
pub async fn watch(
    client: kube::Client,
    namespace: String,
    service: String,
    port_name: String,
    backends: Arc<Backends>,
) {
    let api: kube::Api<EndpointSlice> = kube::Api::namespaced(client, &namespace);
    let cfg = watcher::Config::default().labels(&format!("{SERVICE_LABEL}={service}"));
    let mut events = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut slices: BTreeMap<String, EndpointSlice> = BTreeMap::new();
    // Slices listed since the last (re)start, swapped in whole when the listing ends.
    let mut listing: Option<BTreeMap<String, EndpointSlice>> = None;
    let key = |s: &EndpointSlice| s.metadata.name.clone().unwrap_or_default();
    while let Some(ev) = events.next().await {
        match ev {
            Ok(Event::Init) => listing = Some(BTreeMap::new()),
            Ok(Event::InitApply(s)) => {
                listing.get_or_insert_with(BTreeMap::new).insert(key(&s), s);
            }
            Ok(Event::InitDone) => {
                slices = listing.take().unwrap_or_default();
                apply(&backends, backends_of(slices.values(), &port_name));
            }
            Ok(Event::Apply(s)) => {
                slices.insert(key(&s), s);
                apply(&backends, backends_of(slices.values(), &port_name));
            }
            Ok(Event::Delete(s)) => {
                slices.remove(&key(&s));
                apply(&backends, backends_of(slices.values(), &port_name));
            }
            Err(e) => tracing::warn!(error = %e, %service, %namespace, "watching EndpointSlices"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

    fn endpoint(pod: Option<&str>, ip: &str, ready: Option<bool>) -> Endpoint {
        Endpoint {
            addresses: vec![ip.into()],
            conditions: Some(EndpointConditions {
                ready,
                ..Default::default()
            }),
            target_ref: pod.map(|p| ObjectReference {
                kind: Some("Pod".into()),
                name: Some(p.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn slice(ports: &[(&str, i32)], endpoints: Vec<Endpoint>) -> EndpointSlice {
        EndpointSlice {
            address_type: "IPv4".into(),
            endpoints,
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p)| EndpointPort {
                        name: Some((*n).into()),
                        port: Some(*p),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn ready_endpoints_with_the_named_port() {
        let a = slice(
            &[("grpc", 50051), ("http", 8000)],
            vec![
                endpoint(Some("pool-a"), "10.0.0.1", Some(true)),
                endpoint(Some("pool-b"), "10.0.0.2", Some(false)),
                endpoint(Some("pool-c"), "10.0.0.3", None),
            ],
        );
        let b = slice(&[("http", 8000)], vec![endpoint(Some("pool-d"), "fd00::4", Some(true))]);
        let no_port = slice(
            &[("grpc", 50051)],
            vec![endpoint(Some("pool-e"), "10.0.0.5", Some(true))],
        );
        let got = backends_of([&a, &b, &no_port], "http");
        assert!(got.draining.is_empty());
        assert_eq!(
            got.live,
            [
                ("pool-a".to_string(), "10.0.0.1:8000".to_string()),
                ("pool-c".into(), "10.0.0.3:8000".into()),
                ("pool-d".into(), "[fd00::4]:8000".into()),
            ]
        );
    }

    /// The watch against a fake API server: the listing's ready endpoints become the set,
    /// then a slice's change swaps it whole.
    #[tokio::test]
    async fn watch_keeps_the_set_at_the_ready_endpoints() {
        use bytes::Bytes;
        use http_body_util::{BodyExt, StreamBody};
        use std::sync::Mutex;
        let mut s = slice(
            &[("http", 8000)],
            vec![
                endpoint(Some("pool-a"), "10.0.0.1", Some(true)),
                endpoint(Some("pool-b"), "10.0.0.2", Some(true)),
            ],
        );
        s.metadata.name = Some("pool-abcde".into());
        s.metadata.resource_version = Some("1".into());
        let mut changed = s.clone();
        changed.endpoints[0].conditions = Some(EndpointConditions {
            ready: Some(false),
            ..Default::default()
        });
        changed.metadata.resource_version = Some("2".into());
        let list = serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
            "metadata": {"resourceVersion": "1"}, "items": [s],
        });
        let mut event = serde_json::json!({"type": "MODIFIED", "object": changed}).to_string();
        event.push('\n');
        let queries = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
        let (q, release) = (queries.clone(), std::sync::Arc::new(tokio::sync::Notify::new()));
        let rel = release.clone();
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let query = req.uri().query().unwrap_or_default().to_owned();
            q.lock().expect("lock").push(query.clone());
            let (list, event, rel) = (list.to_string(), event.clone(), rel.clone());
            async move {
                let body = if query.contains("watch=true") {
                    // One change once the test has seen the listing, then an open stream.
                    let first = futures::stream::once(async move {
                        rel.notified().await;
                        Ok::<_, std::convert::Infallible>(http_body::Frame::data(Bytes::from(event)))
                    });
                    StreamBody::new(first.chain(futures::stream::pending())).boxed_unsync()
                } else {
                    http_body_util::Full::new(Bytes::from(list))
                        .map_err(|n| match n {})
                        .boxed_unsync()
                };
                Ok::<_, std::convert::Infallible>(http::Response::new(body))
            }
        });
        let client = kube::Client::new(svc, "ns");
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let backends = Arc::new(Backends::new(metrics));
        let task = tokio::spawn(watch(
            client,
            "ns".into(),
            "pool".into(),
            "http".into(),
            backends.clone(),
        ));
        let names = |b: &Backends| -> Vec<String> { b.snapshot().list.iter().map(|b| b.name.clone()).collect() };
        let wait_for = |want: Vec<&'static str>| {
            let b = backends.clone();
            async move {
                for _ in 0..500 {
                    if names(&b) == want {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                panic!("backends {:?}, wanted {want:?}", names(&b));
            }
        };
        wait_for(vec!["pool-a", "pool-b"]).await;
        release.notify_one();
        wait_for(vec!["pool-b"]).await;
        task.abort();
        let qs = queries.lock().expect("lock").clone();
        assert!(
            qs.iter()
                .all(|q| q.contains("labelSelector=kubernetes.io%2Fservice-name%3Dpool")),
            "{qs:?}"
        );
    }

    #[test]
    fn endpoints_without_a_pod_are_named_by_address() {
        let s = slice(&[("http", 80)], vec![endpoint(None, "10.0.0.9", Some(true))]);
        assert_eq!(
            backends_of([&s], "http").live,
            [("10.0.0.9:80".to_string(), "10.0.0.9:80".to_string())]
        );
    }

    #[test]
    fn terminating_endpoints_are_draining_whatever_their_readiness() {
        let term = |pod, ip, serving| {
            let mut e = endpoint(Some(pod), ip, Some(false));
            e.conditions = Some(EndpointConditions {
                ready: Some(false),
                serving: Some(serving),
                terminating: Some(true),
            });
            e
        };
        let s = slice(
            &[("http", 80)],
            vec![
                endpoint(Some("new"), "10.0.0.1", Some(true)),
                term("old-a", "10.0.0.2", true),
                term("old-b", "10.0.0.3", false),
                endpoint(Some("starting"), "10.0.0.4", Some(false)),
            ],
        );
        let got = backends_of([&s], "http");
        assert_eq!(got.live, [("new".to_string(), "10.0.0.1:80".to_string())]);
        assert_eq!(
            got.draining,
            [
                ("old-a".to_string(), "10.0.0.2:80".to_string()),
                ("old-b".into(), "10.0.0.3:80".into())
            ]
        );
    }
}
