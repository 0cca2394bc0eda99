use serde_json::{Value, json};

use super::*;

fn item(name: &str, value: &str) -> Value {
    json!({
        "describedObject": {"kind": "Pod", "namespace": "evals", "name": name, "apiVersion": "/v1"},
        "metricName": "sandpool_sessions",
        "timestamp": "2026-01-01T00:00:00Z",
        "value": value,
    })
}

fn list(items: Vec<Value>) -> String {
    json!({"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta1",
           "metadata": {}, "items": items})
    .to_string()
}

fn live(open: i64, open_per_pod_max: i64, reporting_pods: i32) -> Option<LiveSessions> {
    Some(LiveSessions {
        open,
        open_per_pod_max,
        reporting_pods,
    })
}

#[test]
fn whole_and_milli_quantities_are_summed_per_pod() {
    let body = list(vec![
        item("agents-a", "3"),
        item("agents-b", "12"),
        item("agents-c", "0"),
    ]);
    assert_eq!(summarize(&body, "evals", None).expect("parses"), live(15, 12, 3));
    // An averaging rule answers in thousandths: 1.5 and 2.25 sessions round to 2 each.
    let body = list(vec![item("agents-a", "1500m"), item("agents-b", "2250m")]);
    assert_eq!(summarize(&body, "evals", None).expect("parses"), live(4, 2, 2));
    let body = list(vec![item("agents-a", "1k")]);
    assert_eq!(summarize(&body, "evals", None).expect("parses"), live(1000, 1000, 1));
}

#[test]
fn no_reporting_pod_is_unknown_not_zero() {
    assert_eq!(summarize(&list(vec![]), "evals", None).expect("parses"), None);
    assert_eq!(
        summarize(r#"{"kind": "MetricValueList"}"#, "evals", None).expect("parses"),
        None,
        "items missing"
    );
    assert!(summarize("<html>503</html>", "evals", None).is_err());
}

#[test]
fn items_that_are_not_this_pools_pods_are_skipped() {
    let mut node = item("node-1", "40");
    node["describedObject"]["kind"] = json!("Node");
    let mut elsewhere = item("agents-x", "50");
    elsewhere["describedObject"]["namespace"] = json!("other");
    let body = list(vec![
        item("agents-a", "4"),
        node,
        elsewhere,
        item("", "60"),
        item("agents-bad", "lots"),
        item("other-pool-a", "70"),
    ]);
    assert_eq!(summarize(&body, "evals", None).expect("parses"), live(74, 70, 2));
    let pool: BTreeSet<String> = ["agents-a".to_owned(), "agents-b".to_owned()].into();
    assert_eq!(
        summarize(&body, "evals", Some(&pool)).expect("parses"),
        live(4, 4, 1),
        "only the pool's pods, when their names are known"
    );
}

#[test]
fn a_pod_reported_twice_counts_once() {
    let body = list(vec![
        item("agents-a", "4"),
        item("agents-a", "6"),
        item("agents-b", "1"),
    ]);
    assert_eq!(summarize(&body, "evals", None).expect("parses"), live(7, 6, 2));
}

#[test]
fn the_request_selects_the_deployments_pods() {
    assert_eq!(
        request_uri("evals", "agents"),
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/evals/pods/*/sandpool_sessions\
         ?labelSelector=app.kubernetes.io%2Finstance%3Dagents%2Capp.kubernetes.io%2Fname%3Dsandpool-executor%2Csandpool.dev%2Fpool%3Dagents"
    );
    let uri: http::Uri = request_uri("evals", "agents").parse().expect("a valid URI");
    assert_eq!(
        uri.path(),
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/evals/pods/*/sandpool_sessions"
    );
}

#[test]
fn missing_adapter_rule_or_rbac_is_unavailable_not_a_fault() {
    let api = |code: u16| {
        FetchError::Api(kube::Error::Api(Box::new(
            kube::core::Status::failure("x", "y").with_code(code),
        )))
    };
    for code in [403, 404, 503] {
        assert!(api(code).unavailable(), "{code}");
    }
    assert!(!api(500).unavailable());
    assert!(!FetchError::Timeout(TIMEOUT).unavailable());
}
