use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus};
use k8s_openapi::api::core::v1::Pod;

use crate::diagnose::Observed;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::defaults::PoolDefaults;
use crate::resolve::resolve;

fn time(s: &str) -> Time {
    Time(s.parse::<Timestamp>().expect("test timestamp parses"))
}

fn pool(status: Option<SandboxPoolStatus>) -> SandboxPool {
    let mut p: SandboxPool = serde_json::from_value(json!({
        "apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
        "metadata": {"name": "python", "namespace": "evals", "uid": "u-1", "generation": 4},
        "spec": {"replicas": 3}
    }))
    .expect("test pool deserializes");
    p.status = status;
    p
}

fn deployment(status: DeploymentStatus) -> Deployment {
    let mut d = Deployment::default();
    d.metadata.generation = Some(7);
    d.status = Some(status);
    d
}

fn rolled_out(ready: i32) -> DeploymentStatus {
    DeploymentStatus {
        observed_generation: Some(7),
        replicas: Some(3),
        updated_replicas: Some(3),
        available_replicas: Some(3),
        ready_replicas: Some(ready),
        ..Default::default()
    }
}

fn summary(s: &SandboxPoolStatus) -> Vec<(String, String, String)> {
    s.conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

fn c(t: &str, s: &str, r: &str) -> (String, String, String) {
    (t.to_owned(), s.to_owned(), r.to_owned())
}

#[test]
fn a_rolled_out_pool_is_ready() {
    let p = pool(None);
    let r = resolve(&p, &PoolDefaults::default(), "x").expect("valid");
    let now = time("2026-01-01T00:00:00Z");
    let s = from_deployment(&p, &r, &deployment(rolled_out(3)), &none(), "cluster.local", &now);
    assert_eq!((s.replicas, s.ready_replicas, s.observed_generation), (3, 3, Some(4)));
    assert_eq!(
        s.endpoint.as_deref(),
        Some("dns:///python.evals.svc.cluster.local:50051")
    );
    assert_eq!(
        s.selector.as_deref(),
        Some("app.kubernetes.io/instance=python,app.kubernetes.io/name=sandpool-executor,sandpool.dev/pool=python")
    );
    assert_eq!(
        summary(&s),
        [
            c("Ready", "True", "AllReplicasReady"),
            c("Progressing", "False", "RolloutComplete"),
            c("Degraded", "False", "AsExpected")
        ]
    );
    assert!(
        s.conditions
            .iter()
            .all(|c| c.last_transition_time == now && c.observed_generation == Some(4))
    );
}

#[test]
fn transition_times_survive_unchanged_conditions() {
    let p = pool(None);
    let r = resolve(&p, &PoolDefaults::default(), "x").expect("valid");
    let first = from_deployment(
        &p,
        &r,
        &deployment(rolled_out(3)),
        &none(),
        "cluster.local",
        &time("2026-01-01T00:00:00Z"),
    );
    let p = pool(Some(first.clone()));
    let again = from_deployment(
        &p,
        &r,
        &deployment(rolled_out(3)),
        &none(),
        "cluster.local",
        &time("2026-01-02T00:00:00Z"),
    );
    assert_eq!(again, first, "nothing changed, so the status must be identical");
    let later = time("2026-01-03T00:00:00Z");
    let lost_one = from_deployment(&p, &r, &deployment(lost_pods(2)), &none(), "cluster.local", &later);
    assert_eq!(
        summary(&lost_one),
        [
            c("Ready", "False", "ReplicasNotReady"),
            c("Progressing", "False", "RolloutComplete"),
            c("Degraded", "True", "ReplicasUnavailable")
        ]
    );
    assert_eq!(lost_one.conditions[0].last_transition_time, later);
    assert_eq!(
        lost_one.conditions[1].last_transition_time,
        first.conditions[1].last_transition_time
    );
}

#[test]
fn rollouts_and_failures_are_reported() {
    let p = pool(None);
    let r = resolve(&p, &PoolDefaults::default(), "x").expect("valid");
    let now = time("2026-01-01T00:00:00Z");
    let mut rolling = rolled_out(3);
    rolling.updated_replicas = Some(1);
    rolling.replicas = Some(4);
    let s = from_deployment(&p, &r, &deployment(rolling), &none(), "cluster.local", &now);
    assert_eq!(
        summary(&s),
        [
            c("Ready", "True", "AllReplicasReady"),
            c("Progressing", "True", "RollingOut"),
            c("Degraded", "False", "AsExpected")
        ]
    );
    let mut stuck = rolled_out(0);
    stuck.conditions = Some(vec![
        DeploymentCondition {
            type_: "Progressing".to_owned(),
            status: "False".to_owned(),
            reason: Some("ProgressDeadlineExceeded".to_owned()),
            message: Some("ReplicaSet python-abc has timed out progressing.".to_owned()),
            ..Default::default()
        },
        DeploymentCondition {
            type_: "ReplicaFailure".to_owned(),
            status: "True".to_owned(),
            message: Some("pods \"python-x\" is forbidden: violates PodSecurity".to_owned()),
            ..Default::default()
        },
    ]);
    let s = from_deployment(&p, &r, &deployment(stuck), &none(), "cluster.local", &now);
    assert_eq!(
        summary(&s),
        [
            c("Ready", "False", "ReplicaFailure"),
            c("Progressing", "False", "ProgressDeadlineExceeded"),
            c("Degraded", "True", "ReplicaFailure")
        ]
    );
    assert!(s.conditions[2].message.contains("PodSecurity"));
    assert!(
        s.conditions[0]
            .message
            .starts_with("0/3 executors ready: the ReplicaSet cannot create executor pods"),
        "{}",
        s.conditions[0].message
    );
}

fn none() -> Observed {
    Observed::default()
}

fn pods(pod: Pod) -> Observed {
    Observed {
        pods: vec![pod],
        ..Default::default()
    }
}

fn crash_looping_pod(restarts: i32) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "python-abc-1", "namespace": "evals"},
        "status": {"phase": "Running", "containerStatuses": [{
            "name": "executor", "image": "e:1", "imageID": "", "ready": false, "restartCount": restarts,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "message": "cannot mount /var/lib/sandpool/mnt: EPERM"}}
        }]}
    }))
    .expect("test pod deserializes")
}

#[test]
fn a_crash_loop_is_the_reason_kubectl_get_shows_until_it_clears() {
    let p = pool(None);
    let r = resolve(&p, &PoolDefaults::default(), "x").expect("valid");
    let now = time("2026-01-01T00:00:00Z");
    let mut starting = rolled_out(0);
    starting.available_replicas = Some(0);
    let s = from_deployment(
        &p,
        &r,
        &deployment(starting.clone()),
        &pods(crash_looping_pod(3)),
        "cluster.local",
        &now,
    );
    assert_eq!(
        summary(&s),
        [
            c("Ready", "False", "CrashLoopBackOff"),
            c("Progressing", "True", "RollingOut"),
            c("Degraded", "True", "CrashLoopBackOff")
        ]
    );
    assert_eq!(
        s.conditions[0].message,
        "0/3 executors ready: pod python-abc-1: container executor keeps exiting (restarted 3 times; exited with code 1): cannot mount /var/lib/sandpool/mnt: EPERM"
    );
    assert!(s.conditions[2].message.starts_with("pod python-abc-1: "));

    // Another restart changes the message, not the transition time.
    let p = pool(Some(s.clone()));
    let later = time("2026-01-01T00:01:00Z");
    let again = from_deployment(
        &p,
        &r,
        &deployment(starting),
        &pods(crash_looping_pod(4)),
        "cluster.local",
        &later,
    );
    assert!(again.conditions[2].message.contains("restarted 4 times"));
    assert_eq!(
        again.conditions[2].last_transition_time,
        s.conditions[2].last_transition_time
    );

    // Fixed: the pods turn ready and the conditions go back to their plain reasons.
    let p = pool(Some(again));
    let fixed = from_deployment(&p, &r, &deployment(rolled_out(3)), &none(), "cluster.local", &later);
    assert_eq!(
        summary(&fixed),
        [
            c("Ready", "True", "AllReplicasReady"),
            c("Progressing", "False", "RolloutComplete"),
            c("Degraded", "False", "AsExpected")
        ]
    );
}

#[test]
fn a_crashing_surge_pod_degrades_a_pool_that_still_serves() {
    let p = pool(None);
    let r = resolve(&p, &PoolDefaults::default(), "x").expect("valid");
    let mut rolling = rolled_out(3);
    rolling.updated_replicas = Some(1);
    rolling.replicas = Some(4);
    let s = from_deployment(
        &p,
        &r,
        &deployment(rolling),
        &pods(crash_looping_pod(2)),
        "cluster.local",
        &time("2026-01-01T00:00:00Z"),
    );
    assert_eq!(
        summary(&s),
        [
            c("Ready", "True", "AllReplicasReady"),
            c("Progressing", "True", "RollingOut"),
            c("Degraded", "True", "CrashLoopBackOff")
        ]
    );
}

#[test]
fn a_passed_deadline_is_the_ready_reason_too() {
    let p = pool(None);
    let r = resolve(&p, &PoolDefaults::default(), "x").expect("valid");
    let mut stuck = rolled_out(0);
    stuck.conditions = Some(vec![DeploymentCondition {
        type_: "Progressing".to_owned(),
        status: "False".to_owned(),
        reason: Some("ProgressDeadlineExceeded".to_owned()),
        message: Some("ReplicaSet \"python-abc\" has timed out progressing.".to_owned()),
        ..Default::default()
    }]);
    let s = from_deployment(
        &p,
        &r,
        &deployment(stuck),
        &none(),
        "cluster.local",
        &time("2026-01-01T00:00:00Z"),
    );
    assert_eq!(
        summary(&s),
        [
            c("Ready", "False", "ProgressDeadlineExceeded"),
            c("Progressing", "False", "ProgressDeadlineExceeded"),
            c("Degraded", "True", "ProgressDeadlineExceeded")
        ]
    );
    // What the Deployment says stays in Progressing's message.
    assert_eq!(
        s.conditions[1].message,
        "ReplicaSet \"python-abc\" has timed out progressing."
    );
}

#[test]
fn only_an_unsettled_deployment_has_pods_worth_reading() {
    assert!(settled(&deployment(rolled_out(3)), 3));
    assert!(!settled(&deployment(rolled_out(2)), 3), "one not ready");
    assert!(!settled(&deployment(rolled_out(3)), 4), "scaling up");
    let mut surge = rolled_out(3);
    surge.replicas = Some(4);
    assert!(!settled(&deployment(surge), 3), "a surge pod exists");
    let mut stale = rolled_out(3);
    stale.observed_generation = Some(6);
    assert!(!settled(&deployment(stale), 3), "the controller has not seen the spec");
    let mut refused = rolled_out(3);
    refused.conditions = Some(vec![DeploymentCondition {
        type_: "ReplicaFailure".to_owned(),
        status: "True".to_owned(),
        ..Default::default()
    }]);
    assert!(!settled(&deployment(refused), 3));
    assert!(!settled(&Deployment::default(), 3), "no status yet");
    assert!(settled(
        &deployment(DeploymentStatus {
            observed_generation: Some(7),
            ..Default::default()
        }),
        0
    ));
}

#[test]
fn invalid_spec_keeps_counts_and_names_the_field() {
    let old = SandboxPoolStatus {
        replicas: 3,
        ready_replicas: 3,
        endpoint: Some("dns:///e".to_owned()),
        ..Default::default()
    };
    let p = pool(Some(old));
    let err = InvalidSpec {
        field: "spec.limits.wallTime".to_owned(),
        message: "bad".to_owned(),
    };
    let s = invalid(&p, &err, &time("2026-01-01T00:00:00Z"));
    assert_eq!(
        (s.replicas, s.ready_replicas, s.endpoint.as_deref()),
        (3, 3, Some("dns:///e"))
    );
    assert_eq!(
        summary(&s),
        [
            c("Ready", "False", "InvalidSpec"),
            c("Progressing", "False", "InvalidSpec"),
            c("Degraded", "True", "InvalidSpec")
        ]
    );
    assert_eq!(s.conditions[0].message, "spec.limits.wallTime: bad");
}

/// What Kubernetes reports once a pod of a finished rollout dies: available never exceeds
/// ready, and the replacement pod is counted as updated (same template) but not available.
fn lost_pods(left: i32) -> DeploymentStatus {
    DeploymentStatus {
        available_replicas: Some(left),
        ready_replicas: Some(left),
        unavailable_replicas: Some(3 - left),
        ..rolled_out(left)
    }
}

#[test]
fn a_pool_that_loses_pods_after_its_rollout_is_degraded() {
    let p = pool(None);
    let r = resolve(&p, &PoolDefaults::default(), "x").expect("valid");
    let done = from_deployment(
        &p,
        &r,
        &deployment(rolled_out(3)),
        &none(),
        "cluster.local",
        &time("2026-01-01T00:00:00Z"),
    );
    let p = pool(Some(done));
    let now = time("2026-01-02T00:00:00Z");
    let s = from_deployment(&p, &r, &deployment(lost_pods(2)), &none(), "cluster.local", &now);
    assert_eq!(
        summary(&s),
        [
            c("Ready", "False", "ReplicasNotReady"),
            c("Progressing", "False", "RolloutComplete"),
            c("Degraded", "True", "ReplicasUnavailable")
        ]
    );
    assert_eq!(
        s.conditions[2].message,
        "only 2/3 executors available after the rollout finished"
    );
    // It stays degraded (not "rolling out") until the pods are back.
    let p = pool(Some(s));
    let s = from_deployment(&p, &r, &deployment(lost_pods(1)), &none(), "cluster.local", &now);
    assert_eq!(summary(&s)[2], c("Degraded", "True", "ReplicasUnavailable"));
    let p = pool(Some(s));
    let s = from_deployment(&p, &r, &deployment(rolled_out(3)), &none(), "cluster.local", &now);
    assert_eq!(summary(&s)[2], c("Degraded", "False", "AsExpected"));
}

#[test]
fn the_deployments_own_verdict_marks_a_finished_rollout() {
    // After an operator restart with no status yet: the Deployment says its rollout finished.
    let p = pool(None);
    let r = resolve(&p, &PoolDefaults::default(), "x").expect("valid");
    let mut status = lost_pods(2);
    status.conditions = Some(vec![DeploymentCondition {
        type_: "Progressing".to_owned(),
        status: "True".to_owned(),
        reason: Some("NewReplicaSetAvailable".to_owned()),
        ..Default::default()
    }]);
    let now = time("2026-01-01T00:00:00Z");
    let s = from_deployment(&p, &r, &deployment(status), &none(), "cluster.local", &now);
    assert_eq!(summary(&s)[2], c("Degraded", "True", "ReplicasUnavailable"));
    // A first rollout whose pods are still starting is only progressing.
    let s = from_deployment(&p, &r, &deployment(lost_pods(2)), &none(), "cluster.local", &now);
    assert_eq!(
        summary(&s)[1..],
        [
            c("Progressing", "True", "RollingOut"),
            c("Degraded", "False", "AsExpected")
        ]
    );
}

/// A pool with `spec.sessions`, resolved.
fn sessions_pool(sessions: serde_json::Value) -> (SandboxPool, ResolvedPool) {
    let mut p = pool(None);
    p.spec = serde_json::from_value(json!({"replicas": 3, "sessions": sessions})).expect("spec deserializes");
    let r = resolve(&p, &PoolDefaults::default(), "x").expect("valid");
    (p, r)
}

#[test]
fn session_capacity_counts_the_ready_pods() {
    let (p, r) = sessions_pool(json!({"maxPerPod": 500, "idleMemory": "32Mi"}));
    let now = time("2026-01-01T00:00:00Z");
    let s = from_deployment(&p, &r, &deployment(rolled_out(2)), &none(), "cluster.local", &now);
    assert_eq!(
        s.sessions,
        Some(SessionsStatus {
            max_per_pod: 500,
            capacity: 1000,
            memory_per_pod: Some("16000Mi".to_owned()),
            ..Default::default()
        })
    );
    let wire = serde_json::to_value(&s).expect("status serializes");
    assert_eq!(
        wire["sessions"],
        json!({"maxPerPod": 500, "capacity": 1000, "memoryPerPod": "16000Mi"})
    );
    let s = from_deployment(
        &p,
        &r,
        &deployment(DeploymentStatus::default()),
        &none(),
        "cluster.local",
        &now,
    );
    assert_eq!(s.sessions.map(|x| x.capacity), Some(0));
}

#[test]
fn a_pool_without_sessions_says_so_and_one_without_the_field_shows_nothing() {
    let now = time("2026-01-01T00:00:00Z");
    let (p, r) = sessions_pool(json!({"maxPerPod": 0}));
    let s = from_deployment(&p, &r, &deployment(rolled_out(3)), &none(), "cluster.local", &now);
    assert_eq!(
        s.sessions,
        Some(SessionsStatus {
            max_per_pod: 0,
            capacity: 0,
            memory_per_pod: None,
            ..Default::default()
        })
    );
    // Unset: the executor's own cap applies, which the operator does not know.
    let p = pool(None);
    let r = resolve(&p, &PoolDefaults::default(), "x").expect("valid");
    let s = from_deployment(&p, &r, &deployment(rolled_out(3)), &none(), "cluster.local", &now);
    assert_eq!(s.sessions, None);
    assert!(
        serde_json::to_value(&s)
            .expect("status serializes")
            .get("sessions")
            .is_none()
    );
}

#[test]
fn a_refused_spec_keeps_the_last_session_capacity() {
    let (p, r) = sessions_pool(json!({"maxPerPod": 64}));
    let now = time("2026-01-01T00:00:00Z");
    let good = from_deployment(&p, &r, &deployment(rolled_out(3)), &none(), "cluster.local", &now);
    assert_eq!(good.sessions.as_ref().map(|s| s.capacity), Some(192));
    let p = pool(Some(good.clone()));
    let err = InvalidSpec {
        field: "spec.sessions.memory".to_owned(),
        message: "bad".to_owned(),
    };
    assert_eq!(invalid(&p, &err, &now).sessions, good.sessions);
}

#[test]
fn live_sessions_are_shown_when_reported_and_left_out_when_not() {
    let (p, r) = sessions_pool(json!({"maxPerPod": 200}));
    let now = time("2026-01-01T00:00:00Z");
    let s = from_deployment(&p, &r, &deployment(rolled_out(3)), &none(), "cluster.local", &now);
    let mut sessions = s.sessions.expect("a sessions pool has sessions status");
    let live = LiveSessions {
        open: 310,
        open_per_pod_max: 150,
        reporting_pods: 3,
    };
    set_live_sessions(&mut sessions, Some(live));
    assert_eq!(
        serde_json::to_value(&sessions).expect("serializes"),
        json!({"maxPerPod": 200, "capacity": 600, "memoryPerPod": "6400Mi",
               "open": 310, "openPerPodMax": 150, "reportingPods": 3})
    );
    // A later reconcile the metrics API does not answer drops them, not keeps stale ones.
    set_live_sessions(&mut sessions, None);
    assert_eq!(
        serde_json::to_value(&sessions).expect("serializes"),
        json!({"maxPerPod": 200, "capacity": 600, "memoryPerPod": "6400Mi"})
    );
}
