//! `spec.sessions.store`, `pauseAfterIdle` and `drainGracePeriodSeconds`: each refusal names
//! its field.

use serde_json::{Value, json};

use super::resolve_spec;
use crate::crd::SecretKeyRef;
use crate::resolve::{ResolvedStore, StoreBackend};

fn store(sessions: Value) -> ResolvedStore {
    resolve_spec(json!({"sessions": sessions}))
        .expect("valid")
        .sessions
        .expect("sessions")
        .store
}

fn refused(sessions: Value) -> (String, String) {
    let err = resolve_spec(json!({"sessions": sessions})).expect_err("spec must be refused");
    (err.field, err.message)
}

#[test]
fn stores_resolve_to_their_backend() {
    assert_eq!(store(json!({"maxPerPod": 4})), ResolvedStore::default());
    assert_eq!(store(json!({"maxPerPod": 4})).backend, StoreBackend::PodLocal);
    assert_eq!(
        store(json!({"maxPerPod": 4, "store": {"pvc": {"claimName": "c"}, "ttl": "90m"}})),
        ResolvedStore {
            backend: StoreBackend::Pvc {
                claim_name: "c".to_owned()
            },
            ttl_secs: Some(5400),
            ..Default::default()
        }
    );
    let s3 = store(json!({"maxPerPod": 4, "store": {
        "s3": {"bucket": "b", "credentialsSecret": "creds", "prefix": ""},
        "encryptionKeySecret": {"name": "k", "key": "key"}}}));
    assert_eq!(
        s3.backend,
        StoreBackend::S3 {
            bucket: "b".to_owned(),
            endpoint: None,
            region: None,
            prefix: None,
            credentials_secret: "creds".to_owned()
        }
    );
    assert_eq!(
        s3.encryption_key,
        Some(SecretKeyRef {
            name: "k".to_owned(),
            key: "key".to_owned()
        })
    );
}

#[test]
fn bad_store_settings_name_their_field() {
    let key = json!({"name": "k", "key": "key"});
    let s3 = json!({"bucket": "b", "credentialsSecret": "creds"});
    let cases = [
        (
            json!({"maxPerPod": 4, "store": {"s3": s3}}),
            "spec.sessions.store.encryptionKeySecret",
            "is required with s3",
        ),
        (
            json!({"maxPerPod": 4, "store": {"s3": s3, "pvc": {"claimName": "c"}, "encryptionKeySecret": key}}),
            "spec.sessions.store",
            "set pvc or s3, not both",
        ),
        (
            json!({"maxPerPod": 4, "store": {"maxBlobSize": "lots"}}),
            "spec.sessions.store.maxBlobSize",
            "",
        ),
        (
            json!({"maxPerPod": 4, "store": {"tenantQuota": "0"}}),
            "spec.sessions.store.tenantQuota",
            "must be positive",
        ),
        (
            json!({"maxPerPod": 4, "store": {"ttl": "10000h"}}),
            "spec.sessions.store.ttl",
            "outside",
        ),
        (
            json!({"maxPerPod": 4, "pauseAfterIdle": "25h"}),
            "spec.sessions.pauseAfterIdle",
            "outside",
        ),
        (
            json!({"maxPerPod": 4, "pauseAfterIdle": "soon"}),
            "spec.sessions.pauseAfterIdle",
            "",
        ),
        (
            json!({"maxPerPod": 4, "drainGracePeriodSeconds": 5}),
            "spec.sessions.drainGracePeriodSeconds",
            "outside 15..=86400",
        ),
    ];
    for (sessions, field, words) in cases {
        let (f, message) = refused(sessions.clone());
        assert_eq!(f, field, "{sessions}");
        assert!(message.contains(words), "{sessions}: {message}");
    }
}

#[test]
fn pause_after_idle_is_in_ms() {
    let s = resolve_spec(json!({"sessions": {"maxPerPod": 4, "pauseAfterIdle": "1m30s"}}))
        .expect("valid")
        .sessions
        .expect("sessions");
    assert_eq!(s.pause_after_idle_ms, Some(90_000));
}

#[test]
fn restricted_pools_still_refuse_sessions_with_a_store() {
    let err = resolve_spec(json!({"isolation": {"mode": "restricted"},
        "sessions": {"maxPerPod": 4, "store": {"pvc": {"claimName": "c"}}}}))
    .expect_err("refused");
    assert_eq!(err.field, "spec.sessions");
}
