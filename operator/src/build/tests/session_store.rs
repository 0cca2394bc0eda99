//! `spec.sessions.store`, `pauseAfterIdle` and the grace period on the executor Deployment.

use serde_json::{Value, json};

use super::{resolved, to_json};
use crate::build::{deployment, executor_args};

fn store_args(sessions: Value) -> Vec<String> {
    executor_args(&resolved(json!({"sessions": sessions})))
        .into_iter()
        .filter(|a| a.starts_with("--session-store") || a.starts_with("--session-pause"))
        .collect()
}

fn pod(sessions: Value) -> Value {
    to_json(&deployment(&resolved(json!({"sessions": sessions}))))["spec"]["template"]["spec"].clone()
}

/// The pod's volumes and the executor's mounts whose name starts with `session-store`.
fn store_volumes(pod: &Value) -> (Value, Value) {
    let pick = |list: &Value| {
        Value::Array(
            list.as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["name"].as_str().is_some_and(|n| n.starts_with("session-store")))
                .cloned()
                .collect(),
        )
    };
    (pick(&pod["volumes"]), pick(&pod["containers"][0]["volumeMounts"]))
}

#[test]
fn without_a_store_the_pod_keeps_its_own_and_no_flag_is_written() {
    assert!(store_args(json!({"maxPerPod": 8})).is_empty());
    let (volumes, mounts) = store_volumes(&pod(json!({"maxPerPod": 8})));
    assert_eq!((volumes, mounts), (json!([]), json!([])));
}

#[test]
fn a_pvc_store_is_mounted_into_every_pod_and_named_to_the_executor() {
    let sessions = json!({"maxPerPod": 8, "pauseAfterIdle": "2m",
        "store": {"pvc": {"claimName": "sessions"}, "maxBlobSize": "512Mi", "tenantQuota": "20Gi", "ttl": "24h"}});
    assert_eq!(
        store_args(sessions.clone()),
        [
            "--session-pause-after-idle-ms=120000",
            "--session-store-dir=/var/lib/sandpool-session-store",
            "--session-store-blob-bytes=536870912",
            "--session-store-tenant-bytes=21474836480",
            "--session-store-ttl-secs=86400",
        ]
    );
    let (volumes, mounts) = store_volumes(&pod(sessions));
    assert_eq!(
        volumes,
        json!([{"name": "session-store", "persistentVolumeClaim": {"claimName": "sessions"}}])
    );
    assert_eq!(
        mounts,
        json!([{"name": "session-store", "mountPath": "/var/lib/sandpool-session-store"}])
    );
}

#[test]
fn an_s3_store_mounts_its_credentials_and_key_as_the_executor_reads_them() {
    let sessions = json!({"maxPerPod": 8, "store": {
        "s3": {"bucket": "agents", "endpoint": "http://seaweed.storage:8333", "region": "eu-west-1",
               "prefix": "pool-a", "credentialsSecret": "s3-creds"},
        "encryptionKeySecret": {"name": "store-key", "key": "hex"}}});
    assert_eq!(
        store_args(sessions.clone()),
        [
            "--session-store-s3-bucket=agents",
            "--session-store-s3-endpoint=http://seaweed.storage:8333",
            "--session-store-s3-region=eu-west-1",
            "--session-store-s3-credentials-dir=/etc/sandpool/session-store-s3",
            "--session-store-prefix=pool-a",
            "--session-store-key-file=/etc/sandpool/session-store-key/key",
        ]
    );
    let (volumes, mounts) = store_volumes(&pod(sessions));
    assert_eq!(
        volumes,
        json!([
            {"name": "session-store-s3", "secret": {"secretName": "s3-creds", "defaultMode": 0o400, "optional": false,
                "items": [{"key": "access_key_id", "path": "access_key_id"},
                          {"key": "secret_access_key", "path": "secret_access_key"}]}},
            {"name": "session-store-key", "secret": {"secretName": "store-key", "defaultMode": 0o400, "optional": false,
                "items": [{"key": "hex", "path": "key"}]}},
        ])
    );
    assert_eq!(
        mounts,
        json!([
            {"name": "session-store-s3", "mountPath": "/etc/sandpool/session-store-s3", "readOnly": true},
            {"name": "session-store-key", "mountPath": "/etc/sandpool/session-store-key", "readOnly": true},
        ])
    );
}

#[test]
fn a_pool_serving_no_sessions_gets_no_store() {
    assert!(store_args(json!({"maxPerPod": 0, "store": {"pvc": {"claimName": "x"}}})).is_empty());
    let (volumes, _) = store_volumes(&pod(json!({"maxPerPod": 0, "store": {"pvc": {"claimName": "x"}}})));
    assert_eq!(volumes, json!([]));
}

fn grace(sessions: Value) -> (String, i64) {
    let pool = resolved(json!({"sessions": sessions}));
    let drain = executor_args(&pool)
        .into_iter()
        .find(|a| a.starts_with("--drain-timeout-ms="))
        .expect("drain flag");
    let pod = to_json(&deployment(&pool))["spec"]["template"]["spec"].clone();
    (drain, pod["terminationGracePeriodSeconds"].as_i64().expect("grace"))
}

#[test]
fn the_grace_period_grows_with_the_sessions_to_pause_and_is_bounded() {
    // No sessions sized: the runs' drain (2 x 60 s + 5 s) and 10 s.
    let pool = resolved(json!({}));
    assert_eq!(pool.drain_timeout_ms(), 125_000);
    assert_eq!(pool.termination_grace_seconds(), 135);
    // 8 sessions of 256Mi at 100Mi/s: 20.48 s more.
    assert_eq!(
        grace(json!({"maxPerPod": 8})),
        ("--drain-timeout-ms=145480".to_owned(), 156)
    );
    // 500 sessions would take 21 min: bounded at 15 min in all.
    assert_eq!(
        grace(json!({"maxPerPod": 500})),
        ("--drain-timeout-ms=890000".to_owned(), 900)
    );
    // The pool's own figure wins, both ways.
    assert_eq!(
        grace(json!({"maxPerPod": 500, "drainGracePeriodSeconds": 3600})),
        ("--drain-timeout-ms=3590000".to_owned(), 3600)
    );
    assert_eq!(
        grace(json!({"maxPerPod": 8, "drainGracePeriodSeconds": 30})),
        ("--drain-timeout-ms=20000".to_owned(), 30)
    );
    // A pool serving no sessions keeps the runs' drain.
    assert_eq!(
        grace(json!({"maxPerPod": 0})),
        ("--drain-timeout-ms=125000".to_owned(), 135)
    );
}

#[test]
fn runs_longer_than_the_bound_keep_their_drain() {
    let pool = resolved(json!({"limits": {"maxWallTime": "10m"}, "sessions": {"maxPerPod": 500}}));
    // 2 x 10 min + 5 s is past 15 min: the sessions add nothing, the runs lose nothing.
    assert_eq!(pool.drain_timeout_ms(), 1_205_000);
    // The gateway waits only for requests, never for pauses.
    let small = resolved(json!({"sessions": {"maxPerPod": 500}}));
    assert_eq!(small.runs_termination_grace_seconds(), 135);
}
