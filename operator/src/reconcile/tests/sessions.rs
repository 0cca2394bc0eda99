//! Live sessions through the reconcile loop: read from the custom metrics API (never from
//! the pods) into `status.sessions`, and left out, without failing anything, when that API
//! does not serve them.

use super::*;

const METRICS: &str = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/evals/pods/*/sandpool_sessions";

fn sessions_spec() -> Value {
    let mut spec = spec();
    spec["sessions"] = json!({"maxPerPod": 200});
    spec
}

fn metric(pod: &str, value: &str) -> Value {
    json!({"describedObject": {"kind": "Pod", "namespace": "evals", "name": pod, "apiVersion": "/v1"},
           "metricName": "sandpool_sessions", "timestamp": "2026-01-01T00:00:00Z", "value": value})
}

fn metric_list(items: Vec<Value>) -> Reply {
    get(
        METRICS,
        json!({"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta1",
               "metadata": {}, "items": items}),
    )
}

/// A settled sessions pool whose last status says `previous_open` sessions were open.
fn settled_sessions_pool(previous_open: Option<i64>) -> (SandboxPool, Vec<Reply>) {
    let mut pool = pool(sessions_spec(), 1);
    let mut status = settled_status(&pool, 3);
    if let Some(sessions) = status.sessions.as_mut() {
        sessions.open = previous_open;
        sessions.open_per_pod_max = previous_open;
        sessions.reporting_pods = previous_open.map(|_| 3);
    }
    pool.status = Some(status);
    let [sa, np, svc, pdb, deploy] = live_children(&pool, 3);
    let children = vec![
        get(SA, sa),
        get(NP, np),
        get(SVC, svc),
        get(PDB, pdb),
        get(DEPLOY, deploy),
        get_missing(CM),
        get_missing(GW_NP),
    ];
    (pool, children)
}

fn open_sessions_gauge(ctx: &Context) -> Vec<String> {
    let mut registry = prometheus_client::registry::Registry::default();
    ctx.metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("metrics encode");
    text.lines()
        .filter(|l| l.starts_with("sandpool_operator_pool_sessions_open{"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn open_sessions_come_from_the_custom_metrics_api_into_the_status() {
    let (pool, mut replies) = settled_sessions_pool(None);
    replies.extend([
        metric_list(vec![
            metric("python-7d9-a", "120"),
            metric("python-7d9-b", "1500m"),
            metric("python-7d9-c", "38"),
        ]),
        apply(STATUS),
    ]);
    let (result, seen, ctx) = run(pool, replies).await;
    // Counts that come from somewhere are kept fresh: the pool is looked at again soon.
    assert_eq!(result.expect("reconcile succeeds"), Action::requeue(LIVE_RESYNC));
    let request = &seen[7];
    assert_eq!((&request.method, request.path.as_str()), (&Method::GET, METRICS));
    assert_eq!(
        request.query,
        "labelSelector=app.kubernetes.io%2Finstance%3Dpython%2Capp.kubernetes.io%2Fname%3Dsandpool-executor%2Csandpool.dev%2Fpool%3Dpython",
        "the pods the pool's Deployment selects"
    );
    let status = &seen[8];
    status.assert_apply();
    assert_eq!(
        status.body["status"]["sessions"],
        json!({"maxPerPod": 200, "capacity": 600, "memoryPerPod": "6400Mi",
               "open": 160, "openPerPodMax": 120, "reportingPods": 3})
    );
    assert_eq!(
        open_sessions_gauge(&ctx),
        ["sandpool_operator_pool_sessions_open{namespace=\"evals\",pool=\"python\"} 160"]
    );
}

#[tokio::test]
async fn without_the_metrics_api_the_live_fields_go_and_the_reconcile_succeeds() {
    for (code, reason) in [(404, "NotFound"), (503, "ServiceUnavailable"), (403, "Forbidden")] {
        // The last status had counts: they must not outlive the source that gave them.
        let (pool, mut replies) = settled_sessions_pool(Some(42));
        replies.extend([
            api_error(
                Method::GET,
                METRICS,
                code,
                reason,
                "the server could not find the requested resource",
            ),
            apply(STATUS),
        ]);
        let (result, seen, ctx) = run(pool, replies).await;
        assert_eq!(
            result.unwrap_or_else(|e| panic!("{code}: reconcile fails: {e}")),
            Action::requeue(RESYNC)
        );
        assert_eq!(
            seen[8].body["status"]["sessions"],
            json!({"maxPerPod": 200, "capacity": 600, "memoryPerPod": "6400Mi"}),
            "{code}"
        );
        assert_eq!(condition(&seen[8].body["status"], "Ready").1, "AllReplicasReady");
        assert!(open_sessions_gauge(&ctx).is_empty(), "{code}");
    }
}

#[tokio::test]
async fn unready_pods_listed_by_the_reconcile_bound_whose_sessions_count() {
    let mut pool = pool(sessions_spec(), 1);
    pool.status = Some(settled_status(&pool, 3));
    let [sa, np, svc, pdb, mut deploy] = live_children(&pool, 3);
    deploy["status"]["readyReplicas"] = json!(2);
    deploy["status"]["availableReplicas"] = json!(2);
    let pod = |name: &str| {
        json!({"metadata": {"name": name, "namespace": "evals", "labels": {"sandpool.dev/pool": "python"}},
               "spec": {"containers": [{"name": "executor"}]}, "status": {"phase": "Running"}})
    };
    let (result, seen, _ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy),
            get_missing(CM),
            get_missing(GW_NP),
            list_pods(vec![pod("python-7d9-a"), pod("python-7d9-b")]),
            // An adapter that ignored the selector: another pool's pod is in the answer.
            metric_list(vec![
                metric("python-7d9-a", "5"),
                metric("python-7d9-b", "7"),
                metric("python-gpu-5f1-x", "90"),
            ]),
            apply(STATUS),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    let sessions = &seen[9].body["status"]["sessions"];
    assert_eq!(
        (
            &sessions["open"],
            &sessions["openPerPodMax"],
            &sessions["reportingPods"]
        ),
        (&json!(12), &json!(7), &json!(2))
    );
}

#[tokio::test]
async fn a_pool_that_serves_no_sessions_does_not_ask() {
    let mut spec = spec();
    spec["sessions"] = json!({"maxPerPod": 0});
    let mut pool = pool(spec, 1);
    pool.status = Some(settled_status(&pool, 3));
    let [sa, np, svc, pdb, deploy] = live_children(&pool, 3);
    // The fake API server panics on a request it does not expect: no metrics request here.
    let (result, seen, _ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy),
            get_missing(CM),
            get_missing(GW_NP),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    assert!(seen.iter().all(|s| !s.path.contains("custom.metrics")), "{seen:?}");
}
